#!/usr/bin/env bash
# Everyday tools on lsfs and on ext4, btrfs and xfs, in one run.
#
#   scripts/everyday.sh [--out DIR] [--rounds N] [--fs "lsfs ext4 btrfs xfs"] [--size 4G]
#                       [--sqlite-tx N]
#
# Each round gives every file system a fresh image of --size (lsfs: `lsfs
# mkfs` and a FUSE mount with the default options; the others: the default
# mkfs on a loop device over an image file, all on the same disk) and runs,
# timed one by one:
#
#   untar     tar x of a real source tree (a subset of the Linux 6.1 sources
#             from Debian's linux-source package: fs net kernel mm include
#             drivers/net, 16,310 files, 252 MB), then sync -f
#   find_du   find over the tree, then du -s
#   grep      grep -r for a string that is not there (reads every file)
#   diff      diff -r of the tree against the original on the host
#   rm        rm -rf of the tree, then sync -f
#   clone     git clone --no-local of this repository's own .git (a real
#             repository any checkout has), then sync -f
#   checkout  git checkout of the repository's first commit and back, then
#             sync -f
#   sqlite    N transactions (default 300) of one INSERT each with the
#             sqlite3 CLI, default journal mode (each commit fsyncs)
#
# sync -f makes the kernel write its dirty pages to each file system; lsfs
# gets them (FUSE does not forward syncfs, so it does not checkpoint for it).
# Rounds alternate the order of the file systems. The report gives the median
# time of each step per file system, the ratio peer time / lsfs time (above
# 1: lsfs faster) and the geometric mean of those ratios, in DIR/results.md,
# .json and .svg (bench/report.py); every round's raw times and, for lsfs,
# the `lsfs stats` counters (FUSE requests by opcode) around each step are in
# DIR/raw.
#
# The tree is made once from /usr/src/linux-source-6.1.tar.xz (apt-get
# install linux-source-6.1; scripts/install-deps.sh does) and kept under
# $EVERYDAY_CACHE (default /var/tmp/lsfs-everyday), with the original
# extracted beside it for diff. LSFS_MOUNT_OPTS=OPTS mounts lsfs with -o OPTS,
# LSFS_MOUNT_ARGS adds other arguments to `lsfs mount` (e.g. "--threads 2").
# Everything this script mounts, attaches or creates is removed by an EXIT
# trap, also on failure. Needs root.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$REPO/docs/bench/everyday
FSLIST="lsfs ext4 btrfs xfs"
IMG_SIZE=4G
ROUNDS=3
SQLITE_TX=300
LSFS=${LSFS:-$REPO/target/release/lsfs}
CACHE=${EVERYDAY_CACHE:-/var/tmp/lsfs-everyday}
SRC_TAR=/usr/src/linux-source-6.1.tar.xz
TREE_DIRS="fs net kernel mm include drivers/net"
STEPS="untar find_du grep diff rm clone checkout sqlite"

usage() { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while (($#)); do
    case $1 in
        --rounds) ROUNDS=$2; shift ;;
        --out) OUT=$2; shift ;;
        --fs) FSLIST=$2; shift ;;
        --size) IMG_SIZE=$2; shift ;;
        --sqlite-tx) SQLITE_TX=$2; shift ;;
        -h|--help) usage 0 ;;
        *) echo "everyday.sh: unknown argument $1" >&2; usage 2 >&2 ;;
    esac
    shift
