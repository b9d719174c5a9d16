#!/usr/bin/env bash
# External suites against a real lsfs mount: pjdfstest (POSIX semantics),
# fsx (data integrity, FSX_OPS operations, default 100000), fsx again on
# whole blocks with copies that share them (FSX_CLONE_OPS, default 10000),
# then unmount and fsck. Usage: scripts/suites.sh PATH_TO_LSFS_BINARY
# LSFS_MOUNT_OPTS=OPTS mounts with `-o OPTS` (e.g. no_writeback_cache).
# LSFS_IMAGE=PATH_OR_URL makes the file system there instead of in an image
# file of the work directory (an s3:// URL: scripts/s3-suites.sh).
# The mount is always unmounted and the image file removed, even on failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lsfs=$(realpath "${1:?usage: suites.sh PATH_TO_LSFS}")
ops=${FSX_OPS:-100000}
clone_ops=${FSX_CLONE_OPS:-10000}

# shellcheck source=lib/lsfs-mount.sh
source "$here/lib/lsfs-mount.sh"
lsfs_workdir suites
img=${LSFS_IMAGE:-$img}
# pjdfstest acts as other users too: they must be able to reach the mount.
chmod 0755 "$work"

"$lsfs" mkfs "$img" --size 2G
opts=()
[[ -n ${LSFS_MOUNT_OPTS:-} ]] && opts=(-o "$LSFS_MOUNT_OPTS")
LSFS_LOG=warn "$lsfs" mount "$img" "$mnt" --background "${opts[@]}"
echo "== mounted with ${LSFS_MOUNT_OPTS:-default options}"

echo "== pjdfstest"
"$here/pjdfstest.sh" "$mnt"
echo "== fsx ($ops operations)"
"$here/fsx.sh" "$mnt/fsx.file" "$ops"
echo "== fsx on shared blocks ($clone_ops operations)"
FSX_CONF=fsx-clone.toml "$here/fsx.sh" "$mnt/fsx.clone" "$clone_ops"

fusermount3 -u "$mnt"
wait_lsfs_exit "$img" 10 || true
if "$lsfs" fsck --help >/dev/null 2>&1; then
    echo "== fsck"
    "$lsfs" fsck "$img"
fi
echo "suites: 3 passed, 0 failed"
