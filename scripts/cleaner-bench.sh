#!/usr/bin/env bash
# The mounted-file-system cleaner benchmark (issue 3, "How we will know").
#
# For every workload and cleaner policy: make a small image, mount it with that policy, fill it
# with the workload to ~78 %, then overwrite in steps, taking `lsfs gc stats --json` after the
# fill and after every step; unmount, fsck, and finally turn the raw runs into a table (markdown
# and JSON) and SVG plots with `lsfs sim cleaner-report`. See docs/bench/cleaner/README.md.
#
#   scripts/cleaner-bench.sh [--quick] [--out DIR] [--policies a,b] [--workloads a,b]
#                            [--image-size 256M] [--segment-size 512K] [--rounds R] [--steps S]
#                            [--fill-percent P] [--rate W] [--seed N] [--keep-raw DIR]
#                            [--marks LOW,HIGH]
#
# --marks LOW,HIGH sets the cleaner's min_free_percent and max_free_percent (default: the
# engine's defaults), to compare free-space marks on the same binary.
# --rate W paces the overwrites to W 4 KiB blocks per second (0: as fast as lsfs takes them).
# Unpaced, the cleaner falls behind and the engine's low-space passes (greedy for every policy)
# do the cleaning; paced, the background passes run the policy under test.
#
# Workloads: hot-cold (Rohner: 4 KiB files, 10 % of them get 90 % of the overwrites), uniform,
# zipf (exponent 1), aging (yFS: lognormal + Pareto sizes, creates and deletes), and nfs (not in
# the default list: a seeded synthetic NFS trace in Ellard's format, replayed unpaced in one
# step; use --steps 1).
# Needs root (FUSE) and fusermount3. The binary is $LSFS, or target/release/lsfs under
# $CARGO_TARGET_DIR or the repository.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
out="$here/docs/bench/cleaner"
policies="timestamp,greedy,cost-benefit,cost-hotness,balanced"
workloads="hot-cold,uniform,zipf,aging"
image_size=256M
segment_size=512K
rounds=2          # overwrites after the fill, in multiples of the file count
steps=4           # stats snapshots after the fill
rate=1500         # overwritten blocks per second (0 = unpaced)
fill_percent=78
seed=1
keep_raw=""
marks=""
quick=0
nfs_ops=500000    # synthetic NFS trace: calls, and files the namespace holds at most
nfs_max_files=12000

while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --out) out=$2; shift ;;
        --policies) policies=$2; shift ;;
        --workloads) workloads=$2; shift ;;
        --image-size) image_size=$2; shift ;;
        --segment-size) segment_size=$2; shift ;;
        --rounds) rounds=$2; shift ;;
        --steps) steps=$2; shift ;;
        --fill-percent) fill_percent=$2; shift ;;
        --rate) rate=$2; shift ;;
        --seed) seed=$2; shift ;;
        --keep-raw) keep_raw=$2; shift ;;
        --marks) marks=$2; shift ;;
        --nfs-operations) nfs_ops=$2; shift ;;
        --nfs-max-files) nfs_max_files=$2; shift ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$quick" = 1 ]; then
    # 64 MiB images hit ENOSPC intermittently (see README), so quick runs use 128 MiB.
    image_size=128M; rounds=0.5; steps=2; rate=2000; nfs_ops=150000; nfs_max_files=5000
fi

lsfs=${LSFS:-}
if [ -z "$lsfs" ]; then
    for c in "${CARGO_TARGET_DIR:-}/release/lsfs" "$here/target/release/lsfs"; do
        if [ -x "$c" ]; then lsfs=$c; break; fi
    done
fi
[ -x "${lsfs:-}" ] || { echo "no lsfs binary: cargo build --release -p lsfs, or set LSFS" >&2; exit 2; }

work=$(mktemp -d /tmp/lsfs-cleaner-bench.XXXXXX)
mnt="$work/mnt"
img="$work/img"
runs="$work/runs"
mkdir -p "$mnt" "$runs"

server_pid=""

# shellcheck source=lib/lsfs-mount.sh
source "$here/scripts/lib/lsfs-mount.sh"

unmount() {
    if mountpoint -q "$mnt" 2>/dev/null; then
        fuse_unmount "$mnt"
    fi
    # The server writes its final checkpoint after the unmount, then exits and frees the image.
    if [ -n "$server_pid" ]; then
        wait_pid_exit "$server_pid" 60 ||
            echo "warning: lsfs server $server_pid still running 60 s after unmount" >&2
        server_pid=""
    fi
    return 0
}

