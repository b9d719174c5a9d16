#!/usr/bin/env bash
# Sustained overwrites at the device (issue 17): lsfs, ext4, btrfs and xfs in one run, each on
# its own loop device, with default mkfs and mount settings, measured by what the loop device
# wrote.
#
#   scripts/overwrite-bench.sh [--quick] [--out DIR] [--rounds N] [--fs "lsfs ext4 btrfs xfs"]
#                              [--fill 70,85] [--no-ftl] [--no-small] [--max-rewrite-secs S]
#                              [--tracer auto|blktrace|tracefs] [--keep-traces]
#
# Large file (per fill F in --fill, per file system, per round):
#   1. a fresh 1 GiB image file, attached with losetup; mkfs (lsfs too: `lsfs mkfs /dev/loopN`,
#      so every file system's writes are counted by the same loop device); mount;
#   2. fio writes one file of F % of the device sequentially (1 MiB writes, fsync at the end);
#      then syncfs (and for lsfs a checkpoint, `lsfs checkpoint create`: FUSE has no syncfs);
#   3. fio rewrites 3 × the file's size in random 4 KiB writes into it,
#      --random_distribution=zoned:90/10:10/90 --fsync=32 --overwrite=1 --end_fsync=1, as three
#      fio runs of one file size each (seeds 1, 2, 3 of the round) so that the last third, the
#      steady state, is measured alone; each run is bounded by --max-rewrite-secs / 3;
#   4. syncfs (and the lsfs checkpoint) again; unmount; `lsfs fsck /dev/loopN` for lsfs.
#   Device write amplification = sectors the loop device wrote (/sys/block/loopN/stat, field 7)
#   from just before step 3 to after its final syncfs × 512 ÷ bytes fio wrote in step 3; also
#   per third, and including the unmount. For lsfs, `lsfs stats --json` and `lsfs gc stats
#   --json` before and after step 3.
#
# Small files (per file system, per round): the hot/cold workload of scripts/cleaner-bench.sh at
# the device: a 256 MiB loop device (lsfs: `mkfs --segment-size 512K` as cleaner-bench.sh,
# default mount settings; xfs, which refuses devices under 300 MiB, gets 300 MiB and the same
# files), filled to 80 % of the 256 MiB with 4 KiB files (`lsfs sim workload hot-cold`, 1.17
# blocks per file as cleaner-bench.sh), then 4 rounds of 4 KiB overwrites, 90 % of them to 10 %
# of the files, paced at 1500 files/s, as four steps; device WA as above (per step too). The
# cleaning simulator runs the same geometry (`lsfs sim gc`: disk and segment blocks of the lsfs
# image, lsfs's live share after the fill, its default policy cost-benefit) for device WA ÷
# simulator WA.
#
# End to end on flash (unless --no-ftl): the loop device's completed write and discard requests
# during step 3 are captured (blktrace when the kernel allows it; else the same kernel event,
# block:block_rq_complete, through a private tracefs instance: kernels locked down refuse
# blktrace's debugfs files), and replayed by `lsfs sim ftl` (page-level and FAST, 4 KiB pages,
# 512 KiB erase blocks, 7 % and 28 % over-provisioning) on a device of the loop device's size
# filled sequentially first, a discard dropping the pages it covers; end-to-end WA = file-system WA × FTL WAF. Traces live in the work
# directory under /var/tmp and are deleted at exit (--keep-traces moves them to /var/tmp).
#
# Results: DIR/results.json and DIR/results.md (bench/overwrite_report.py), raw tool outputs in
# DIR/raw/ (not committed). Default DIR: docs/bench/overwrite/latest. --quick: 320 MiB devices
# (mkfs.xfs refuses less than 300 MiB), one rewrite, small files on 128 MiB (xfs 300 MiB) with
# one round, for a check of the script in a few minutes.
#
# LSFS=path chooses the lsfs binary (default target/release/lsfs); LSFS_MOUNT_ARGS adds words to
# its mount command (e.g. "--config FILE" to try other settings; results then name them only in
# raw/). Images live under $BENCH_TMP
# (default /var/tmp). Everything this script mounts, attaches (losetup), creates or starts (lsfs
# mount processes, tracers) is removed or stopped by an EXIT trap, also on failure or Ctrl-C.
# Needs root and the tools from scripts/install-deps.sh.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$REPO/docs/bench/overwrite/latest
QUICK=false
FSLIST="lsfs ext4 btrfs xfs"
FILLS="70,85"
ROUNDS=1
FTL=true
SMALL=true
TRACER_WANTED=auto
KEEP_TRACES=false
MAX_REWRITE_SECS=""
LSFS=${LSFS:-$REPO/target/release/lsfs}

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while (($#)); do
    case $1 in
        --quick) QUICK=true ;;
        --out) OUT=$2; shift ;;
        --rounds) ROUNDS=$2; shift ;;
        --fs) FSLIST=$2; shift ;;
        --fill) FILLS=$2; shift ;;
        --no-ftl) FTL=false ;;
        --no-small) SMALL=false ;;
        --max-rewrite-secs) MAX_REWRITE_SECS=$2; shift ;;
        --tracer) TRACER_WANTED=$2; shift ;;
        --keep-traces) KEEP_TRACES=true ;;
        -h|--help) usage 0 ;;
        *) echo "overwrite-bench.sh: unknown argument $1" >&2; usage 2 >&2 ;;
    esac
    shift
