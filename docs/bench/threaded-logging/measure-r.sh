#!/bin/sh
# Re-measure R, the cost of a random 4 KiB block write in sequential block writes, on the disk
# that holds DIR: fio with direct I/O (no page cache), one job, queue depth 1 (psync), first
# 4 KiB random writes, then 1 MiB sequential writes, over the same SIZE-byte file.
#
#   R = sequential blocks/s / random blocks/s      (blocks of 4 KiB; blocks/s = bytes/s / 4096)
#
# Usage: docs/bench/threaded-logging/measure-r.sh [DIR] [SIZE] [SECONDS]
#        (defaults: the current directory, 1G, 20 s per pattern; DIR must not be tmpfs, which
#        has no direct I/O). Needs fio and python3. Pass the result to the simulator as
#        `lsfs sim gc --threaded off,always,adaptive --random-write-cost R`.
# The default R (10.6) came from this measurement on the development machine:
# 19,144 random blocks/s against 203,472 sequential blocks/s, while other jobs ran.
set -eu
DIR=${1:-.}
SIZE=${2:-1G}
SECS=${3:-20}
FILE="$DIR/lsfs-measure-r.fio"
trap 'rm -f "$FILE"' EXIT INT TERM

blocks_per_sec() { # $1 = rw pattern, $2 = block size
    fio --name=measure-r --filename="$FILE" --size="$SIZE" --rw="$1" --bs="$2" \
        --direct=1 --ioengine=psync --iodepth=1 --numjobs=1 \
        --time_based --runtime="$SECS" --output-format=json |
        python3 -c 'import json, sys; print(round(json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"] / 4096))'
}

# Lay the file out first, so neither pattern pays for allocation.
fio --name=measure-r-fill --filename="$FILE" --size="$SIZE" --rw=write --bs=1M \
    --direct=1 --ioengine=psync --end_fsync=1 --output-format=terse >/dev/null
random=$(blocks_per_sec randwrite 4k)
sequential=$(blocks_per_sec write 1M)
echo "random 4 KiB writes:    $random blocks/s"
echo "sequential 1 MiB writes: $sequential blocks/s"
python3 -c "print('R = %.1f' % ($sequential / $random))"
