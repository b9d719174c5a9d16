#!/usr/bin/env bash
# Benchmarks lsfs against ext4, btrfs and xfs in one run.
#
#   scripts/bench.sh [--quick] [--out DIR] [--rounds N] [--fs "lsfs ext4 btrfs xfs"] [--size 4G]
#
# Every file system gets a fresh image file of the same size for every
# workload: ext4, btrfs and xfs through a loop device (losetup), lsfs directly
# on its image file through FUSE. Workloads (in this order; for each workload
# the file systems run one after another, so machine drift hits all of them):
#
#   seqwrite   fio, 1 MiB sequential write of one file, fsync at the end
#   seqread    fio, 1 MiB sequential read of that file after unmount, drop_caches
#              and mount (so both the kernel's and lsfs's own cache are cold)
#   randwrite  fio, 4 KiB random writes with an fsync after every write, into a
#              preallocated (written and fsynced) file, fixed size and runtime
#   randwrite4 the same with four jobs at once, each on a file of its own (a
#              quarter of the size): concurrent fsyncs, where group commit pays
#   postmark   small-file create/read/append/delete (bench/postmark.cfg),
#              followed by a syncfs; timed by wall clock
#   dbench1    dbench with /usr/share/dbench/client.txt for a fixed time, 1 client
#   dbench4    the same with 4 clients
#
# The whole sequence runs --rounds times (default 2, --quick 1); the report
# gives the median per file system and the spread. The machine is shared, so
# one round alone can be off by a factor of two or more.
#
# Results: DIR/results.json, DIR/results.md (absolute numbers and the ratios
# lsfs/ext4, lsfs/btrfs, lsfs/xfs) and DIR/results.svg, made by bench/report.py
# from the raw tool outputs kept in DIR/raw/. For lsfs it also records the
# `lsfs stats` counters before and after each workload and the RSS of the
# `lsfs mount` process (sampled every 0.5 s).
#
# LSFS_MOUNT_OPTS=OPTS mounts lsfs with `-o OPTS` (e.g. writeback_cache).
#
# Images live under $BENCH_TMP (default /var/tmp); everything this script
# mounts, attaches or creates is removed by an EXIT trap, also on failure.
# Needs root and the tools from scripts/install-deps.sh.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$REPO/docs/bench
QUICK=false
FSLIST="lsfs ext4 btrfs xfs"
IMG_SIZE=4G
LSFS=${LSFS:-$REPO/target/release/lsfs}
ROUNDS=""

usage() { sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while (($#)); do
    case $1 in
        --quick) QUICK=true ;;
        --rounds) ROUNDS=$2; shift ;;
        --out) OUT=$2; shift ;;
        --fs) FSLIST=$2; shift ;;
        --size) IMG_SIZE=$2; shift ;;
        -h|--help) usage 0 ;;
        *) echo "bench.sh: unknown argument $1" >&2; usage 2 >&2 ;;
    esac
    shift
