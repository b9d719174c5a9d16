#!/usr/bin/env bash
# Small fsyncs on a file system in a real S3 server (SeaweedFS on
# 127.0.0.1, scripts/lib/weed.sh), without a write-ahead file, with one
# on local disk, and with the records kept in the store itself
# (object_wal=store; docs/OBJECT_STORE.md): for each, a fresh file system, N 4 KiB writes
# each followed by an fsync (their latency), then fsx with FSX_OPS
# operations (its time); the bytes and PUTs each put in the store, from
# `lsfs stats`. Then reads without and with a cache on local disk
# (object_disk_cache): a 64 MiB file written, the file system mounted
# again with the smallest memory cache (8 MiB), the file read (its time,
# GETs and disk cache hits). Usage: scripts/s3-wal-bench.sh PATH_TO_LSFS
# [N] (N defaults to 500, FSX_OPS to 2000; WAL_MODES picks among
# "plain wal store"; plain is object_wal=off). Last, read-only mounts
# reading a 256 MiB file in order without and with segments fetched
# ahead (object_readahead_segments 0 and 4, alternated, READ_ROUNDS
# times, default 3). The server is stopped and its
# directory removed at the end, also on failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lsfs=$(realpath "${1:?usage: s3-wal-bench.sh PATH_TO_LSFS [N]}")
n=${2:-500}
fsx_ops=${FSX_OPS:-2000}

# shellcheck source=lib/weed.sh
source "$here/lib/weed.sh"
weed_scratch lsfs-wal-bench

counters() {
    "$lsfs" stats --json --mount "$mnt" |
        python3 -c 'import json,sys; o=json.load(sys.stdin)["object_store"]; print(o["puts"], o["put_bytes"])'
}

# mount_fs URL LOG ARGS...: mount in the background, wait for it.
mount_fs() {
    local url=$1 log=$2
    shift 2
    "$lsfs" mount "$url" "$mnt" "$@" 2>"$log" &
    mount_pid=$!
    for ((i = 0; i < 200; i++)); do mountpoint -q "$mnt" && break; sleep 0.05; done
    mountpoint -q "$mnt" || { cat "$log"; exit 1; }
}

# read_report FORMAT T0 T1 [MIB]: one line after a timed read, FORMAT
# (Python's str.format) filled with the mount's object_store counters
# ("-" for those it lacks), secs and, given MIB, mibs.
read_report() {
    "$lsfs" stats --json --mount "$mnt" | python3 -c '
import collections, json, sys
o = collections.defaultdict(lambda: "-", json.load(sys.stdin)["object_store"])
fmt, t0, t1, mib = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
o["secs"] = t1 - t0
o["mibs"] = mib / (t1 - t0)
print("  " + fmt.format_map(o))' "$1" "$2" "$3" "${4:-0}"
}

unmount_fs() {
    fusermount3 -u "$mnt"
    wait "$mount_pid"
    mount_pid=
}

for mode in ${WAL_MODES:-plain wal store}; do
    url=s3://lsfs-bench/$mode
    "$lsfs" mkfs --size 1G "$url" >/dev/null
    opts=()
    opts=(-o object_wal=off)
    [[ $mode == wal ]] && opts=(-o "object_wal=$dir/fs.wal")
    [[ $mode == store ]] && opts=(-o object_wal=store)
    mount_fs "$url" "$dir/$mode.log" "${opts[@]}"
    read -r puts0 bytes0 < <(counters)
    python3 - "$mnt/small" "$n" <<'EOF'
import os, sys, time
path, n = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
block = os.urandom(4096)
lat = []
t0 = time.monotonic()
for i in range(n):
    os.pwrite(fd, block, i * 4096)
    t = time.monotonic()
    os.fsync(fd)
    lat.append(time.monotonic() - t)
total = time.monotonic() - t0
os.close(fd)
lat.sort()
ms = lambda s: f"{s * 1000:.2f} ms"
print(f"  {n} x (4 KiB write + fsync): {total:.2f} s; fsync median {ms(lat[n // 2])}, "
      f"p90 {ms(lat[n * 9 // 10])}, p99 {ms(lat[n * 99 // 100])}, max {ms(lat[-1])}")
EOF
    read -r puts1 bytes1 < <(counters)
    echo "  $mode: small fsyncs put $((bytes1 - bytes0)) bytes in $((puts1 - puts0)) PUTs"
    t0=$(date +%s.%N)
    "$here/fsx.sh" "$mnt/fsx.file" "$fsx_ops" >"$dir/$mode.fsx" 2>&1 || { tail "$dir/$mode.fsx"; exit 1; }
    t1=$(date +%s.%N)
    read -r puts2 bytes2 < <(counters)
    echo "  $mode: fsx $fsx_ops ops in $(python3 -c "print(f'{$t1 - $t0:.1f}')") s," \
        "put $((bytes2 - bytes1)) bytes in $((puts2 - puts1)) PUTs"
    unmount_fs
    "$lsfs" fsck "$url" | tail -1
done

echo "object_cache_bytes = 8388608" >"$dir/small.toml"
for mode in memory disk; do
    url=s3://lsfs-bench/read-$mode
    "$lsfs" mkfs --size 1G "$url" >/dev/null
    opts=(--config "$dir/small.toml")
    [[ $mode == disk ]] && opts+=(-o "object_disk_cache=$dir/disk-cache")
    mount_fs "$url" "$dir/read-$mode.log" "${opts[@]}"
    head -c $((64 << 20)) /dev/urandom >"$mnt/big"
    unmount_fs
    mount_fs "$url" "$dir/read-$mode.log" "${opts[@]}"
    t0=$(date +%s.%N)
    cat "$mnt/big" >/dev/null
    t1=$(date +%s.%N)
    read_report "$mode: 64 MiB read after a remount in {secs:.2f} s: {gets} GETs ({get_bytes} bytes), disk cache hits {disk_cache_hits}" "$t0" "$t1"
    unmount_fs
done
[[ -d $dir/disk-cache ]] && echo "  disk cache: $(du -sb "$dir/disk-cache" | cut -f1) bytes"

url=s3://lsfs-bench/read-ahead
"$lsfs" mkfs --size 1G "$url" >/dev/null
mount_fs "$url" "$dir/read-ahead.log"
head -c $((256 << 20)) /dev/urandom >"$mnt/big"
unmount_fs
for ((round = 0; round < ${READ_ROUNDS:-3}; round++)); do
    for ahead in 0 4; do
        echo "object_readahead_segments = $ahead" >"$dir/ahead.toml"
        mount_fs "$url" "$dir/read-ahead.log" --config "$dir/ahead.toml" -o ro
        t0=$(date +%s.%N)
        cat "$mnt/big" >/dev/null
        t1=$(date +%s.%N)
        read_report "read-only, $ahead segments ahead: 256 MiB read in {secs:.2f} s ({mibs:.0f} MiB/s): {gets} GETs, {readahead_gets} of them ahead" "$t0" "$t1" 256
        unmount_fs
    done
done