done
[[ $OUT = /* ]] || OUT=$PWD/$OUT

if $QUICK; then
    DEV_MB=320; REWRITES=1; SMALL_MB=128; SMALL_ROUNDS=1; SMALL_STEPS=2
    MAX_REWRITE_SECS=${MAX_REWRITE_SECS:-300}
else
    DEV_MB=1024; REWRITES=3; SMALL_MB=256; SMALL_ROUNDS=4; SMALL_STEPS=4
    MAX_REWRITE_SECS=${MAX_REWRITE_SECS:-900}
fi
XFS_MIN_MB=300              # mkfs.xfs refuses smaller devices
SMALL_FILL=80               # percent of the small device's blocks, as files of 1.17 blocks
SMALL_RATE=1500             # overwrites per second, as scripts/cleaner-bench.sh
SMALL_SEGMENT=512K          # lsfs segment size for the small-file image, as cleaner-bench.sh
SMALL_MAX_SECS=$((MAX_REWRITE_SECS))  # no new small-file step starts after this long
BLOCKS_PER_SMALL_FILE=1.17
SIM_POLICY=cost-benefit     # lsfs's default cleaner policy (docs/CONFIG.md)
FTL_OPS="0.07 0.28"
FTL_KINDS=page-level,fast
PARTS=3                     # the rewrite runs as three fio runs

PROG=overwrite-bench.sh
# shellcheck source=lib/peer-fs.sh
source "$REPO/scripts/lib/peer-fs.sh"
# The server writes its last checkpoint, then exits and frees the device.
LSFS_EXIT_SECS=300
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds needs a positive number"
[[ $MAX_REWRITE_SECS =~ ^[1-9][0-9]*$ ]] || die "--max-rewrite-secs needs a positive number"
[[ $FILLS =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--fill needs percentages like 70,85"
case $TRACER_WANTED in auto|blktrace|tracefs) ;; *) die "--tracer: auto, blktrace or tracefs" ;; esac
for fs in $FSLIST; do
    case $fs in lsfs|ext4|btrfs|xfs) ;; *) die "unknown file system $fs" ;; esac
done

# --- checks -----------------------------------------------------------------
[[ $(id -u) -eq 0 ]] || die "must run as root (losetup, mount, tracing)"
need=(fio losetup mkfs.ext4 mkfs.btrfs mkfs.xfs fusermount3 python3 mountpoint findmnt)
if $FTL && [[ $TRACER_WANTED != tracefs ]]; then need+=(blktrace blkparse); fi
for tool in "${need[@]}"; do
    command -v "$tool" >/dev/null || die "$tool not found; run scripts/install-deps.sh"
done
# lsfs itself runs the small-file workload, the simulators and the FTL replays.
[[ -x $LSFS ]] || die "$LSFS not found; run: cargo build --release -p lsfs (or set LSFS=path)"

WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/lsfs-overwrite.XXXXXX")
TRACES=$WORK/traces
RAW=$OUT/raw
mkdir -p "$OUT" "$TRACES"
rm -rf "$RAW"
mkdir -p "$RAW"

# --- state and cleanup ------------------------------------------------------
TRACE_PID=""       # blktrace, or the reader of the tracefs pipe
CHILD_PID=""       # the workload now running (fio, lsfs sim workload)
TRACE_INST=""      # our tracefs instance directory
MOUNTED_DEBUGFS=false
MOUNTED_TRACEFS=false

# run CMD...: runs CMD in the background and waits for it, so that a signal reaches the trap at
# once instead of after CMD ends (and the trap can stop CMD).
run() {
    "$@" &
    CHILD_PID=$!
    local rc=0
    wait "$CHILD_PID" || rc=$?
    CHILD_PID=""
    return "$rc"
}

stop_child() {
    if [[ -n $CHILD_PID ]]; then
        kill -TERM "$CHILD_PID" 2>/dev/null || true
        wait "$CHILD_PID" 2>/dev/null || true
        CHILD_PID=""
    fi
}

# Background processes of a non-interactive shell ignore SIGINT, so tracers get SIGTERM (blktrace
# stops and writes its files on either).
stop_tracer_process() {
    if [[ -n $TRACE_PID ]]; then
        kill -TERM "$TRACE_PID" 2>/dev/null || true
        wait "$TRACE_PID" 2>/dev/null || true
        TRACE_PID=""
    fi
    if [[ -n $TRACE_INST && -d $TRACE_INST ]]; then
        echo 0 >"$TRACE_INST/events/block/block_rq_complete/enable" 2>/dev/null || true
    fi
}

cleanup_first() {
    stop_child
    stop_tracer_process
}

cleanup_last() {
    if [[ -n $TRACE_INST && -d $TRACE_INST ]]; then rmdir "$TRACE_INST" 2>/dev/null || true; fi
    if $MOUNTED_TRACEFS; then umount /sys/kernel/tracing 2>/dev/null || true; fi
    if $MOUNTED_DEBUGFS; then umount /sys/kernel/debug 2>/dev/null || true; fi
    if $KEEP_TRACES && [[ -d $TRACES ]] && [[ -n $(ls -A "$TRACES") ]]; then
        local keep
        keep=$(mktemp -d /var/tmp/lsfs-overwrite-traces.XXXXXX)
        mv "$TRACES"/* "$keep"/ && echo "overwrite-bench.sh: traces kept in $keep" >&2
    fi
}
peer_fs_trap

# --- file systems -----------------------------------------------------------
log() { echo "overwrite-bench.sh: $(date -u +%H:%M:%S) $*"; }
wsect() { awk '{print $7}' "/sys/block/$(basename "$CUR_LOOP")/stat"; }

# setup_fs FS MB TAG [LSFS_MKFS_ARGS...]: a fresh loop device of MB MiB with FS on it, mounted.
setup_fs() {
    local fs=$1 mb=$2 tag=$3
    shift 3
    CUR_FS=$fs
    CUR_IMG=$WORK/$fs.img
    attach_image "${mb}M"
    if [[ $fs = lsfs ]]; then
        "$LSFS" mkfs "$CUR_LOOP" "$@" >"$RAW/$tag.mkfs.txt" 2>&1
    else
        mkfs_peer "$fs" >"$RAW/$tag.mkfs.txt" 2>&1
    fi
    # shellcheck disable=SC2086 # LSFS_MOUNT_ARGS is a list of words
    mount_fs "$RAW/$tag.lsfs.log" ${LSFS_MOUNT_ARGS:-}
}

# settle: everything the file system owes reaches the device. syncfs; FUSE has no syncfs, so
# lsfs also takes a checkpoint (what its 5 s timer would do next).
settle() {
    sync -f "$CUR_MNT" 2>/dev/null || sync
    if [[ $CUR_FS = lsfs ]]; then
        "$LSFS" checkpoint create --mount "$CUR_MNT" >/dev/null 2>&1 || true
    fi
}

lsfs_stats() { # lsfs_stats PREFIX: lsfs stats and gc stats of the mount, as JSON
    [[ $CUR_FS = lsfs ]] || return 0
    "$LSFS" stats --mount "$CUR_MNT" --json >"$1.stats.json" 2>/dev/null || echo '{}' >"$1.stats.json"
    "$LSFS" gc stats --mount "$CUR_MNT" --json >"$1.gc.json" 2>/dev/null || echo '{}' >"$1.gc.json"
}

# fsck_fs TAG: lsfs fsck of the unmounted device; prints "clean" or "exit N".
fsck_fs() {
    [[ $CUR_FS = lsfs ]] || { echo "-"; return 0; }
    if "$LSFS" fsck "$CUR_LOOP" >"$RAW/$1.fsck.txt" 2>&1; then echo clean; else echo "exit $?"; fi
}

# finish_run ENV TAG T0 STATUS ERROR: unmount (what the unmount writes is counted too), fsck
# lsfs, tear down, and record the run's outcome and its time since T0 in ENV.
finish_run() {
    local env=$1 tag=$2 t0=$3
    unmount_fs
    echo "sect_umount=$(wsect)" >>"$env"
    # The server's own log (beside the mount point) joins the mount command's, so the report's
    # warnings include what the cleaner said.
    if [[ -f $WORK/.mnt.lsfs.log ]]; then
        cat "$WORK/.mnt.lsfs.log" >>"$RAW/$tag.lsfs.log"
        rm -f "$WORK/.mnt.lsfs.log"
    fi
    echo "fsck=$(fsck_fs "$tag")" >>"$env"
    teardown_fs
    {
        echo "status=$4"
        echo "error=$5"
        echo "elapsed_s=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}')"
    } >>"$env"
}

# --- tracing the loop device ------------------------------------------------
TRACER=""           # blktrace or tracefs, chosen at the first capture
TRACER_NOTE=""
TRACE_FILE=""

tracefs_dir() {
    if [[ -f /sys/kernel/tracing/trace ]]; then echo /sys/kernel/tracing; return; fi
    if mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; then
        MOUNTED_TRACEFS=true
        echo /sys/kernel/tracing
        return
    fi
    [[ -f /sys/kernel/debug/tracing/trace ]] && echo /sys/kernel/debug/tracing
}

ensure_debugfs() {
    mountpoint -q /sys/kernel/debug && return 0
    mount -t debugfs none /sys/kernel/debug && MOUNTED_DEBUGFS=true
}

# blktrace_start DIR: starts blktrace on the loop device; fails if it exits at once (a kernel in
# lockdown refuses its debugfs files).
blktrace_start() {
    ensure_debugfs || return 1
    blktrace -d "$CUR_LOOP" -a write -b 1024 -n 16 -D "$1" -o trace >"$1/blktrace.out" 2>&1 &
    TRACE_PID=$!
    sleep 1
    if ! kill -0 "$TRACE_PID" 2>/dev/null; then
        wait "$TRACE_PID" 2>/dev/null || true
        TRACE_PID=""
        return 1
    fi
}

# trace_start TAG
trace_start() {
    $FTL || return 0
    local tag=$1 dir=$TRACES/$1
    mkdir -p "$dir"
    if [[ -z $TRACER ]]; then
        if [[ $TRACER_WANTED != tracefs ]]; then
            if blktrace_start "$dir"; then
                TRACER=blktrace
            else
                TRACER_NOTE="blktrace refused: $(head -n1 "$dir/blktrace.out" 2>/dev/null)"
                TRACER_NOTE+=" $(dmesg 2>/dev/null | grep -m1 -o 'Lockdown: blktrace.*' || true)"
                [[ $TRACER_WANTED = blktrace ]] && die "$TRACER_NOTE"
                log "$TRACER_NOTE; tracing block_rq_complete through tracefs instead"
            fi
        fi
        [[ -n $TRACER ]] || TRACER=tracefs
        echo "$TRACER" >"$RAW/tracer.txt"
        echo "$TRACER_NOTE" >>"$RAW/tracer.txt"
        [[ $TRACER = blktrace ]] && return 0
    fi
    if [[ $TRACER = blktrace ]]; then
        blktrace_start "$dir" || die "blktrace failed on $CUR_LOOP: $(cat "$dir/blktrace.out")"
        return 0
    fi
    if [[ -z $TRACE_INST ]]; then
        local t
        t=$(tracefs_dir) || true
        [[ -n $t ]] || die "neither blktrace nor tracefs is available for the FTL traces (--no-ftl skips them)"
        TRACE_INST=$t/instances/lsfs-overwrite-$$
        mkdir "$TRACE_INST"
        echo 16384 >"$TRACE_INST/buffer_size_kb"
    fi
    local ev=$TRACE_INST/events/block/block_rq_complete
    local dev
    dev=$(( ($(stat -c '0x%t' "$CUR_LOOP") << 20) | $(stat -c '0x%T' "$CUR_LOOP") ))
    echo "dev == $dev" >"$ev/filter"
    echo >"$TRACE_INST/trace"     # empties the buffer and its overrun counters
    echo 1 >"$ev/enable"
    TRACE_FILE=$dir/events.txt
    cat "$TRACE_INST/trace_pipe" >"$TRACE_FILE" &
    TRACE_PID=$!
}

# trace_stop TAG: stops the capture; writes TAG's text trace and lost-event count.
trace_stop() {
    $FTL || return 0
    local tag=$1 dir=$TRACES/$1 lost=0
    if [[ $TRACER = blktrace ]]; then
        kill -TERM "$TRACE_PID" 2>/dev/null || true
        wait "$TRACE_PID" 2>/dev/null || true
        TRACE_PID=""
        lost=$(grep -o 'You have [0-9]* ' "$dir/blktrace.out" | awk '{s += $3} END {print s + 0}')
        # Only completions count; keeping only them keeps the text small.
        blkparse -i trace -D "$dir" 2>/dev/null | awk '$6 == "C"' >"$dir/blkparse.txt"
        rm -f "$dir"/trace.blktrace.*
        TRACE_FILE=$dir/blkparse.txt
    else
        echo 0 >"$TRACE_INST/events/block/block_rq_complete/enable"
        # Let the reader drain what the buffer still holds.
        local i
        for ((i = 0; i < 100; i++)); do
            awk '/^entries:/ {s += $2} END {exit (s > 0)}' "$TRACE_INST"/per_cpu/cpu*/stats && break
            sleep 0.1
        done
        sleep 0.2
        kill "$TRACE_PID" 2>/dev/null || true
        wait "$TRACE_PID" 2>/dev/null || true
        TRACE_PID=""
        lost=$(awk '/^overrun:/ {s += $2} END {print s + 0}' "$TRACE_INST"/per_cpu/cpu*/stats)
    fi
    # Sectors of completed writes (RWBS with W), and of other requests that carry sectors and
    # that the loop device's stat counts as written: WRITE_ZEROES ("N", e.g. ext4's lazy
    # inode-table init); the FTL replay takes only the writes.
    local traced
    traced=$(awk -v fmt="$TRACER" '
        function add(rwbs, n) { if (rwbs ~ /W/) w += n; else if (rwbs ~ /^N/) z += n; else if (rwbs ~ /D/) d += n }
        fmt == "blktrace" { if ($9 == "+") add($7, $10); next }
        { i = index($0, "block_rq_complete: "); if (!i) next
          n = split(substr($0, i + 19), f, " ")
          for (k = 3; k < n; k++) if (f[k] == "+") { add(f[2], f[k + 1]); break } }
        END { printf "%d %d %d", w, z, d }' "$TRACE_FILE")
    read -r t_write t_zero t_discard <<<"$traced"
    {
        echo "tracer=$TRACER"
        echo "trace_file=$TRACE_FILE"
        echo "trace_lost_events=$lost"
        echo "trace_write_sectors=$t_write"
        echo "trace_zeroes_sectors=$t_zero"
        echo "trace_discard_sectors=$t_discard"
    } >>"$RAW/$tag.env"
    echo "$TRACE_FILE" >"$dir/path"
}

# --- large file: sequential fill, then random 4 KiB rewrites ------------------
FIO_COMMON=(--ioengine=psync --numjobs=1 --output-format=json)

# run_large FILL FS ROUND
run_large() {
    local fill=$1 fs=$2 round=$3
    local tag=ow-f$fill-$fs-r$round
    local file_mb=$((DEV_MB * fill / 100))
    local part_mb=$((file_mb * REWRITES / PARTS))
    local part_secs=$((MAX_REWRITE_SECS / PARTS))
    local env=$RAW/$tag.env status=ok error="" k
    : >"$env"
    {
        echo "kind=large"; echo "fs=$fs"; echo "fill=$fill"; echo "round=$round"
        echo "dev_mb=$DEV_MB"; echo "file_mb=$file_mb"; echo "part_mb=$part_mb"
        echo "parts=$PARTS"; echo "part_max_secs=$part_secs"
    } >>"$env"
    local t0
    t0=$(now)
    setup_fs "$fs" "$DEV_MB" "$tag"
    echo "loop=$CUR_LOOP" >>"$env"
    echo "sect_setup=$(wsect)" >>"$env"
    if ! run fio --name=fill --filename="$CUR_MNT/file" --rw=write --bs=1M --size="${file_mb}M" \
        --end_fsync=1 "${FIO_COMMON[@]}" --output="$RAW/$tag.fill.json" 2>"$RAW/$tag.fill.err"; then
        status=failed
        error="fill: $(tr '\n' ' ' <"$RAW/$tag.fill.err" | tail -c 300)"
    fi
    settle
    echo "sect_before=$(wsect)" >>"$env"
    echo "t_before=$(now)" >>"$env"
    lsfs_stats "$RAW/$tag.before"
    if [[ $status = ok ]]; then
        trace_start "$tag"
        for ((k = 1; k <= PARTS; k++)); do
            if ! run fio --name=rewrite --filename="$CUR_MNT/file" --rw=randwrite --bs=4k \
                --size="${file_mb}M" --io_size="${part_mb}M" --runtime="$part_secs" \
                --random_distribution=zoned:90/10:10/90 --fsync=32 --overwrite=1 --end_fsync=1 \
                --file_service_type=roundrobin --randseed="$((1000 * round + k))" \
                "${FIO_COMMON[@]}" --output="$RAW/$tag.part$k.json" 2>"$RAW/$tag.part$k.err"; then
                status=failed
                error="rewrite part $k: $(tr '\n' ' ' <"$RAW/$tag.part$k.err" | tail -c 300)"
            fi
            echo "sect_part$k=$(wsect)" >>"$env"
            echo "t_part$k=$(now)" >>"$env"
            [[ $status = ok ]] || break
        done
        settle
        echo "sect_end=$(wsect)" >>"$env"
        echo "t_end=$(now)" >>"$env"
        trace_stop "$tag"
    fi
    lsfs_stats "$RAW/$tag.after"
    if [[ $fs = lsfs ]]; then "$LSFS" checkpoint list --mount "$CUR_MNT" --json \
        >"$RAW/$tag.checkpoints.json" 2>/dev/null || true; fi
    finish_run "$env" "$tag" "$t0" "$status" "$error"
    log "  $fs at $fill %: $status $error"
}

# --- small files: hot/cold overwrites of 4 KiB files --------------------------
# run_small FS ROUND
run_small() {
    local fs=$1 round=$2
    local tag=sf-$fs-r$round
    local mb=$SMALL_MB
    [[ $fs = xfs ]] && ((mb < XFS_MIN_MB)) && mb=$XFS_MIN_MB
    local files
    files=$(awk -v mb="$SMALL_MB" -v p="$SMALL_FILL" -v b="$BLOCKS_PER_SMALL_FILE" \
        'BEGIN {printf "%d", mb * 256 * p / 100 / b}')
    local step_rounds
    step_rounds=$(awk -v r="$SMALL_ROUNDS" -v s="$SMALL_STEPS" 'BEGIN {printf "%.4f", r / s}')
    local env=$RAW/$tag.env status=ok error="" n t0 steps_done=0
    : >"$env"
    {
        echo "kind=small"; echo "fs=$fs"; echo "round=$round"; echo "dev_mb=$mb"
        echo "nominal_dev_mb=$SMALL_MB"; echo "fill=$SMALL_FILL"; echo "files=$files"
        echo "rounds=$SMALL_ROUNDS"; echo "steps=$SMALL_STEPS"; echo "rate=$SMALL_RATE"
        echo "segment_size=$SMALL_SEGMENT"
    } >>"$env"
    t0=$(now)
    setup_fs "$fs" "$mb" "$tag" --segment-size "$SMALL_SEGMENT"
    echo "loop=$CUR_LOOP" >>"$env"
    if ! run "$LSFS" sim workload -q --seed "$((round * 1000))" hot-cold "$CUR_MNT/w" --files "$files" \
        --rounds 0 >"$RAW/$tag.fill.json" 2>"$RAW/$tag.fill.err"; then
        status=failed
        error="fill: $(tr '\n' ' ' <"$RAW/$tag.fill.err" | tail -c 300)"
    fi
    settle
    echo "sect_before=$(wsect)" >>"$env"
    lsfs_stats "$RAW/$tag.before"
    local t_steps
    t_steps=$(now)
    if [[ $status = ok ]]; then
        for ((n = 1; n <= SMALL_STEPS; n++)); do
            if awk -v a="$t_steps" -v b="$(now)" -v m="$SMALL_MAX_SECS" 'BEGIN {exit !(b - a > m)}'; then
                error="time bound: $((n - 1)) of $SMALL_STEPS steps ran in ${SMALL_MAX_SECS} s"
                break
            fi
            if ! run "$LSFS" sim workload -q --seed "$((round * 1000 + n))" hot-cold "$CUR_MNT/w" \
                --files "$files" --existing --rounds "$step_rounds" --rate "$SMALL_RATE" \
                >"$RAW/$tag.step$n.json" 2>"$RAW/$tag.step$n.err"; then
                status=failed
                error="step $n: $(tr '\n' ' ' <"$RAW/$tag.step$n.err" | tail -c 300)"
                rm -f "$RAW/$tag.step$n.json"
                break
            fi
            steps_done=$n
            echo "sect_step$n=$(wsect)" >>"$env"
        done
        settle
        echo "sect_end=$(wsect)" >>"$env"
    fi
    echo "steps_done=$steps_done" >>"$env"
    lsfs_stats "$RAW/$tag.after"
    finish_run "$env" "$tag" "$t0" "$status" "$error"
    log "  small files on $fs: $status $error"
}

# --- the run ----------------------------------------------------------------
mode=full
$QUICK && mode=quick
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log "$mode run: $FSLIST on ${DEV_MB} MiB loop devices, fills $FILLS %, $REWRITES rewrites," \
    "rounds $ROUNDS, FTL $FTL, small files $SMALL; work dir $WORK"
t_all=$(now)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    # Odd rounds run the file systems in the given order, even rounds reversed.
    order=$FSLIST
    ((ROUND % 2)) || order=$(echo "$FSLIST" | tr ' ' '\n' | tac | tr '\n' ' ')
    for fill in ${FILLS//,/ }; do
        for fs in $order; do
            log "round $ROUND/$ROUNDS: $fs, file of $fill % of ${DEV_MB} MiB"
            run_large "$fill" "$fs" "$ROUND"
        done
    done
    if $SMALL; then
        for fs in $order; do
            log "round $ROUND/$ROUNDS: small files on $fs"
            run_small "$fs" "$ROUND"
        done
    fi
done
t_devices=$(now)

# --- simulators (after the device runs, so they do not compete with them) -----
if $SMALL; then
    for env in "$RAW"/sf-lsfs-r*.env; do
        [[ -f $env ]] || continue
        tag=$(basename "$env" .env)
        # The simulated disk has the lsfs image's blocks and segments, and lsfs's live share
        # after the fill (data and metadata: what the cleaner must keep).
        read -r seg_blocks seg_total live < <(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
g = s.get("segments", {})
print(g.get("segment_blocks", 0), g.get("total", 0), s.get("blocks_used", 0))' "$RAW/$tag.before.stats.json" 2>/dev/null || echo "0 0 0")
        if ((seg_blocks > 0 && seg_total > 0)); then
            util=$(awk -v l="$live" -v b="$seg_blocks" -v t="$seg_total" 'BEGIN {printf "%.4f", l / (b * t)}')
            disk=$((seg_blocks * seg_total))
            log "simulator: $SIM_POLICY, $disk blocks, $seg_blocks-block segments, utilization $util"
            echo "sim_disk_blocks=$disk" >>"$env"
            echo "sim_segment_blocks=$seg_blocks" >>"$env"
            echo "sim_utilization=$util" >>"$env"
            "$LSFS" sim gc -q --json --disk-blocks "$disk" --segment-blocks "$seg_blocks" \
                --utilizations "$util" --policies "$SIM_POLICY" --access hot-cold \
                >"$RAW/$tag.sim.json" 2>"$RAW/$tag.sim.err" || true
        fi
    done
fi
if $FTL; then
    for dir in "$TRACES"/*/; do
        [[ -f $dir/path ]] || continue
        tag=$(basename "$dir")
        trace=$(cat "$dir/path")
        format=ftrace
        [[ $TRACER = blktrace ]] && format=blkparse
        dev_mb=$(sed -n 's/^dev_mb=//p' "$RAW/$tag.env")
        for op in $FTL_OPS; do
            log "FTL replay: $tag, over-provisioning $op"
            "$LSFS" sim ftl -q --json --ftl "$FTL_KINDS" --capacity-mib "$dev_mb" \
                --over-provisioning "$op" --trace "$trace" --trace-format "$format" \
                >"$RAW/$tag.ftl-op$op.json" 2>"$RAW/$tag.ftl-op$op.err" || true
        done
        $KEEP_TRACES || rm -f "$trace"
    done
fi
elapsed=$(awk -v a="$t_all" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}')
devices_s=$(awk -v a="$t_all" -v b="$t_devices" 'BEGIN {printf "%.1f", b - a}')

# --- metadata and report ----------------------------------------------------
cat >"$RAW/meta.json" <<EOF
{
  "mode": "$mode",
  "started_utc": "$started",
  "elapsed_s": $elapsed,
  "device_runs_s": $devices_s,
  "command": "scripts/overwrite-bench.sh$($QUICK && echo ' --quick') --fs \"$FSLIST\" --fill $FILLS --rounds $ROUNDS --max-rewrite-secs $MAX_REWRITE_SECS$($FTL || echo ' --no-ftl')$($SMALL || echo ' --no-small')",
  "rounds": $ROUNDS,
  "loadavg_before": "$load_before",
  "loadavg_after": "$(cut -d' ' -f1-3 /proc/loadavg)",
  "filesystems": "$FSLIST",
  "fills": "$FILLS",
  "device_mb": $DEV_MB,
  "rewrites": $REWRITES,
  "parts": $PARTS,
  "max_rewrite_secs": $MAX_REWRITE_SECS,
  "small": $SMALL,
  "small_device_mb": $SMALL_MB,
  "small_fill_percent": $SMALL_FILL,
  "small_rounds": $SMALL_ROUNDS,
  "small_rate": $SMALL_RATE,
  "small_segment_size": "$SMALL_SEGMENT",
  "sim_policy": "$SIM_POLICY",
  "ftl": $FTL,
  "ftl_over_provisioning": "$FTL_OPS",
  "tracer": "${TRACER:-none}",
  "tracer_note": "$(echo "$TRACER_NOTE" | tr -d '"\\' | tr -s ' ')",
  $(provenance_json),
  "machine": $(machine_json "\"fio\": \"$(fio --version)\",
    \"mkfs\": \"$(mkfs.ext4 -V 2>&1 | head -n1); $(mkfs.btrfs --version 2>&1 | head -n1); $(mkfs.xfs -V 2>&1 | head -n1)\"")
}
EOF
python3 "$REPO/bench/overwrite_report.py" "$OUT"
log "done in ${elapsed}s; $OUT/results.md"
