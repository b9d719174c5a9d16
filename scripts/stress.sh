#!/usr/bin/env bash
# Concurrent stress with the cleaner active: stress-ng's file stressors
# (Debian's stress-ng) on a mounted lsfs whose image is small enough, and
# whose protection period short enough, that the cleaner runs throughout.
# Then unmount and fsck, and report the server's peak memory.
#
#   scripts/stress.sh [SECONDS]      (default 120; needs root, FUSE, stress-ng)
#
# The mount is always unmounted and the work directory removed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-120}
lsfs=$(realpath "${LSFS:-target/release/lsfs}")
command -v stress-ng >/dev/null || { echo "stress.sh: stress-ng missing; run scripts/install-deps.sh" >&2; exit 2; }

work=$(mktemp -d /tmp/lsfs-stress.XXXXXX)
chmod 0755 "$work"
img=$work/lsfs.img
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() {
    if mountpoint -q "$mnt"; then
        fusermount3 -u "$mnt" || umount -l "$mnt" || true
    fi
    for _ in $(seq 100); do pgrep -f "lsfs mount $img" >/dev/null || break; sleep 0.1; done
    rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/lsfs.toml" <<TOML
protection_secs = 0
[cleaner]
check_interval_secs = 1
min_free_percent = 15
max_free_percent = 30
TOML
"$lsfs" mkfs "$img" --size 512M --segment-size 1M
LSFS_LOG=warn "$lsfs" mount "$img" "$mnt" --config "$work/lsfs.toml" --background
pid=$(pgrep -f "lsfs mount $img" | head -1)

echo "== stress-ng for ${secs}s on $mnt"
stress-ng --temp-path "$mnt" --timeout "${secs}s" --metrics-brief --verify \
    --hdd 2 --hdd-bytes 32M --dir 1 --dentry 1 --rename 1 --link 1 --symlink 1 \
    --fallocate 1 --fallocate-bytes 16M --xattr 1 --seek 1 --seek-size 16M \
    --filename 1 --chdir 1 --chmod 1 --utime 1
hwm=$(awk '/VmHWM/ {print $2, $3}' "/proc/$pid/status")
echo "== cleaner"
"$lsfs" gc stats --mount "$mnt"
fusermount3 -u "$mnt"
for _ in $(seq 100); do pgrep -f "lsfs mount $img" >/dev/null || break; sleep 0.1; done
echo "== fsck"
"$lsfs" fsck "$img"
echo "stress: passed; lsfs server peak RSS $hwm"
