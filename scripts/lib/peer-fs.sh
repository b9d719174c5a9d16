# shellcheck shell=bash
# One file system at a time on a fresh image, lsfs or a kernel peer (ext4,
# btrfs, xfs on a loop device), for the benchmarks that compare them
# (bench.sh, everyday.sh, overwrite-bench.sh), and its teardown, which the
# EXIT trap also runs on failure or Ctrl-C.
#
# The sourcing script sets PROG (its name, for messages), WORK (its work
# directory, removed at exit), LSFS (the binary) and REPO, then calls
# peer_fs_trap. It may define before_unmount (called before every unmount)
# and cleanup_first / cleanup_last (called by the EXIT trap before and after
# the teardown).

# shellcheck source=lsfs-mount.sh
source "$(dirname "${BASH_SOURCE[0]}")/lsfs-mount.sh"

die() { echo "$PROG: $*" >&2; exit 1; }
now() { date +%s.%N; }

CUR_FS=""        # file system now set up, or ""
CUR_MNT=""       # its mount point while mounted
CUR_LOOP=""      # its loop device, if it has one
CUR_IMG=""       # its image file
LSFS_PID=""      # the `lsfs mount` serving process
# How long the lsfs server may take to write its last checkpoint and exit.
LSFS_EXIT_SECS=${LSFS_EXIT_SECS:-60}

# attach_image SIZE: a fresh image file CUR_IMG of SIZE (truncate's syntax)
# on a loop device, CUR_LOOP.
attach_image() {
    rm -f "$CUR_IMG"
    truncate -s "$1" "$CUR_IMG"
    CUR_LOOP=$(losetup --find --show "$CUR_IMG")
}

# mkfs_peer FS [ARGS...]: FS with its default settings on CUR_LOOP; ARGS
# (such as -q) go before the device.
mkfs_peer() {
    local fs=$1
    shift
    case $fs in
        ext4) mkfs.ext4 -F "$@" "$CUR_LOOP" ;;
        btrfs) mkfs.btrfs -f "$@" "$CUR_LOOP" ;;
        xfs) mkfs.xfs -f "$@" "$CUR_LOOP" ;;
        *) die "unknown file system $fs" ;;
    esac
}

# mount_fs LOG [LSFS_ARGS...]: mount CUR_FS on $WORK/mnt: lsfs from its loop
# device or else its image, in the background with LSFS_ARGS, its log
# appended to LOG; a peer from its loop device.
mount_fs() {
    local mnt=$WORK/mnt log=$1
    shift
    mkdir -p "$mnt"
    if [[ $CUR_FS = lsfs ]]; then
        local src=${CUR_LOOP:-$CUR_IMG}
        "$LSFS" mount "$src" "$mnt" --background "$@" >/dev/null 2>>"$log"
        LSFS_PID=$(pgrep -f -- "$LSFS mount $src $mnt" | head -n1 || true)
        [[ -n $LSFS_PID ]] || die "cannot find the lsfs mount process"
    else
        mount "$CUR_LOOP" "$mnt"
    fi
    CUR_MNT=$mnt
    mountpoint -q "$mnt" || die "$CUR_FS did not mount on $mnt"
}

unmount_fs() {
    if declare -F before_unmount >/dev/null; then before_unmount; fi
    [[ -n $CUR_MNT ]] || return 0
    if [[ $CUR_FS = lsfs ]]; then
        fuse_unmount "$CUR_MNT"
        if [[ -n $LSFS_PID ]]; then
            if ! wait_pid_exit "$LSFS_PID" "$LSFS_EXIT_SECS"; then
                echo "$PROG: lsfs mount $LSFS_PID did not exit in $LSFS_EXIT_SECS s; killing it" >&2
                kill "$LSFS_PID" 2>/dev/null || true
                sleep 1
            fi
            LSFS_PID=""
        fi
    else
        umount "$CUR_MNT" 2>/dev/null || { sleep 1; umount "$CUR_MNT" || umount -l "$CUR_MNT" || true; }
    fi
    CUR_MNT=""
}

teardown_fs() {
    unmount_fs
    if [[ -n $CUR_LOOP ]]; then
        losetup -d "$CUR_LOOP" || true
        CUR_LOOP=""
    fi
    if [[ -n $CUR_IMG ]]; then
        rm -f "$CUR_IMG"
        CUR_IMG=""
    fi
    CUR_FS=""
}

peer_fs_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if declare -F cleanup_first >/dev/null; then cleanup_first; fi
    teardown_fs
    if declare -F cleanup_last >/dev/null; then cleanup_last; fi
    rm -rf "$WORK"
    if ((rc)); then echo "$PROG: failed (exit $rc); cleaned up" >&2; fi
    exit "$rc"
}

peer_fs_trap() {
    trap peer_fs_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# provenance_json: the meta.json members that say which lsfs ran: its
# binary and build time, and the commit (+dirty for uncommitted changes).
provenance_json() {
    cat <<JSON
"lsfs_binary": "$LSFS, built $(date -u -r "$LSFS" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo '?')",
  "repo_head_at_run": "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet HEAD -- crates 2>/dev/null || echo '+dirty')"
JSON
}

# machine_json TOOLS: the "machine" object of a run's meta.json (the disk is
# WORK's); TOOLS are its last members, as JSON text (the tools' versions).
machine_json() {
    local src dev
    src=$(findmnt -n -o SOURCE -T "$WORK")
    dev=$(basename "$(readlink -f "$src")")
    cat <<JSON
{
    "nproc": $(nproc),
    "mem_total_kib": $(awk '/MemTotal/ {print $2}' /proc/meminfo),
    "kernel": "$(uname -r)",
    "cpu": "$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)",
    "backing": "$(findmnt -n -o FSTYPE,SOURCE -T "$WORK" | tr -s ' ') ($(cat "/sys/block/$dev/queue/rotational" 2>/dev/null | sed 's/1/rotational flag set/;s/0/non-rotational/'))",
    $1
  }
JSON
}
