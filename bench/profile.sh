#!/usr/bin/env bash
# Profiles the `lsfs mount` process under the workloads of scripts/bench.sh
# where lsfs falls short, on a fresh 4 GiB image:
#
#   bench/profile.sh [--out docs/bench/profile] [--seq-mb 256] [--rw-secs 10]
#
# For each phase it writes, into OUT:
#   PHASE.perf.txt      perf report of the lsfs process (self time, and
#                       inclusive time with callers), sampled at 499 Hz with
#                       DWARF call graphs
#   PHASE.fuse.txt      FUSE requests the kernel sent (tracepoint
#                       fuse:fuse_request_send): count and total/mean length
#                       per opcode
#   PHASE.stats.json    `lsfs stats` deltas over the phase
# Phases: seqwrite (fio default, which preallocates with fallocate),
# seqwrite-nofalloc (fio --fallocate=none), seqread (cold: remount and
# drop_caches), randwrite (4 KiB, fsync=1), postmark (bench/postmark.cfg with
# 2000 files and 5000 transactions, then syncfs).
# Needs root, perf (linux-perf) and a release build of lsfs.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$REPO/docs/bench/profile
SEQ_MB=256
RW_MB=128
RW_SECS=10
LSFS=${LSFS:-$REPO/target/release/lsfs}
while (($#)); do
    case $1 in
        --out) OUT=$2; shift ;;
        --seq-mb) SEQ_MB=$2; shift ;;
        --rw-secs) RW_SECS=$2; shift ;;
        *) echo "profile.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
[[ $(id -u) -eq 0 ]] || { echo "profile.sh: must run as root" >&2; exit 1; }
perf stat -e instructions true >/dev/null 2>&1 || { echo "profile.sh: perf does not work here" >&2; exit 1; }
mkdir -p "$OUT"
WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/lsfs-profile.XXXXXX")
IMG=$WORK/lsfs.img
MNT=$WORK/mnt
PID=""
PERF_PIDS=()

