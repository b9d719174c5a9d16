#!/usr/bin/env bash
# fsx with millions of operations on one lsfs mount: JOBS fsx processes, each
# on its own file, each running a chain of RUN_OPS-operation runs with a fresh
# seed per run, until TOTAL operations have passed. Then unmount and fsck.
#
# Why a chain: the fsx crate keeps a mapping for every mapread/mapwrite, so one
# process slows from ~2,800 to ~140 operations/s by 400,000 operations; fresh
# processes keep the rate, and each run's seed makes any failure replayable
# with `FSX_SEED=<seed> scripts/fsx.sh FILE RUN_OPS`.
#
# Usage: scripts/fsx-soak.sh [TOTAL] [JOBS] [RUN_OPS]
#        (defaults 2000000, 2, 100000; image size LSFS_SOAK_SIZE, default 2G;
#         LSFS_SOAK_CONFIG=FILE mounts with a config file, LSFS_MOUNT_OPTS=OPTS with -o OPTS)
# Output: one line per finished run, a summary, and the mount's peak RSS.
# The mount is always unmounted and the image removed, even on failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
total=${1:-2000000}
jobs=${2:-2}
run_ops=${3:-100000}
size=${LSFS_SOAK_SIZE:-2G}
for v in "$total" "$jobs" "$run_ops"; do
    if ! [[ $v =~ ^[1-9][0-9]*$ ]]; then
        echo "fsx-soak.sh: TOTAL, JOBS and RUN_OPS must be positive integers (got '$v')" >&2
        exit 2
    fi
done
cd "$here/.."
cargo build --release -q -p lsfs
lsfs=$PWD/target/release/lsfs

# shellcheck source=lib/lsfs-mount.sh
source "$here/lib/lsfs-mount.sh"
# The fsx workers go before the unmount.
cleanup_first() { jobs -p | xargs -r kill 2>/dev/null || true; }
lsfs_workdir fsx-soak
mkdir -p "$work/logs"

"$lsfs" mkfs "$img" --size "$size" >/dev/null
config=()
[[ -n ${LSFS_SOAK_CONFIG:-} ]] && config=(--config "$LSFS_SOAK_CONFIG")
[[ -n ${LSFS_MOUNT_OPTS:-} ]] && config+=(-o "$LSFS_MOUNT_OPTS")
LSFS_LOG=warn "$lsfs" mount "$img" "$mnt" --background "${config[@]}"
pid=$(pgrep -f "lsfs mount $img" | head -1)

runs=$(((total + run_ops - 1) / run_ops))
start=$(date +%s)
echo "fsx-soak: $runs runs of $run_ops operations on $jobs files of one mount ($size image)"

# Worker J takes runs J, J+JOBS, J+2*JOBS, ...; each run has its own seed.
worker() {
    local j=$1 r
    for ((r = j; r < runs; r += jobs)); do
        local seed=$((20260101 + r))
        if FSX_SEED=$seed "$here/fsx.sh" "$mnt/fsx.$j" "$run_ops" >"$work/logs/run.$r" 2>&1; then
            echo "fsx-soak: run $r (seed $seed, file fsx.$j) passed $run_ops operations at $(($(date +%s) - start)) s"
        else
            echo "fsx-soak: run $r (seed $seed, file fsx.$j) FAILED; its log:" >&2
            cat "$work/logs/run.$r" >&2
            return 1
        fi
    done
}
pids=()
for ((j = 0; j < jobs; j++)); do
    worker "$j" &
    pids+=($!)
done
peak=0
status=0
while :; do
    rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    ((rss > peak)) && peak=$rss
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 2
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
passed=$(grep -c "^fsx.sh: passed" "$work"/logs/run.* 2>/dev/null | awk -F: '{s += $2} END {print s + 0}')
elapsed=$(($(date +%s) - start))
echo "fsx-soak: $((passed * run_ops)) operations passed in $passed runs, $elapsed s; mount peak RSS $((peak / 1024)) MiB"
"$lsfs" gc stats --mount "$mnt" || true

fusermount3 -u "$mnt"
# The server writes its final checkpoint and exits; fsck needs the image's
# lock, so wait for that process itself (a long run's third soak once
# reached fsck while the server still held the image).
if ! wait_pid_exit "$pid" 600; then
    echo "fsx-soak: the lsfs server (pid $pid) is still running 10 minutes after the unmount" >&2
    exit 1
fi
echo "== fsck"
"$lsfs" fsck "$img"
exit "$status"
