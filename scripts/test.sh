#!/usr/bin/env bash
# Every test: unit, property, crash and model tests (cargo test), then the
# external suites through a real FUSE mount of lsfs (pjdfstest, fsx, fsck).
# Installs what it needs first. Takes about 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh
cargo build --release -p lsfs
cargo test --workspace --release 2>&1
scripts/suites.sh target/release/lsfs