unmount() {
    [[ -n $PID ]] || return 0
    fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" || true
    local i
    for ((i = 0; i < 600; i++)); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PID" 2>/dev/null && kill "$PID" || true
    PID=""
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    local p
    for p in "${PERF_PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    unmount
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mount_lsfs() {
    mkdir -p "$MNT"
    "$LSFS" mount "$IMG" "$MNT" --background >/dev/null 2>>"$WORK/mount.log"
    PID=$(pgrep -f -x -- "$LSFS mount $IMG $MNT( --background)?" | head -n1)
}

# profile PHASE CMD...: runs CMD with perf sampling the lsfs process and
# tracing the FUSE requests.
profile() {
    local phase=$1
    shift
    "$LSFS" stats --mount "$MNT" --json >"$WORK/s0.json"
    perf record -q -F 499 --call-graph dwarf,16384 -p "$PID" -o "$WORK/$phase.data" 2>/dev/null &
    PERF_PIDS=($!)
    perf record -q -e fuse:fuse_request_send -a -o "$WORK/$phase.fuse.data" 2>/dev/null &
    PERF_PIDS+=($!)
    sleep 1
    "$@"
    local p
    for p in "${PERF_PIDS[@]}"; do kill -INT "$p"; wait "$p" || true; done
    PERF_PIDS=()
    "$LSFS" stats --mount "$MNT" --json >"$WORK/s1.json"
    python3 - "$WORK/s0.json" "$WORK/s1.json" >"$OUT/$phase.stats.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
gauges = {"capacity_blocks", "dirty_blocks", "resident_blocks"}  # levels, not counters
d = {g: {k: b[g][k] - a[g][k] for k in b[g] if isinstance(b[g][k], int) and k not in gauges}
     for g in ("device", "store", "cache") if g in b}
json.dump(d, sys.stdout, indent=2); print()
EOF
    # (|| true: head closes the pipe early, and perf may warn; pipefail is on.)
    {
        echo "# perf report, lsfs mount process, phase $phase: self time by symbol"
        perf report -i "$WORK/$phase.data" --no-children --stdio --percent-limit 1 \
            -g none --sort symbol 2>/dev/null | grep -v '^$' | grep -v '^# *$' || true
        echo
        echo "# inclusive time (self + callees) of lsfs and fuser functions, top 45"
        perf report -i "$WORK/$phase.data" --children --stdio --percent-limit 1 \
            -g none --sort symbol 2>/dev/null | grep -E '^ +[0-9.]+%.*(lsfs|fuser::|std::fs|pread|pwrite|fdatasync)' |
            head -45 || true
    } >"$OUT/$phase.perf.txt"
    local conn
    conn=$(mountpoint -d "$MNT" | cut -d: -f2)
    {
        echo "# FUSE requests sent by the kernel to this mount during $phase"
        echo "# (tracepoint fuse:fuse_request_send, connection $conn; len includes the request header)"
        echo "# opcode count total_len_bytes mean_len_bytes"
        perf script -i "$WORK/$phase.fuse.data" 2>/dev/null |
            sed -n "s/.*connection $conn req [0-9]* opcode [0-9]* (\([A-Z_]*\)) len \([0-9]*\).*/\1 \2/p" |
            awk '{n[$1]++; s[$1]+=$2} END {for (k in n) printf "%s %d %d %.0f\n", k, n[k], s[k], s[k]/n[k]}' |
            sort -k2,2nr || true
    } >"$OUT/$phase.fuse.txt"
    if [[ -n ${KEEP_PERF:-} ]]; then # KEEP_PERF=DIR keeps perf.data files for perf report
        mkdir -p "$KEEP_PERF" && mv "$WORK/$phase.data" "$WORK/$phase.fuse.data" "$KEEP_PERF/"
    else
        rm -f "$WORK/$phase.data" "$WORK/$phase.fuse.data"
    fi
}

FIO=(fio --ioengine=psync --numjobs=1 --output-format=normal)
"$LSFS" mkfs "$IMG" --size 4G >/dev/null
mount_lsfs
profile seqwrite "${FIO[@]}" --name=w --filename="$MNT/seq" --rw=write --bs=1M \
    --size="${SEQ_MB}M" --end_fsync=1 --output="$OUT/seqwrite.fio.txt"
profile seqwrite-nofalloc "${FIO[@]}" --name=w --filename="$MNT/seq2" --rw=write --bs=1M \
    --size="${SEQ_MB}M" --end_fsync=1 --fallocate=none --output="$OUT/seqwrite-nofalloc.fio.txt"
unmount
sync; echo 3 >/proc/sys/vm/drop_caches
mount_lsfs
profile seqread "${FIO[@]}" --name=r --filename="$MNT/seq2" --rw=read --bs=1M \
    --size="${SEQ_MB}M" --output="$OUT/seqread.fio.txt"
fio --name=prefill --filename="$MNT/rand" --rw=write --bs=1M --size="${RW_MB}M" \
    --end_fsync=1 --fallocate=none --output=/dev/null
profile randwrite "${FIO[@]}" --name=rw --filename="$MNT/rand" --rw=randwrite --bs=4k \
    --size="${RW_MB}M" --fsync=1 --time_based --runtime="$RW_SECS" --output="$OUT/randwrite.fio.txt"
mkdir -p "$MNT/pm"
sed -e "s|@LOCATION@|$MNT/pm|" -e "s|@NUMBER@|2000|" -e "s|@TRANSACTIONS@|5000|" \
    "$REPO/bench/postmark.cfg" | grep -v '^#' >"$WORK/postmark.cfg"
profile postmark bash -c 'postmark "$1" >"$2" && sync -f "$3"' _ "$WORK/postmark.cfg" \
    "$OUT/postmark.out.txt" "$MNT/pm"
echo "profile.sh: done; $OUT"
