# shellcheck shell=bash
# Unmounting lsfs and waiting for its server, for the scripts that mount it.
# The server writes its last checkpoint after the kernel lets go, and holds
# the image until then: fsck, a remount or removing the image must wait.
# Source it; it defines functions only, except lsfs_workdir, which sets up.

# fuse_unmount MNT: unmount the FUSE mount on MNT; one still busy after a
# second is detached lazily, so that a cleanup never hangs on it.
fuse_unmount() {
    fusermount3 -u "$1" 2>/dev/null || {
        sleep 1
        fusermount3 -u "$1" 2>/dev/null || fusermount3 -uz "$1" || true
    }
}

# wait_lsfs_exit IMG SECONDS: wait until no `lsfs mount IMG` runs, SECONDS
# at the most; false if one still does.
wait_lsfs_exit() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        pgrep -f -- " mount $1 " >/dev/null || return 0
        sleep 0.1
    done
    ! pgrep -f -- " mount $1 " >/dev/null
}

# wait_pid_exit PID SECONDS: the same for one process.
wait_pid_exit() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    ! kill -0 "$1" 2>/dev/null
}

# lsfs_workdir NAME: sets work (a fresh /tmp/lsfs-NAME.XXXXXX), img (an
# image path in it) and mnt (a mount point in it), and an EXIT trap that
# unmounts whatever is still mounted there, waits for the server and removes
# $work. A script with more to stop defines cleanup_first, which the trap
# calls before.
lsfs_workdir() {
    work=$(mktemp -d "/tmp/lsfs-$1.XXXXXX")
    img=$work/lsfs.img
    mnt=$work/mnt
    mkdir -p "$mnt"
    trap lsfs_workdir_cleanup EXIT
}

lsfs_workdir_cleanup() {
    if declare -F cleanup_first >/dev/null; then cleanup_first; fi
    if mountpoint -q "$mnt"; then fuse_unmount "$mnt"; fi
    wait_lsfs_exit "$img" 10 || true
    rm -rf "$work"
}
