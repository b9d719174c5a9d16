#!/usr/bin/env bash
# Sequential write through the mount with compressed records off and lz4,
# or the modes MODES names (e.g. MODES="off lz4 zstd"; docs/PERFORMANCE.md,
# "Compressed records"): FILE copied with `dd bs=1M conv=fsync` onto a
# fresh 4 GiB image made with `lsfs mkfs --compress MODE`, default mount. Then the server is killed
# (SIGKILL, after the fsync) and the image mounted again: that mount's time
# is recovery's, reading the log from the last checkpoint.
#
# Usage: scripts/compress-bench.sh FILE ROUNDS LSFS [LSFS...]
# Each round runs every binary in every mode, the order turned round every
# other round, since other jobs' load moves while a round runs. Prints one
# line per run, then per binary and mode the medians, and each compressing
# mode's write speed as a share of off's (median against median).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
file=$(realpath "${1:?usage: compress-bench.sh FILE ROUNDS LSFS [LSFS...]}")
rounds=${2:?rounds}
shift 2
read -ra mode_list <<<"${MODES:-off lz4}"
bins=()
for b in "$@"; do bins+=("$(realpath "$b")"); done
((${#bins[@]} > 0)) || {
    echo "usage: compress-bench.sh FILE ROUNDS LSFS [LSFS...]" >&2
    exit 2
}

# shellcheck source=lib/lsfs-mount.sh
source "$here/lib/lsfs-mount.sh"
lsfs_workdir compress-bench
results=$work/results

now() { date +%s.%N; }

# run BIN_INDEX MODE: one copy and one recovery; appends a result line.
run() {
    local i=$1 mode=$2 lsfs=${bins[$1]} t0 t1 dev pid r0 r1
    rm -f "$img"
    "$lsfs" mkfs "$img" --size 4G --compress "$mode" >/dev/null
    LSFS_LOG=warn "$lsfs" mount "$img" "$mnt" --background >/dev/null 2>&1
    t0=$(now)
    dd if="$file" of="$mnt/f" bs=1M conv=fsync status=none
    t1=$(now)
    dev=$("$lsfs" stats --mount "$mnt" --json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["device"]["write_bytes"])')
    # By the image, not the binary's name: a binary under test may be called anything.
    pid=$(pgrep -f -- " mount $img " | head -1)
    [[ -n $pid ]] || { echo "compress-bench.sh: no server found for $img" >&2; exit 1; }
    kill -9 "$pid"
    wait_pid_exit "$pid" 10
    fuse_unmount "$mnt"
    r0=$(now)
    LSFS_LOG=warn "$lsfs" mount "$img" "$mnt" --background >/dev/null 2>&1
    r1=$(now)
    fuse_unmount "$mnt"
    wait_lsfs_exit "$img" 30
    printf '%s %s %.3f %s %.3f\n' "$i" "$mode" "$(awk "BEGIN{print $t1 - $t0}")" "$dev" \
        "$(awk "BEGIN{print $r1 - $r0}")" | tee -a "$results" >&2
}

echo "binary mode write_s device_bytes recovery_s" >&2
for ((r = 0; r < rounds; r++)); do
    modes=("${mode_list[@]}")
    if ((r % 2)); then
        modes=()
        for ((k = ${#mode_list[@]} - 1; k >= 0; k--)); do modes+=("${mode_list[k]}"); done
    fi
    for m in "${modes[@]}"; do
        for i in "${!bins[@]}"; do run "$i" "$m"; done
    done
done

python3 - "$results" "$(stat -c %s "$file")" "${mode_list[*]}" "${bins[@]}" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
size, modes, bins = int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
for i, b in enumerate(bins):
    med = {}
    for mode in modes:
        rs = [r for r in rows if r[0] == str(i) and r[1] == mode]
        w = statistics.median(float(r[2]) for r in rs)
        d = statistics.median(int(r[3]) for r in rs)
        rec = statistics.median(float(r[4]) for r in rs)
        med[mode] = w
        print(f"{b} {mode}: write {w:.3f} s ({size / w / 2**20:.0f} MiB/s), "
              f"device {d} B, recovery {rec:.3f} s, "
              f"writes {' '.join(r[2] for r in rs)}")
    for mode in modes:
        if mode != "off" and "off" in med:
            print(f"{b}: {mode}/off write speed {med['off'] / med[mode]:.2f}")
EOF
