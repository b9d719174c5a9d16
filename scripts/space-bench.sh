#!/usr/bin/env bash
# Cloning, truncating and deleting large files: lsfs and the kernel peers
# on the same steps, in one run.
#
#   scripts/space-bench.sh [--fs "lsfs ext4 btrfs xfs"] [--sizes "1 10"] [--huge N]
#
# For each file system and each size N (GiB): a fresh sparse image of N + 2
# GiB (lsfs: `lsfs mkfs` and a FUSE mount with the default options; the
# others: the default mkfs on a loop device). fio writes a file of N GiB
# (1 MiB writes, fsync at the end); the file system is mounted again so
# nothing is cached. Then, each step timed as the command's wall time, and
# each followed by a `touch` of a new file whose time is added (on lsfs a
# request waits for the engine, so this shows work the command left
# running):
#   clone     `cp --reflink=always` (btrfs, xfs) or plain `cp` (lsfs: the
#             FICLONE ioctl never reaches a FUSE server, cp falls back to
#             copy_file_range, which lsfs serves by sharing blocks); `df`
#             before and after says whether the copy shares its blocks.
#             ext4 has no clones: skipped;
#   truncate  `truncate -s N/2` of the original;
#   rm        `rm` of the original (and then of the clone);
#   freed     how long after the last rm `df` shows 80 % of the file's
#             space free again (lsfs frees in the background).
# --huge N (GiB) adds one more round, rm only, for files larger than the
# disk: on lsfs the file is N GiB of zeros written with compression on
# (`mkfs --compress lz4`: each record's frame is a few blocks and the rest
# of its slots are never written, so the sparse image stays small while
# the file maps all its blocks); on the peers it is made by fallocate
# (unwritten extents, likewise never written). Both free every block at
# rm; what is written differs, so only the rm is compared.
# Prints one line per file system and size. Everything mounted or attached
# is removed by an EXIT trap, also on failure. Needs root, and N + 1 GiB
# free on the disk of the work directory (BENCH_TMP, default /var/tmp).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LSFS=${LSFS:-$REPO/target/release/lsfs}
FSLIST="lsfs ext4 btrfs xfs"
SIZES="1 10"
HUGE=""
while (($#)); do
    case $1 in
        --huge) HUGE=$2; shift ;;
        --fs) FSLIST=$2; shift ;;
        --sizes) SIZES=$2; shift ;;
        -h|--help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "space-bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
for n in $SIZES; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "space-bench.sh: --sizes needs positive whole GiB, not $n" >&2; exit 2; }
done

PROG=space-bench.sh
# shellcheck source=lib/peer-fs.sh
source "$REPO/scripts/lib/peer-fs.sh"
[[ $(id -u) -eq 0 ]] || die "must run as root (losetup, mount)"
command -v fio >/dev/null || die "fio not found; run scripts/install-deps.sh"
WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/lsfs-space.XXXXXX")
peer_fs_trap

# timed CMD...: run CMD, then touch a new file; print "CMD s + touch s".
timed() {
    local t0 t1 t2
    t0=$(now)
    "$@"
    t1=$(now)
    touch "$CUR_MNT/after.$RANDOM"
    t2=$(now)
    awk "BEGIN { printf \"%.3f+%.3f\", $t1 - $t0, $t2 - $t1 }"
}

used_kib() { df -k --output=used "$CUR_MNT" | tail -1; }

# wait_freed USED: seconds until df's used space is within 20 % of the
# file's size above USED (at most 120 s).
wait_freed() {
    local target=$(($1 + N * 1024 * 1024 / 5)) t0
    t0=$(now)
    for _ in $(seq 1200); do
        (($(used_kib) <= target)) && break
        sleep 0.1
    done
    awk "BEGIN { printf \"%.2f\", $(now) - $t0 }"
}

printf '%-6s %5s %12s %-26s %14s %14s %14s %8s\n' fs GiB write_s "clone_s (+touch, shared)" truncate_s rm_s rm_clone_s freed_s
for N in $SIZES; do
    for fs in $FSLIST; do
        CUR_FS=$fs
        CUR_IMG=$WORK/$fs.img
        if [[ $fs = lsfs ]]; then
            "$LSFS" mkfs "$CUR_IMG" --size "$((N + 2))G" >/dev/null
        else
            attach_image "$((N + 2))G"
            mkfs_peer "$fs" -q >/dev/null
        fi
        mount_fs "$WORK/lsfs-mount.log"
        base=$(used_kib)
        t0=$(now)
        fio --name=write --filename="$CUR_MNT/big" --rw=write --bs=1M --size="${N}G" \
            --end_fsync=1 --output=/dev/null
        write_s=$(awk "BEGIN { printf \"%.1f\", $(now) - $t0 }")
        unmount_fs
        mount_fs "$WORK/lsfs-mount.log"
        clone="-" rm_clone="-"
        if [[ $fs != ext4 ]]; then
            before=$(used_kib)
            case $fs in
                lsfs) clone=$(timed cp "$CUR_MNT/big" "$CUR_MNT/clone") ;;
                *) clone=$(timed cp --reflink=always "$CUR_MNT/big" "$CUR_MNT/clone") ;;
            esac
            sync -f "$CUR_MNT"
            grew=$(($(used_kib) - before))
            if ((grew < N * 1024 * 1024 / 10)); then clone+=" shared"; else clone+=" copied"; fi
        fi
        trunc=$(timed truncate -s "$((N * 512))M" "$CUR_MNT/big")
        rm_s=$(timed rm "$CUR_MNT/big")
        [[ $clone = - ]] || rm_clone=$(timed rm "$CUR_MNT/clone")
        freed=$(wait_freed "$base")
        printf '%-6s %5s %12s %-26s %14s %14s %14s %8s\n' "$fs" "$N" "$write_s" "$clone" "$trunc" "$rm_s" "$rm_clone" "$freed"
        teardown_fs
    done
done

[[ -z $HUGE ]] && exit 0
[[ $HUGE =~ ^[1-9][0-9]*$ ]] || die "--huge needs positive whole GiB, not $HUGE"
N=$HUGE
printf '\n%-6s %5s %12s %14s %8s\n' fs GiB make_s rm_s freed_s
for fs in $FSLIST; do
    CUR_FS=$fs
    CUR_IMG=$WORK/$fs.img
    if [[ $fs = lsfs ]]; then
        "$LSFS" mkfs "$CUR_IMG" --size "$((N + 8))G" --compress lz4 >/dev/null
    else
        attach_image "$((N + 8))G"
        mkfs_peer "$fs" -q >/dev/null
    fi
    mount_fs "$WORK/lsfs-mount.log"
    base=$(used_kib)
    t0=$(now)
    if [[ $fs = lsfs ]]; then
        dd if=/dev/zero of="$CUR_MNT/huge" bs=4M count=$((N * 256)) conv=fsync status=none
    else
        fallocate -l "${N}G" "$CUR_MNT/huge"
        sync -f "$CUR_MNT"
    fi
    make_s=$(awk "BEGIN { printf \"%.1f\", $(now) - $t0 }")
    unmount_fs
    mount_fs "$WORK/lsfs-mount.log"
    rm_s=$(timed rm "$CUR_MNT/huge")
    freed=$(wait_freed "$base")
    printf '%-6s %5s %12s %14s %8s\n' "$fs" "$N" "$make_s" "$rm_s" "$freed"
    echo "  image on the host: $(du -h "$CUR_IMG" | cut -f1)"
    teardown_fs
done
