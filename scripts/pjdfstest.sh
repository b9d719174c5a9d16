#!/usr/bin/env bash
# Runs pjdfstest (the Rust suite, `cargo install pjdfstest`) against a mounted
# file system, with the project's configuration (scripts/pjdfstest.toml).
# Usage: scripts/pjdfstest.sh MOUNTPOINT [TEST_PATTERN...]
# Prints the summary; exits non-zero if any test failed. Run as root (the
# suite switches users and creates device nodes).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
config="$here/pjdfstest.toml"

if (($# < 1)); then
    echo "usage: $0 MOUNTPOINT [TEST_PATTERN...]" >&2
    exit 2
fi
mountpoint=$1
shift
if [[ ! -d $mountpoint ]]; then
    echo "pjdfstest.sh: $mountpoint is not a directory" >&2
    exit 2
fi
# cargo installs into ~/.cargo/bin, which a fresh root shell may not have on PATH.
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if ! command -v pjdfstest >/dev/null; then
    echo "pjdfstest.sh: pjdfstest not found; run scripts/install-deps.sh" >&2
    exit 2
fi

# The suite works in a fresh directory on the target file system; it is
# removed afterwards whatever happened.
workdir=$(mktemp -d "$mountpoint/pjdfstest.XXXXXX")
chmod 0755 "$workdir"
# A directory on another file system, for the EXDEV cases of rename and link.
otherfs=$(mktemp -d /tmp/pjdfstest-other.XXXXXX)
chmod 0755 "$otherfs"
log=$(mktemp /tmp/pjdfstest-log.XXXXXX)
cleanup() {
    rm -rf "$workdir" "$otherfs"
    rm -f "$log"
}
trap cleanup EXIT

set +e
(cd "$workdir" && pjdfstest -c "$config" -p "$workdir" -s "$otherfs" "$@") 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

# pjdfstest ends with "Summary: N failed, N skipped, N passed, ...".
summary=$(grep -E '^Summary:' "$log" | tail -n1 || true)
if [[ -z $summary ]]; then
    echo "pjdfstest.sh: pjdfstest exited with $status and printed no summary" >&2
    exit 1
fi
failed=$(sed -E 's/^Summary: ([0-9]+) failed.*/\1/' <<<"$summary")
echo "pjdfstest.sh: $mountpoint: $summary"
if ((status != 0 || failed != 0)); then
    grep -E '[[:space:]]FAILED$' "$log" >&2 || true
    exit 1
fi
