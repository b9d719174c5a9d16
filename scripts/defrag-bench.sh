#!/usr/bin/env bash
# A file aged by random overwrites, read sequentially: lsfs before and after
# `lsfs defrag`, and the kernel peers on the same workload, in one run.
#
#   scripts/defrag-bench.sh [--fs "lsfs ext4 btrfs xfs"] [--file-mb 256] [--reads 3]
#
# Each file system gets a fresh 2 GiB image (lsfs: `lsfs mkfs` and a FUSE
# mount with the default options; the others: the default mkfs on a loop
# device). fio writes a file of --file-mb MiB sequentially, then rewrites
# half its size at random in 4 KiB blocks with an fsync every 64 writes
# (the aging). The file is then read with `dd bs=1M` after drop_caches,
# --reads times (the median is reported). On lsfs, those reads in order
# make the file a candidate for compaction when idle: the script waits
# until `lsfs stats` says it was done (it starts 2 s after the last read)
# and reads again; then `lsfs defrag` of the mount runs (timed; it finds
# little left to do) and the reads are repeated. Prints one line per
# file system. Everything mounted or attached is removed by an EXIT trap,
# also on failure. Needs root.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LSFS=${LSFS:-$REPO/target/release/lsfs}
FSLIST="lsfs ext4"
FILE_MB=256
READS=3
while (($#)); do
    case $1 in
        --fs) FSLIST=$2; shift ;;
        --file-mb) FILE_MB=$2; shift ;;
        --reads) READS=$2; shift ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "defrag-bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
[[ $FILE_MB =~ ^[1-9][0-9]*$ ]] || { echo "defrag-bench.sh: --file-mb needs a positive number" >&2; exit 2; }
[[ $READS =~ ^[1-9][0-9]*$ ]] || { echo "defrag-bench.sh: --reads needs a positive number" >&2; exit 2; }

PROG=defrag-bench.sh
# shellcheck source=lib/peer-fs.sh
source "$REPO/scripts/lib/peer-fs.sh"
[[ $(id -u) -eq 0 ]] || die "must run as root (losetup, mount, drop_caches)"
command -v fio >/dev/null || die "fio not found; run scripts/install-deps.sh"
WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/lsfs-defrag.XXXXXX")
peer_fs_trap

# median_read: the median time (s) of READS cold sequential reads of the file.
median_read() {
    local times=()
    for _ in $(seq "$READS"); do
        sync
        echo 3 >/proc/sys/vm/drop_caches
        local t0 t1
        t0=$(now)
        dd if="$CUR_MNT/aged" of=/dev/null bs=1M status=none
        t1=$(now)
        times+=("$(awk "BEGIN { print $t1 - $t0 }")")
    done
    printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((READS + 1) / 2))p" | xargs printf '%.2f'
}

for fs in $FSLIST; do
    CUR_FS=$fs
    CUR_IMG=$WORK/$fs.img
    if [[ $fs = lsfs ]]; then
        "$LSFS" mkfs "$CUR_IMG" --size 2G >/dev/null
    else
        attach_image 2G
        mkfs_peer "$fs" -q >/dev/null
    fi
    mount_fs "$WORK/lsfs-mount.log"
    fio --name=write --filename="$CUR_MNT/aged" --rw=write --bs=1M --size="${FILE_MB}M" \
        --end_fsync=1 --output=/dev/null
    fio --name=age --filename="$CUR_MNT/aged" --rw=randwrite --bs=4k --size="${FILE_MB}M" \
        --io_size="$((FILE_MB / 2))M" --fsync=64 --randseed=42 --output=/dev/null
    aged=$(median_read)
    if [[ $fs = lsfs ]]; then
        # The reads above were in order: the file is now a candidate for
        # compaction when idle. Wait for it (at most 120 s), then read again.
        t0=$(now)
        for _ in $(seq 240); do
            done_files=$("$LSFS" stats --mount "$CUR_MNT" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["compaction"]["files_done"])')
            ((done_files >= 1)) && break
            sleep 0.5
        done
        idle_s=$(awk "BEGIN { printf \"%.1f\", $(now) - $t0 }")
        moved=$("$LSFS" stats --mount "$CUR_MNT" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["compaction"]["blocks_moved"])')
        idle_read=$(median_read)
        printf '%-6s aged read %s s; compacted when idle after %s s (%s blocks moved); read after %s s\n' \
            "$fs" "$aged" "$idle_s" "$moved" "$idle_read"
        t0=$(now)
        summary=$("$LSFS" defrag "$CUR_MNT")
        t1=$(now)
        after=$(median_read)
        printf '%-6s aged read %s s; defrag %.2f s (%s); read after %s s\n' \
            "$fs" "$aged" "$(awk "BEGIN { print $t1 - $t0 }")" "$summary" "$after"
    else
        printf '%-6s aged read %s s\n' "$fs" "$aged"
    fi
    teardown_fs
done
