#!/usr/bin/env bash
# The main job: build lsfs, make ./lsfs.img (4 GiB, sparse) if it is missing,
# and mount it on ./mnt in the foreground. Ctrl-C or SIGTERM unmounts cleanly.
# Extra arguments go to `lsfs run` (see `lsfs run --help`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# fuse3 for fusermount3; gcc and libc6-dev for the linker cargo calls.
missing=()
command -v fusermount3 >/dev/null || missing+=(fuse3)
command -v cc >/dev/null || missing+=(gcc libc6-dev)
if ((${#missing[@]})); then
    echo "run.sh: installing ${missing[*]} (needs root)"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
cargo build --release -p lsfs
exec "${CARGO_TARGET_DIR:-target}/release/lsfs" run "$@"