done
[[ $OUT = /* ]] || OUT=$PWD/$OUT
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "everyday.sh: --rounds needs a positive number" >&2; exit 2; }
[[ $SQLITE_TX =~ ^[1-9][0-9]*$ ]] || { echo "everyday.sh: --sqlite-tx needs a positive number" >&2; exit 2; }

PROG=everyday.sh
# shellcheck source=lib/peer-fs.sh
source "$REPO/scripts/lib/peer-fs.sh"
[[ $(id -u) -eq 0 ]] || die "must run as root (losetup, mount)"
for tool in tar git sqlite3 losetup mkfs.ext4 mkfs.btrfs mkfs.xfs fusermount3 python3 diff grep; do
    command -v "$tool" >/dev/null || die "$tool not found; run scripts/install-deps.sh"
done
if [[ " $FSLIST " = *" lsfs "* && ! -x $LSFS ]]; then
    die "$LSFS not found; run: cargo build --release -p lsfs"
fi
GIT_DIR_SRC=$(git -C "$REPO" rev-parse --path-format=absolute --git-common-dir)
FIRST_COMMIT=$(git -C "$REPO" rev-list --max-parents=0 HEAD | tail -n1)

# --- the tree, made once --------------------------------------------------------
TARBALL=$CACHE/linux-6.1-subset.tar
ORIG=$CACHE/orig
if [[ ! -f $TARBALL || ! -d $ORIG/linux-source-6.1 ]]; then
    [[ -f $SRC_TAR ]] || die "$SRC_TAR missing; run scripts/install-deps.sh (package linux-source-6.1)"
    echo "everyday.sh: making the tree from $SRC_TAR (once, in $CACHE)"
    mkdir -p "$CACHE"
    rm -rf "$ORIG.tmp" && mkdir -p "$ORIG.tmp"
    # shellcheck disable=SC2046
    tar xJf "$SRC_TAR" -C "$ORIG.tmp" $(printf 'linux-source-6.1/%s ' $TREE_DIRS)
    tar cf "$TARBALL.tmp" -C "$ORIG.tmp" linux-source-6.1
    mv "$TARBALL.tmp" "$TARBALL"
    rm -rf "$ORIG" && mv "$ORIG.tmp" "$ORIG"
fi
TREE_FILES=$(tar tf "$TARBALL" | grep -vc '/$')
TREE_MB=$(( $(stat -c %s "$TARBALL") >> 20 ))

WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/lsfs-everyday.XXXXXX")
RAW=$OUT/raw
mkdir -p "$OUT"
rm -rf "$RAW"
mkdir -p "$RAW"

peer_fs_trap

setup_fs() { # setup_fs FS: a fresh image with FS on it, mounted on $WORK/mnt
    CUR_FS=$1
    CUR_IMG=$WORK/$1.img
    local opts=()
    if [[ $1 = lsfs ]]; then
        "$LSFS" mkfs "$CUR_IMG" --size "$IMG_SIZE" >/dev/null
        [[ -n ${LSFS_MOUNT_OPTS:-} ]] && opts=(-o "$LSFS_MOUNT_OPTS")
        # shellcheck disable=SC2206
        [[ -n ${LSFS_MOUNT_ARGS:-} ]] && opts+=($LSFS_MOUNT_ARGS)
    else
        attach_image "$IMG_SIZE"
        mkfs_peer "$1" -q >/dev/null
    fi
    mount_fs "$RAW/lsfs-mount.log" "${opts[@]}"
}

# step NAME CMD...: runs CMD in the mount, writes its wall time to
# $RAW/NAME-FS.rN.time and, for lsfs, the counters before and after.
step() {
    local name=$1 base t0 t1
    shift
    base=$RAW/$name-$CUR_FS.r$ROUND
    [[ $CUR_FS = lsfs ]] && "$LSFS" stats --mount "$CUR_MNT" --json >"$base.stats0.json"
    t0=$(now)
    (cd "$CUR_MNT" && "$@") >"$base.out" 2>&1 || { cat "$base.out" >&2; die "$name failed on $CUR_FS"; }
    t1=$(now)
    [[ $CUR_FS = lsfs ]] && "$LSFS" stats --mount "$CUR_MNT" --json >"$base.stats1.json"
    echo "$t0 $t1" | awk '{printf "%.6f\n", $2 - $1}' >"$base.time"
}

sqlite_sql() { # the SQL of the transaction loop
    echo "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
    local i
    for ((i = 0; i < SQLITE_TX; i++)); do
        echo "BEGIN; INSERT INTO t(v) VALUES (hex(randomblob(200))); COMMIT;"
    done
}
sqlite_sql >"$WORK/tx.sql"

# The steps, as commands run in the mount point.
do_untar() { tar xf "$TARBALL" && sync -f .; }
do_find_du() { find linux-source-6.1 >/dev/null && du -s linux-source-6.1 >/dev/null; }
do_grep() { # grep exits 1 when it finds nothing, 2 on an error
    local rc=0
    grep -r zzyzx-not-in-the-tree linux-source-6.1 || rc=$?
    ((rc == 1))
}
do_diff() { diff -r "$ORIG/linux-source-6.1" linux-source-6.1; }
do_rm() { rm -rf linux-source-6.1 && sync -f .; }
do_clone() { git clone -q --no-local "$GIT_DIR_SRC" repo && sync -f .; }
do_checkout() {
    git -C repo checkout -q "$FIRST_COMMIT" && git -C repo checkout -q - && sync -f .
}
do_sqlite() { sqlite3 db.sqlite <"$WORK/tx.sql"; }

started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
echo "everyday.sh: $ROUNDS rounds, file systems: $FSLIST, images of $IMG_SIZE in $WORK"
echo "everyday.sh: tree $TARBALL ($TREE_FILES files, $TREE_MB MiB); repository $GIT_DIR_SRC"
t_all=$(now)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    order=$FSLIST
    ((ROUND % 2)) || order=$(echo "$FSLIST" | tr ' ' '\n' | tac | tr '\n' ' ')
    for fs in $order; do
        echo "everyday.sh: $(date -u +%H:%M:%S) round $ROUND/$ROUNDS on $fs"
        setup_fs "$fs"
        for s in $STEPS; do
            step "$s" "do_$s"
        done
        teardown_fs
    done
done
elapsed=$(echo "$t_all $(now)" | awk '{printf "%.1f", $2 - $1}')

cat >"$RAW/meta.json" <<EOF
{
  "suite": "everyday",
  "mode": "everyday",
  "started_utc": "$started",
  "elapsed_s": $elapsed,
  "command": "scripts/everyday.sh --rounds $ROUNDS",
  "rounds": $ROUNDS,
  "loadavg_before": "$load_before",
  "loadavg_after": "$(cut -d' ' -f1-3 /proc/loadavg)",
  "filesystems": "$FSLIST",
  "lsfs_mount_options": "${LSFS_MOUNT_OPTS:-}${LSFS_MOUNT_ARGS:+ $LSFS_MOUNT_ARGS}",
  "workloads": "$STEPS",
  "image_size": "$IMG_SIZE",
  "tree": "Linux 6.1 ($SRC_TAR): $TREE_DIRS; $TREE_FILES files, $TREE_MB MiB tar",
  "repository": "$(git -C "$REPO" rev-list --count HEAD) commits, first $FIRST_COMMIT",
  "sqlite_transactions": $SQLITE_TX,
  $(provenance_json),
  "machine": $(machine_json "\"tools\": \"$(tar --version | head -1); $(git --version); sqlite3 $(sqlite3 --version | cut -d' ' -f1)\"")
}
EOF
python3 "$REPO/bench/report.py" "$OUT"
echo "everyday.sh: done in ${elapsed}s; $OUT/results.md"
