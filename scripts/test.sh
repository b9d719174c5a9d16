#!/usr/bin/env bash
# Every test: rustfmt and clippy (warnings are errors), then unit, property,
# crash and model tests (cargo test), then the fuzz targets for a bounded time (scripts/fuzz.sh), then the external suites
# through a real FUSE mount of lsfs (pjdfstest, fsx, fsck).
# Installs what it needs first. Takes about 15 minutes on 2 cores.
# The external suites run three times: with the default mount options, with
# the kernel's writeback cache off, and through FUSE over io_uring.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Mounts through io_uring (the ring tests, the third run of the suites) turn
# on the kernel's enable_uring switch, a setting of the whole machine that
# other FUSE servers see too: put it back as it was found, whatever happens.
URING_SWITCH=/sys/module/fuse/parameters/enable_uring
if [[ -w $URING_SWITCH ]]; then
    uring_was=$(cat "$URING_SWITCH")
    trap 'echo "$uring_was" > "$URING_SWITCH" 2>/dev/null || true' EXIT
fi

scripts/install-deps.sh
# Style and lints first: they take seconds and name the line.
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo build --release -p lsfs
cargo test --workspace --release 2>&1
# Every fuzz target for 20 s each, two at a time, with a fixed seed: about
# 80 s after a 3-5 minute build. The whole-image target joined once a 600 s
# run of it found nothing (docs/TESTING.md, "The image campaign").
FUZZ_TARGETS=${FUZZ_TARGETS:-"superblock record btree_node btree_tree dir_block inode meta_entries image"} \
    FUZZ_SECS=${FUZZ_SECS:-20} FUZZ_JOBS=${FUZZ_JOBS:-2} FUZZ_SEED=${FUZZ_SEED:-1} scripts/fuzz.sh
scripts/suites.sh target/release/lsfs
# The same suites with the kernel's writeback cache off: every write() is then
# a request of its own, a different path through the adapter and the engine.
LSFS_MOUNT_OPTS=no_writeback_cache FSX_OPS=${FSX_OPS_NO_WRITEBACK:-30000} scripts/suites.sh target/release/lsfs
# And with requests served through FUSE over io_uring (a transport of its
# own: lsfs-fuse/src/uring/); auto falls back to /dev/fuse on a kernel
# without it, where the Rust tests that require the ring fail instead.
LSFS_MOUNT_OPTS=uring=auto FSX_OPS=${FSX_OPS_URING:-30000} scripts/suites.sh target/release/lsfs
# And with compressed records (off by default): the records of user data
# become LZ4 frames that keep their slots, a different write and read path.
LSFS_MOUNT_OPTS=compress=lz4 FSX_OPS=${FSX_OPS_COMPRESS:-30000} scripts/suites.sh target/release/lsfs
