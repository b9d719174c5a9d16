#!/usr/bin/env bash
# lsfs 4 KiB random write with fsync (as in scripts/bench.sh) on a sparse
# image versus an image whose blocks are all written (zero-filled) first,
# alternating, ROUNDS times each. A log appends to places it has never
# written, so on a sparse image every fdatasync also makes the host file
# system allocate blocks (and commit its journal); ext4 on a loop device
# overwrites its file's blocks in place after the prefill.
#
#   bench/sparse-vs-zeroed.sh [ROUNDS=3] [SECS=10]      (prints one line per run)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LSFS=${LSFS:-$REPO/target/release/lsfs}
ROUNDS=${1:-3}
SECS=${2:-10}
[[ $(id -u) -eq 0 ]] || { echo "must run as root" >&2; exit 1; }
WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/lsfs-sparse.XXXXXX")
IMG=$WORK/lsfs.img
MNT=$WORK/mnt
PID=""
unmount() {
    [[ -n $PID ]] || return 0
    fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" || true
    local i
    for ((i = 0; i < 600; i++)); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    PID=""
}
cleanup() { local rc=$?; trap - EXIT; unmount; rm -rf "$WORK"; exit "$rc"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$MNT"
one() { # one sparse|zeroed
    rm -f "$IMG"
    if [[ $1 = zeroed ]]; then
        dd if=/dev/zero of="$IMG" bs=4M count=1024 status=none
        sync
        "$LSFS" mkfs "$IMG" --force >/dev/null
    else
        "$LSFS" mkfs "$IMG" --size 4G >/dev/null
    fi
    "$LSFS" mount "$IMG" "$MNT" --background >/dev/null 2>&1
    PID=$(pgrep -f -x -- "$LSFS mount $IMG $MNT( --background)?" | head -n1)
    fio --name=prefill --filename="$MNT/rand" --rw=write --bs=1M --size=128M --end_fsync=1 \
        --ioengine=psync --output=/dev/null
    fio --name=randwrite --filename="$MNT/rand" --rw=randwrite --bs=4k --size=128M --fsync=1 \
        --time_based --runtime="$SECS" --randrepeat=1 --ioengine=psync --output-format=json |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]
print("%-6s iops %6.0f  fsync mean %6.0f us  p50 %6.0f us  write mean %5.0f us" % (sys.argv[1],
      j["write"]["iops"], j["sync"]["lat_ns"]["mean"]/1e3,
      j["sync"]["lat_ns"]["percentile"]["50.000000"]/1e3, j["write"]["clat_ns"]["mean"]/1e3))' "$1"
    unmount
}
for ((r = 1; r <= ROUNDS; r++)); do
    one sparse
    one zeroed
done