done
[[ $OUT = /* ]] || OUT=$PWD/$OUT

if $QUICK; then
    SEQ_MB=128      # seqwrite/seqread file size
    RW_MB=32        # randwrite file size
    RW_SECS=5       # randwrite runtime
    PM_FILES=500    # postmark files
    PM_TX=1000      # postmark transactions
    DB_SECS=5       # dbench runtime
    ROUNDS=${ROUNDS:-1}
else
    SEQ_MB=512
    RW_MB=128
    RW_SECS=10
    PM_FILES=2000
    PM_TX=5000
    DB_SECS=10
    ROUNDS=${ROUNDS:-2}
fi
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "bench.sh: --rounds needs a positive number" >&2; exit 2; }
WORKLOADS="seqwrite seqread randwrite randwrite4 postmark dbench1 dbench4"

# --- checks -----------------------------------------------------------------
PROG=bench.sh
# shellcheck source=lib/peer-fs.sh
source "$REPO/scripts/lib/peer-fs.sh"
[[ $(id -u) -eq 0 ]] || die "must run as root (losetup, mount, drop_caches)"
for tool in fio postmark dbench losetup mkfs.ext4 mkfs.btrfs mkfs.xfs fusermount3 python3; do
    command -v "$tool" >/dev/null || die "$tool not found; run scripts/install-deps.sh"
done
[[ -f /usr/share/dbench/client.txt ]] || die "dbench's client.txt is missing"
if [[ " $FSLIST " = *" lsfs "* && ! -x $LSFS ]]; then
    die "$LSFS not found; run: cargo build --release -p lsfs"
fi

WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/lsfs-bench.XXXXXX")
RAW=$OUT/raw
mkdir -p "$OUT"
rm -rf "$RAW"
mkdir -p "$RAW"

# --- state and cleanup ------------------------------------------------------
RSS_PID=""       # the RSS sampler

stop_rss() {
    if [[ -n $RSS_PID ]]; then
        kill "$RSS_PID" 2>/dev/null || true
        wait "$RSS_PID" 2>/dev/null || true
        RSS_PID=""
    fi
}
before_unmount() { stop_rss; }
peer_fs_trap

# --- file systems -----------------------------------------------------------
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# mount_lsfs_or_peer: mounts the current image at $WORK/mnt. The lsfs server
# keeps this stderr: its log goes to the raw dir.
mount_lsfs_or_peer() {
    local opts=()
    [[ -n ${LSFS_MOUNT_OPTS:-} ]] && opts=(-o "$LSFS_MOUNT_OPTS")
    mount_fs "$RAW/lsfs-mount.log" "${opts[@]}"
}

# setup_fs FS: a fresh image of $IMG_SIZE with a new FS on it, mounted.
setup_fs() {
    CUR_FS=$1
    CUR_IMG=$WORK/$1.img
    case $1 in
        lsfs)
            "$LSFS" mkfs "$CUR_IMG" --size "$IMG_SIZE" >/dev/null ;;
        *)
            attach_image "$IMG_SIZE"
            mkfs_peer "$1" -q >/dev/null ;;
    esac
    mount_lsfs_or_peer
}

# remount_cold: unmount, drop the kernel's caches, mount again.
remount_cold() {
    unmount_fs
    drop_caches
    mount_lsfs_or_peer
}

# --- lsfs instrumentation ---------------------------------------------------
start_rss() { # start_rss FILE: samples the RSS (KiB) of the lsfs mount process
    [[ $CUR_FS = lsfs && -n $LSFS_PID ]] || return 0
    local pid=$LSFS_PID file=$1
    (
        while kill -0 "$pid" 2>/dev/null; do
            ps -o rss= -p "$pid" >>"$file" 2>/dev/null || break
            sleep 0.5
        done
    ) &
    RSS_PID=$!
}

lsfs_stats() { # lsfs_stats FILE
    [[ $CUR_FS = lsfs ]] || return 0
    "$LSFS" stats --mount "$CUR_MNT" --json >"$1" 2>/dev/null || echo '{}' >"$1"
}

# timed NAME CMD...: runs CMD, writes its wall time in seconds to $RAW/NAME.time
timed() {
    local name=$1 t0 t1
    shift
    t0=$(now)
    "$@"
    t1=$(now)
    echo "$t0 $t1" | awk '{printf "%.6f\n", $2 - $1}' >"$RAW/$name.time"
}

FIO_COMMON=(--ioengine=psync --numjobs=1 --output-format=json)

# --- workloads --------------------------------------------------------------
# Each run_WORKLOAD FS sets up what it needs on the mounted file system; the
# measured part is bracketed by lsfs stats / RSS sampling.

# lsfs_cpu FILE: user and system CPU time (clock ticks) of the lsfs mount
# process, a measure that contention from other work on the machine barely moves.
lsfs_cpu() {
    [[ $CUR_FS = lsfs && -n $LSFS_PID ]] || return 0
    # Fields 14 and 15 of /proc/PID/stat; the name (field 2) has no spaces here.
    awk -v hz="$(getconf CLK_TCK)" '{print $14, $15, hz}' "/proc/$LSFS_PID/stat" >>"$1"
}

measure_begin() { lsfs_stats "$RAW/$1.stats0.json"; lsfs_cpu "$RAW/$1.cpu"; start_rss "$RAW/$1.rss"; }
measure_end() { stop_rss; lsfs_cpu "$RAW/$1.cpu"; lsfs_stats "$RAW/$1.stats1.json"; }

run_seqwrite_seqread() { # both workloads share the file
    local fs=$1
    setup_fs "$fs"
    measure_begin "seqwrite-$fs.r$ROUND"
    timed "seqwrite-$fs.r$ROUND" fio --name=seqwrite --filename="$CUR_MNT/seq" --rw=write --bs=1M \
        --size="${SEQ_MB}M" --end_fsync=1 "${FIO_COMMON[@]}" --output="$RAW/seqwrite-$fs.r$ROUND.json"
    measure_end "seqwrite-$fs.r$ROUND"
    remount_cold
    measure_begin "seqread-$fs.r$ROUND"
    timed "seqread-$fs.r$ROUND" fio --name=seqread --filename="$CUR_MNT/seq" --rw=read --bs=1M \
        --size="${SEQ_MB}M" "${FIO_COMMON[@]}" --output="$RAW/seqread-$fs.r$ROUND.json"
    measure_end "seqread-$fs.r$ROUND"
    teardown_fs
}

# run_randwrite FS JOBS: JOBS fio jobs at once, each on a file of its own
# of RW_MB / JOBS, written whole first (and fsynced) so the measured phase
# overwrites allocated blocks and fio does no layout of its own.
run_randwrite() {
    local fs=$1 jobs=$2 wl=randwrite
    ((jobs > 1)) && wl=randwrite$jobs
    setup_fs "$fs"
    local job=(--directory="$CUR_MNT" --numjobs="$jobs" --size="$((RW_MB / jobs))M"
        --ioengine=psync --group_reporting --output-format=json)
    fio --name=rand --rw=write --bs=1M --end_fsync=1 "${job[@]}" --output=/dev/null
    measure_begin "$wl-$fs.r$ROUND"
    timed "$wl-$fs.r$ROUND" fio --name=rand --rw=randwrite --bs=4k --fsync=1 \
        --time_based --runtime="$RW_SECS" --randrepeat=1 "${job[@]}" \
        --output="$RAW/$wl-$fs.r$ROUND.json"
    measure_end "$wl-$fs.r$ROUND"
    teardown_fs
}

run_postmark() {
    local fs=$1 cfg=$WORK/postmark.cfg
    setup_fs "$fs"
    mkdir -p "$CUR_MNT/pm"
    sed -e "s|@LOCATION@|$CUR_MNT/pm|" -e "s|@NUMBER@|$PM_FILES|" \
        -e "s|@TRANSACTIONS@|$PM_TX|" "$REPO/bench/postmark.cfg" | grep -v '^#' >"$cfg"
    measure_begin "postmark-$fs.r$ROUND"
    # The file system's own sync is part of the measured time: postmark never
    # fsyncs, so without it the kernel file systems would only fill the page cache.
    timed "postmark-$fs.r$ROUND" bash -c 'postmark "$1" >"$2" && sync -f "$3"' _ \
        "$cfg" "$RAW/postmark-$fs.r$ROUND.txt" "$CUR_MNT/pm"
    measure_end "postmark-$fs.r$ROUND"
    teardown_fs
}

# run_dbench FS CLIENTS
run_dbench() {
    local fs=$1 clients=$2
    local wl=dbench$clients
    setup_fs "$fs"
    measure_begin "$wl-$fs.r$ROUND"
    timed "$wl-$fs.r$ROUND" dbench -D "$CUR_MNT" -t "$DB_SECS" -c /usr/share/dbench/client.txt \
        "$clients" >"$RAW/$wl-$fs.r$ROUND.txt" 2>&1
    measure_end "$wl-$fs.r$ROUND"
    teardown_fs
}

# --- the run ----------------------------------------------------------------
mode=default
$QUICK && mode=quick
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
echo "bench.sh: $mode run, file systems: $FSLIST, images of $IMG_SIZE in $WORK"
t_all=$(now)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    # Odd rounds run the file systems in the given order, even rounds reversed.
    order=$FSLIST
    ((ROUND % 2)) || order=$(echo "$FSLIST" | tr ' ' '\n' | tac | tr '\n' ' ')
    for wl in seqwrite randwrite randwrite4 postmark dbench1 dbench4; do
        for fs in $order; do
            echo "bench.sh: $(date -u +%H:%M:%S) round $ROUND/$ROUNDS: $wl on $fs"
            case $wl in
                seqwrite) run_seqwrite_seqread "$fs" ;;
                randwrite) run_randwrite "$fs" 1 ;;
                randwrite4) run_randwrite "$fs" 4 ;;
                postmark) run_postmark "$fs" ;;
                dbench1) run_dbench "$fs" 1 ;;
                dbench4) run_dbench "$fs" 4 ;;
            esac
        done
    done
done
elapsed=$(echo "$t_all $(now)" | awk '{printf "%.1f", $2 - $1}')

# --- metadata and report ----------------------------------------------------
cat >"$RAW/meta.json" <<EOF
{
  "mode": "$mode",
  "started_utc": "$started",
  "elapsed_s": $elapsed,
  "command": "scripts/bench.sh$($QUICK && echo ' --quick')",
  "rounds": $ROUNDS,
  "loadavg_before": "$load_before",
  "loadavg_after": "$(cut -d' ' -f1-3 /proc/loadavg)",
  "filesystems": "$FSLIST",
  "lsfs_mount_options": "${LSFS_MOUNT_OPTS:-}",
  "workloads": "$WORKLOADS",
  "image_size": "$IMG_SIZE",
  "seq_mb": $SEQ_MB,
  "randwrite_mb": $RW_MB,
  "randwrite_s": $RW_SECS,
  "postmark_files": $PM_FILES,
  "postmark_transactions": $PM_TX,
  "dbench_s": $DB_SECS,
  $(provenance_json),
  "machine": $(machine_json "\"fio\": \"$(fio --version)\"")
}
EOF
python3 "$REPO/bench/report.py" "$OUT"
echo "bench.sh: done in ${elapsed}s; $OUT/results.md"