cleanup() {
    local rc=$?
    unmount
    if [ -n "$keep_raw" ] && [ -d "$runs" ]; then
        mkdir -p "$keep_raw" && cp -r "$runs"/. "$keep_raw"/
    fi
    rm -rf "$work"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 4 KiB small files cost 1 data block plus about 0.17 blocks of inode, directory and DAT
# metadata each (measured: 43,000 files use 50,176 blocks).
blocks_per_small_file=1.17
# yFS's size mixture capped at 1 MiB averages 13.3 blocks per file (sampled).
aging_max_file_bytes=$((1 << 20))
blocks_per_aged_file=13.3

write_config() { # policy
    cat > "$work/lsfs.toml" <<EOF
# Written by scripts/cleaner-bench.sh.
# No protection period: the benchmark measures the policies, not the retention of overwritten
# blocks (the default 3600 s keeps every overwritten block for an hour).
protection_secs = 0
[cleaner]
policy = "$1"
# The low and high marks stay at their defaults (5 % and 10 % free). Below the low mark the
# engine cleans with greedy whatever the policy ("low space", as F2FS's foreground GC); the
# background passes in between run the policy under test, so they run every second and wide
# enough (64 victims) to keep up with paced writes.
check_interval_secs = 1
segments_per_pass = 64
aggressive_segments_per_pass = 64
idle_secs = 1
max_copy_blocks_per_sec = 10000000
EOF
    if [ -n "$marks" ]; then
        printf 'min_free_percent = %s\nmax_free_percent = %s\n' "${marks%,*}" "${marks#*,}" >> "$work/lsfs.toml"
    fi
}

stats() { # file; a failure (the server died) fails the run, not the benchmark
    if ! "$lsfs" gc stats --mount "$mnt" --json > "$1" 2> "$1.err"; then
        rm -f "$1"
        status=failed
        error="${error:+$error; }gc stats: $(tail -c 200 "$1.err" | tr '\n' ' ')"
        return 1
    fi
}

# One workload step into the mount. $1 = fill|step, $2 = step number.
run_workload() {
    local phase=$1 n=$2
    local s=$((seed * 1000 + n))
    case "$workload" in
        hot-cold|uniform|zipf)
            local args=(--files "$files")
            if [ "$phase" = fill ]; then
                args+=(--rounds 0)
            else
                args+=(--existing --rounds "$step_rounds")
                [ "$rate" = 0 ] || args+=(--rate "$rate")
            fi
            "$lsfs" sim workload -q --seed "$s" "$workload" "$mnt/w" "${args[@]}"
            ;;
        aging)
            local ops
            if [ "$phase" = fill ]; then
                # The tree grows by 0.4 files per operation until it holds max_files.
                ops=$(awk -v f="$files" 'BEGIN { printf "%d", f * 2.5 }')
                "$lsfs" sim workload -q --seed "$s" aging "$mnt/w" --operations "$ops" \
                    --max-files "$files" --max-file-bytes "$aging_max_file_bytes"
            else
                # At max_files every other operation deletes; writing R × the live data takes
                # about 2 R × max_files operations.
                ops=$(awk -v f="$files" -v r="$step_rounds" 'BEGIN { printf "%d", 2 * f * r }')
                local pace=()
                # Half the operations create a file of 13.3 blocks on average.
                [ "$rate" = 0 ] ||
                    pace=(--rate "$(awk -v w="$rate" -v b="$blocks_per_aged_file" 'BEGIN { printf "%.1f", 2 * w / b }')")
                "$lsfs" sim workload -q --seed "$s" aging "$mnt/w" --operations "$ops" \
                    --max-files "$files" --max-file-bytes "$aging_max_file_bytes" --resume "${pace[@]}"
            fi
            ;;
        nfs)
            if [ "$phase" = fill ]; then
                # One trace per benchmark, so every policy replays the same calls.
                [ -e "$work/nfs-trace.txt" ] ||
                    "$lsfs" sim workload --seed "$seed" nfs-synth "$work/nfs-trace.txt" \
                        --operations "$nfs_ops" --max-files "$nfs_max_files" > "$work/nfs-synth.json"
                echo '{"bytes_written": 0}'
            elif [ "$n" = 1 ]; then
                "$lsfs" sim workload -q nfs-replay "$work/nfs-trace.txt" "$mnt/w"
            else
                echo '{"bytes_written": 0}'
            fi
            ;;
        *) echo "unknown workload $workload" >&2; return 2 ;;
    esac
}

step_rounds=$(awk -v r="$rounds" -v s="$steps" 'BEGIN { printf "%.4f", r / s }')
echo "lsfs cleaner benchmark: image $image_size, segments $segment_size, fill $fill_percent %," \
     "$rounds rounds in $steps steps at $rate blocks/s; workloads $workloads; policies $policies" >&2
