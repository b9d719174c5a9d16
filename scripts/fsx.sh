#!/usr/bin/env bash
# Runs fsx (`cargo install fsx`) on one file of a mounted file system with a
# fixed seed, so that a failure can be replayed exactly.
# Usage: scripts/fsx.sh FILE_ON_MOUNT [NUM_OPS]   (NUM_OPS defaults to 100000)
# Exits non-zero on any miscompare or error. FSX_SEED overrides the seed.
# FSX_OPLOG=FILE logs every operation with its number to FILE (fsx -v), so a
# long run that is stopped still says how many operations passed
# (`tail -1 FILE`); the log takes about 60 bytes per operation.
# FSX_CONF=NAME takes scripts/NAME instead of fsx.toml (fsx-clone.toml:
# whole-block operations, copies that share blocks).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if (($# < 1 || $# > 2)); then
    echo "usage: $0 FILE_ON_MOUNT [NUM_OPS]" >&2
    exit 2
fi
file=$1
ops=${2:-100000}
seed=${FSX_SEED:-20260101}
# cargo installs into ~/.cargo/bin, which a fresh root shell may not have on PATH.
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if ! command -v fsx >/dev/null; then
    echo "fsx.sh: fsx not found; run scripts/install-deps.sh" >&2
    exit 2
fi
if [[ ! -d $(dirname "$file") ]]; then
    echo "fsx.sh: directory of $file does not exist" >&2
    exit 2
fi

# fsx (the crate, 0.x) leaves a mapping behind for every mapread/mapwrite: about a
# third of the operations. At vm.max_map_count (65,530 by default) its next mmap or
# thread fails with ENOMEM and it aborts ("failed to set up alternative stack guard
# page"), which ended two long runs. Raise the limit for long runs (needs root;
# a VMA is a few hundred bytes of kernel memory).
maps_needed=$((ops / 2 + 65536))
if [[ $(cat /proc/sys/vm/max_map_count) -lt $maps_needed ]]; then
    if [[ $(id -u) -eq 0 ]]; then
        echo "fsx.sh: raising vm.max_map_count to $maps_needed (fsx keeps its mappings)"
        sysctl -q -w vm.max_map_count=$maps_needed
    else
        echo "fsx.sh: warning: vm.max_map_count below $maps_needed; fsx may abort with ENOMEM" >&2
    fi
fi

# fsx leaves FILE.fsxgood/.fsxlog next to its artifacts dir on failure; keep
# them out of the file system under test.
artifacts=$(mktemp -d /tmp/fsx-artifacts.XXXXXX)
echo "fsx.sh: $ops ops on $file, seed $seed, ${FSX_CONF:-fsx.toml}, artifacts in $artifacts"
verbose=()
if [[ -n ${FSX_OPLOG:-} ]]; then
    verbose=(-v)
    exec 3>"$FSX_OPLOG"
else
    exec 3>&2
fi
conf=$here/${FSX_CONF:-fsx.toml}
if fsx -f "$conf" -S "$seed" -N "$ops" -P "$artifacts" "${verbose[@]}" "$file" 2>&3; then
    rm -rf "$artifacts"
    rm -f "$file"
    echo "fsx.sh: passed"
else
    status=$?
    echo "fsx.sh: FAILED (exit $status); see $artifacts" >&2
    exit "$status"
fi
