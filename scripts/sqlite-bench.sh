#!/usr/bin/env bash
# SQLite's journal modes on lsfs and on ext4, btrfs and xfs, in one run, counted at the device.
#
#   scripts/sqlite-bench.sh [--out DIR] [--rounds N] [--fs "lsfs ext4 btrfs xfs"]
#                           [--transactions N]
#
# Each file system, in each round and mode, gets a fresh 512 MiB image file on a loop device
# (lsfs too: `lsfs mkfs /dev/loopN` and a FUSE mount with the default options, so every file
# system's writes and flushes are counted by the same kind of device), and `sqlite-tx` (the
# bundled SQLite of crates/lsfs-sqlite-tests, built with SQLITE_ENABLE_BATCH_ATOMIC_WRITE) runs
# --transactions small transactions one at a time (an insert of 3,000 bytes and an update of
# another row each, synchronous=FULL) in each mode:
#
#   rollback  journal_mode=DELETE with the rollback journal (lsfs: mounted -o no_atomic_writes,
#             so it answers F2FS's atomic-write ioctls ENOTTY as the others do)
#   batch     journal_mode=DELETE with lsfs's atomic-write ioctls (the default mount): SQLite
#             commits each transaction as one atomic batch, with no journal. lsfs only: the
#             others have no such ioctls, so their `batch` would be `rollback`
#   wal       journal_mode=WAL
#
# Per transaction: transactions per second (sqlite-tx's own clock), and what the loop device
# did from before the first transaction to right after the last (/sys/block/loopN/stat: sectors
# written, field 7, and flush requests, field 16): what the transactions' commits forced, not
# what the file system writes later on its own. Rounds alternate the order of the file systems;
# the report gives medians. Results in DIR/results.md and .json, raw outputs in DIR/raw.
#
# Needs root, losetup, mkfs.ext4/btrfs/xfs, fusermount3, python3, and a release build
# (cargo build --release -p lsfs -p lsfs-sqlite-tests). LSFS_MOUNT_ARGS adds words to `lsfs
# mount`. Everything this script mounts, attaches or creates is removed by an EXIT trap, also on
# failure or Ctrl-C.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$REPO/docs/bench/sqlite/latest
FSLIST="lsfs ext4 btrfs xfs"
ROUNDS=3
TX=1000
LSFS=${LSFS:-$REPO/target/release/lsfs}
SQLITE_TX=${SQLITE_TX:-$REPO/target/release/sqlite-tx}
DEV_MB=512

usage() { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while (($#)); do
    case $1 in
        --out) OUT=$2; shift ;;
        --rounds) ROUNDS=$2; shift ;;
        --fs) FSLIST=$2; shift ;;
        --transactions) TX=$2; shift ;;
        -h|--help) usage 0 ;;
        *) echo "sqlite-bench.sh: unknown argument $1" >&2; usage 2 >&2 ;;
    esac
    shift
