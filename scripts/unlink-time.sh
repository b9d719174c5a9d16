#!/usr/bin/env bash
# Time of deleting a 1 GiB file through a FUSE mount of lsfs.
#
#   scripts/unlink-time.sh [LSFS_BINARY] [DIR]
#
# Makes a 2 GiB image in DIR (default: a new directory under /tmp), writes
# a 1 GiB file, unmounts and mounts again (the engine's cache cold), then
# times `rm` and `rm` followed by `touch` of another file. The file's blocks
# are freed after the UNLINK, at the FORGET the kernel sends when it drops
# the inode, which `rm` does not wait for but the next request does: the
# `touch` shows how long the engine was busy. Then, while blocks are freed
# in the background, it times a `touch` every 50 ms and prints the slowest,
# and how soon `df` shows most of the space (800 MiB) free again. Last,
# the same for `truncate -s 0` of a 1 GiB file (then a `touch`), which
# frees in the background too.
set -euo pipefail
bin=${1:-target/release/lsfs}
dir=${2:-$(mktemp -d /tmp/lsfs-unlink.XXXXXX)}
mkdir -p "$dir/mnt"
img=$dir/img mnt=$dir/mnt
now() { date +%s%N; }
ms() { echo $((($2 - $1) / 1000000)); }

"$bin" mkfs "$img" --size 2G --force >/dev/null
"$bin" mount "$img" "$mnt" --background >/dev/null
dd if=/dev/zero of="$mnt/big" bs=1M count=1024 conv=fsync status=none
fusermount3 -u "$mnt"
sleep 1
"$bin" mount "$img" "$mnt" --background >/dev/null
used0=$(df -B4096 --output=used "$mnt" | tail -1)

t0=$(now)
rm "$mnt/big"
t1=$(now)
touch "$mnt/after-rm"
t2=$(now)
echo "rm: $(ms "$t0" "$t1") ms; rm, then touch: $(ms "$t0" "$t2") ms"

slowest=0 freed=
for i in $(seq 1 200); do
    a=$(now)
    touch "$mnt/t$i"
    b=$(now)
    d=$(ms "$a" "$b")
    ((d > slowest)) && slowest=$d
    used=$(df -B4096 --output=used "$mnt" | tail -1)
    if ((used < used0 - 200000)); then
        freed=$(ms "$t0" "$(now)")
        break
    fi
    sleep 0.05
done
echo "slowest touch while freeing: $slowest ms; df shows the space free ${freed:-(not within 10 s)} ms after the rm"

dd if=/dev/zero of="$mnt/big2" bs=1M count=1024 conv=fsync status=none
fusermount3 -u "$mnt"
sleep 1
"$bin" mount "$img" "$mnt" --background >/dev/null
t0=$(now)
truncate -s 0 "$mnt/big2"
t1=$(now)
touch "$mnt/after-truncate"
t2=$(now)
echo "truncate -s 0: $(ms "$t0" "$t1") ms; truncate, then touch: $(ms "$t0" "$t2") ms"
fusermount3 -u "$mnt"
sleep 1
"$bin" fsck "$img" | tail -1
