#!/usr/bin/env bash
# Discard on an image file (docs/CLEANER.md §7):
#  1. space: `du` of the image after writing 1 GiB, deleting half, eight
#     checkpoints, then fstrim (mode off) or nothing (on, batched), then
#     unmount; for each discard mode;
#  2. cost: a write-heavy workload with each mode (fio: sequential
#     overwrites of a 512 MiB file, then 4 KiB random writes), MiB/s.
# Plain checkpoints are not kept (protection_secs = 0), so deleted and
# overwritten blocks are free at once; with the default hour they would
# be free, and discarded, an hour later.
# Needs root (FUSE), fio and fstrim. Usage: scripts/discard-bench.sh [DIR]
set -euo pipefail
LSFS=${LSFS:-target/release/lsfs}
DIR=${1:-/var/tmp/lsfs-discard}
mkdir -p "$DIR/mnt"
printf 'protection_secs = 0\n' >"$DIR/p0.toml"

du_mib() { du -m "$DIR/img" | cut -f1; }
fresh() {
    rm -f "$DIR/img"
    "$LSFS" mkfs "$DIR/img" --size "$1" >/dev/null
}
up() {
    "$LSFS" mount "$DIR/img" "$DIR/mnt" --background \
        -o "discard=$1,config=$DIR/p0.toml" >/dev/null 2>&1
}
down() {
    fusermount3 -u "$DIR/mnt"
    # The server lets go of the image a moment after the unmount returns.
    for _ in $(seq 50); do flock -n "$DIR/img" true 2>/dev/null && return; sleep 0.1; done
}
checkpoints() {
    for _ in $(seq "$1"); do "$LSFS" checkpoint create --mount "$DIR/mnt" >/dev/null; done
}

echo "== space (MiB on the host)"
for mode in off on batched; do
    fresh 2G
    up "$mode"
    for i in $(seq 8); do
        dd if=/dev/urandom of="$DIR/mnt/f$i" bs=1M count=128 conv=fsync status=none
    done
    written=$(du_mib)
    rm "$DIR"/mnt/f{1..4}
    checkpoints 8
    deleted=$(du_mib)
    trimmed=-
    if [ "$mode" = off ]; then
        fstrim -v "$DIR/mnt"
        trimmed=$(du_mib)
    fi
    stats=$("$LSFS" stats --json --mount "$DIR/mnt")
    down
    echo "$mode: written $written, deleted + 8 checkpoints $deleted, fstrim $trimmed, unmounted $(du_mib)"
    echo "  discard: $(echo "$stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["discard"])')"
done

echo "== cost (fio on a 1 GiB image)"
for mode in off on batched; do
    fresh 1G
    up "$mode"
    seq_bw=$(fio --name=seq --directory="$DIR/mnt" --rw=write --bs=1M --size=512M --loops=6 \
        --fdatasync=64 --end_fsync=1 --ioengine=psync --output-format=json |
        python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["write"]["bw"]/1024))')
    rand_bw=$(fio --name=rand --directory="$DIR/mnt" --rw=randwrite --bs=4k --size=512M \
        --runtime=30 --time_based --fsync=256 --ioengine=psync --output-format=json |
        python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["write"]["bw"]/1024, 1))')
    stats=$("$LSFS" stats --json --mount "$DIR/mnt")
    down
    discarded=$(echo "$stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["discard"]["bytes"] >> 20)')
    echo "$mode: sequential overwrites $seq_bw MiB/s, random 4 KiB writes $rand_bw MiB/s, discarded $discarded MiB, image $(du_mib) MiB"
done