done
[[ $OUT = /* ]] || OUT=$PWD/$OUT

PROG=sqlite-bench.sh
# shellcheck source=lib/peer-fs.sh
source "$REPO/scripts/lib/peer-fs.sh"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds needs a positive number"
[[ $TX =~ ^[1-9][0-9]*$ ]] || die "--transactions needs a positive number"
for fs in $FSLIST; do
    case $fs in lsfs|ext4|btrfs|xfs) ;; *) die "unknown file system $fs" ;; esac
done
[[ $(id -u) -eq 0 ]] || die "must run as root (losetup, mount)"
for tool in losetup mkfs.ext4 mkfs.btrfs mkfs.xfs fusermount3 python3 mountpoint; do
    command -v "$tool" >/dev/null || die "$tool not found; run scripts/install-deps.sh"
done
for bin in "$LSFS" "$SQLITE_TX"; do
    [[ -x $bin ]] || die "$bin not found; run: cargo build --release -p lsfs -p lsfs-sqlite-tests"
done

WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/lsfs-sqlite.XXXXXX")
RAW=$OUT/raw
mkdir -p "$OUT"
rm -rf "$RAW"
mkdir -p "$RAW"
peer_fs_trap

log() { echo "sqlite-bench.sh: $(date -u +%H:%M:%S) $*"; }
# devstat: "sectors_written flushes" of the current loop device.
devstat() { awk '{print $7, $16}' "/sys/block/$(basename "$CUR_LOOP")/stat"; }

modes_of() { if [[ $1 = lsfs ]]; then echo "rollback batch wal"; else echo "rollback wal"; fi; }

# run_one FS MODE ROUND: one measured run; appends a JSON line to $RAW/runs.jsonl.
run_one() {
    local fs=$1 mode=$2 round=$3 tag="$1-$2-r$3" journal=delete
    local -a mount_args=()
    [[ $mode = wal ]] && journal=wal
    [[ $fs = lsfs && $mode = rollback ]] && mount_args=(-o no_atomic_writes)
    CUR_FS=$fs
    CUR_IMG=$WORK/$fs.img
    attach_image "${DEV_MB}M"
    if [[ $fs = lsfs ]]; then
        "$LSFS" mkfs "$CUR_LOOP" >"$RAW/$tag.mkfs.txt" 2>&1
    else
        mkfs_peer "$fs" >"$RAW/$tag.mkfs.txt" 2>&1
    fi
    # shellcheck disable=SC2086 # LSFS_MOUNT_ARGS is a list of words
    mount_fs "$RAW/$tag.lsfs.log" "${mount_args[@]}" ${LSFS_MOUNT_ARGS:-}
    sync -f "$CUR_MNT"
    local s0 s1 out
    s0=$(devstat)
    out=$("$SQLITE_TX" --db "$CUR_MNT/db" --mode "$journal" --transactions "$TX" --json)
    s1=$(devstat)
    echo "$out" >"$RAW/$tag.sqlite-tx.json"
    python3 - "$fs" "$mode" "$round" "$TX" "$s0" "$s1" "$out" >>"$RAW/runs.jsonl" <<'PY'
import json, sys
fs, mode, rnd, tx, s0, s1, out = sys.argv[1:]
tx = int(tx)
w0, f0 = map(int, s0.split())
w1, f1 = map(int, s1.split())
r = json.loads(out)
print(json.dumps({
    "fs": fs, "mode": mode, "round": int(rnd), "transactions": tx,
    "tx_per_sec": r["tx_per_sec"], "batch_atomic": r["batch_atomic"],
    "kib_per_tx": (w1 - w0) * 512 / 1024 / tx, "flushes_per_tx": (f1 - f0) / tx,
}))
PY
    log "$tag: $(tail -n1 "$RAW/runs.jsonl")"
    teardown_fs
}

log "$ROUNDS round(s) of $TX transactions on: $FSLIST"
for ((round = 1; round <= ROUNDS; round++)); do
    order=$FSLIST
    if ((round % 2 == 0)); then order=$(echo "$FSLIST" | tr ' ' '\n' | tac | tr '\n' ' '); fi
    for fs in $order; do
        for mode in $(modes_of "$fs"); do
            run_one "$fs" "$mode" "$round"
        done
    done
done

cat >"$OUT/meta.json" <<JSON
{
  "command": "scripts/sqlite-bench.sh --rounds $ROUNDS --transactions $TX --fs \"$FSLIST\"",
  "date_utc": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  $(provenance_json),
  "machine": $(machine_json "\"sqlite\": \"bundled with libsqlite3-sys, SQLITE_ENABLE_BATCH_ATOMIC_WRITE\"")
}
JSON

python3 - "$RAW/runs.jsonl" "$OUT" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
out = sys.argv[2]
keys = []
for r in runs:
    k = (r["fs"], r["mode"])
    if k not in keys:
        keys.append(k)
med = {}
for k in keys:
    rs = [r for r in runs if (r["fs"], r["mode"]) == k]
    med[k] = {m: statistics.median(r[m] for r in rs)
              for m in ("tx_per_sec", "kib_per_tx", "flushes_per_tx")}
    med[k]["batch_atomic"] = all(r["batch_atomic"] for r in rs)
    med[k]["rounds"] = len(rs)
best_ext4 = max((v["tx_per_sec"] for (fs, _), v in med.items() if fs == "ext4"), default=None)
lines = ["| file system | mode | tx/s | tx/s ÷ ext4, same mode | tx/s ÷ ext4's best mode "
         "| KiB written per tx | flushes per tx | batch atomic used |",
         "|---|---|---|---|---|---|---|---|"]
for (fs, mode), v in med.items():
    same = med.get(("ext4", mode)) or (med.get(("ext4", "rollback")) if mode == "batch" else None)
    ratio = f"{v['tx_per_sec'] / same['tx_per_sec']:.2f}" if same else "–"
    best = f"{v['tx_per_sec'] / best_ext4:.2f}" if best_ext4 else "–"
    lines.append(f"| {fs} | {mode} | {v['tx_per_sec']:.0f} | {ratio} | {best} "
                 f"| {v['kib_per_tx']:.1f} | {v['flushes_per_tx']:.2f} | "
                 f"{'yes' if v['batch_atomic'] else 'no'} |")
note = ("Medians of the rounds. `batch` on lsfs is compared with ext4's `rollback` (the "
        "mode SQLite uses there for the same settings). Device counts are the loop device's "
        "from before the first transaction to right after the last.")
open(f"{out}/results.md", "w").write("# SQLite journal modes at the device\n\n"
                                     + "\n".join(lines) + "\n\n" + note + "\n")
json.dump({"runs": runs, "medians": {f"{fs}/{mode}": v for (fs, mode), v in med.items()}},
          open(f"{out}/results.json", "w"), indent=1)
print("\n".join(lines))
PY
log "results in $OUT/results.md"