echo "binary $lsfs; work dir $work" >&2
bench_started=$(date +%s)

for workload in ${workloads//,/ }; do
    for policy in ${policies//,/ }; do
        run="$runs/$(printf '%s' "$workload")--$policy"
        mkdir -p "$run"
        started=$(date +%s.%N)
        status=ok
        error=""
        rm -f "$img"
        "$lsfs" mkfs "$img" --size "$image_size" --segment-size "$segment_size" --force > /dev/null
        write_config "$policy"
        # The server's log records every pass with its reason (policy or low-space greedy).
        LSFS_LOG="info,fuser=warn,lsfs_core::fs::clean=debug" \
            "$lsfs" mount "$img" "$mnt" --background --config "$work/lsfs.toml" 2> "$run/server.log"
        # The background server's pid (the pattern holds this run's unique temporary paths).
        server_pid=$(pgrep -f -- "mount $img $mnt" | head -1 || true)
        total_blocks=$(df -B4096 --output=size "$mnt" | tail -1 | tr -d ' ')
        case "$workload" in
            aging) per=$blocks_per_aged_file ;;
            *) per=$blocks_per_small_file ;;
        esac
        files=$(awk -v t="$total_blocks" -v p="$fill_percent" -v b="$per" \
            'BEGIN { printf "%d", t * p / 100 / b }')
        printf '%-9s %-13s %7d files … ' "$workload" "$policy" "$files" >&2
        if ! run_workload fill 0 > "$run/workload-fill.json" 2> "$run/workload-fill.err"; then
            status=failed
            error="fill: $(tail -c 300 "$run/workload-fill.err" | tr '\n' ' ')"
        fi
        sync -f "$mnt" 2>/dev/null || true
        used_blocks=$(df -B4096 --output=used "$mnt" | tail -1 | tr -d ' ') || used_blocks=0
        fs_stats=$("$lsfs" stats --mount "$mnt" --json) || fs_stats=""
        live_blocks=$(echo "$fs_stats" | sed -n 's/.*"blocks_used":\([0-9]*\).*/\1/p')
        seg_line=$(echo "$fs_stats" |
            sed -n 's/.*"segment_blocks":\([0-9]*\),"total":\([0-9]*\).*/\1 \2/p')
        seg_total_blocks=$(echo "$seg_line" | awk '{ print $1 * $2 }')
        stats "$run/stats-000.json" || true
        echo "$fs_stats" > "$run/fs-stats-000.json"
        if [ "$status" = ok ]; then
            for n in $(seq 1 "$steps"); do
                if ! run_workload step "$n" > "$run/workload-$n.json" 2> "$run/workload-$n.err"; then
                    status=failed
                    error="step $n: $(tail -c 300 "$run/workload-$n.err" | tr '\n' ' ')"
                    stats "$(printf '%s/stats-%03d.json' "$run" "$n")" || true
                    break
                fi
                stats "$(printf '%s/stats-%03d.json' "$run" "$n")" || break
                "$lsfs" gc status --mount "$mnt" --json \
                    > "$(printf '%s/status-%03d.json' "$run" "$n")" 2>/dev/null || true
            done
            # The engine's own counters (blocks written by class, checkpoints, DAT traffic).
            "$lsfs" stats --mount "$mnt" --json > "$run/fs-stats-end.json" 2>/dev/null || true
        fi
        unmount
        if "$lsfs" fsck "$img" > "$run/fsck.txt" 2>&1; then fsck=clean; else fsck="exit $?"; fi
        elapsed=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        {
            echo "workload=$workload"
            echo "policy=$policy"
            echo "status=$status"
            echo "error=$error"
            echo "image_bytes=$(stat -c %s "$img")"
            echo "segment_bytes=$(awk -v b="${seg_line%% *}" 'BEGIN { print b * 4096 }')"
            echo "files=$files"
            echo "rate_blocks_per_sec=$rate"
            echo "rounds=$rounds"
            echo "used_percent_after_fill=$(awk -v u="$used_blocks" -v t="$total_blocks" 'BEGIN { printf "%.2f", 100 * u / t }')"
            echo "live_blocks_after_fill=$live_blocks"
            echo "live_percent_after_fill=$(awk -v u="$live_blocks" -v t="$seg_total_blocks" 'BEGIN { printf "%.2f", 100 * u / t }')"
            echo "elapsed_secs=$elapsed"
            echo "fsck=$fsck"
        } > "$run/meta.env"
        echo "$status, fsck $fsck, ${elapsed} s" >&2
    done
done

"$lsfs" sim cleaner-report --runs "$runs" --out-dir "$out"
echo "total $(( $(date +%s) - bench_started )) s; results in $out" >&2
