#!/usr/bin/env bash
# Concurrent stress with the cleaner active: stress-ng's file stressors
# (Debian's stress-ng) on a mounted lsfs whose image is small enough, and
# whose protection period short enough, that the cleaner runs throughout.
# Then unmount and fsck, and report the server's peak memory.
#
#   scripts/stress.sh [SECONDS] [--fill PERCENT] [--threaded-logging MODE]
#
# SECONDS defaults to 120 (needs root, FUSE, stress-ng). --fill first writes
# cold 1 MiB files up to PERCENT (0..=90) of the file system's capacity,
# then overwrites randomly chosen ones whole (with fsync) during the stress
# run and checks them before the unmount and after a read-only remount, so
# the cleaner works in its low-space mode; with --threaded-logging always
# (or adaptive) that is where it plugs holes (docs/CLEANER.md §5).
#
# The mount is always unmounted and the work directory removed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=120
fill=0
threaded=off
while (($#)); do
    case $1 in
        --fill) fill=$2; shift ;;
        --threaded-logging) threaded=$2; shift ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) [[ $1 =~ ^[0-9]+$ ]] || { echo "stress.sh: unknown argument $1" >&2; exit 2; }
           secs=$1 ;;
    esac
    shift
done
[[ $fill =~ ^[0-9]+$ ]] && ((fill <= 90)) || { echo "stress.sh: --fill must be 0..=90, got $fill" >&2; exit 2; }
case $threaded in off|adaptive|always) ;; *)
    echo "stress.sh: --threaded-logging must be off, adaptive or always, got $threaded" >&2; exit 2 ;;
esac
lsfs=$(realpath "${LSFS:-target/release/lsfs}")
command -v stress-ng >/dev/null || { echo "stress.sh: stress-ng missing; run scripts/install-deps.sh" >&2; exit 2; }

# shellcheck source=lib/lsfs-mount.sh
source scripts/lib/lsfs-mount.sh
lsfs_workdir stress
chmod 0755 "$work"

cat > "$work/lsfs.toml" <<TOML
protection_secs = 0
[cleaner]
check_interval_secs = 1
min_free_percent = 15
max_free_percent = 30
threaded_logging = "$threaded"
TOML
"$lsfs" mkfs "$img" --size 512M --segment-size 1M
LSFS_LOG=warn "$lsfs" mount "$img" "$mnt" --config "$work/lsfs.toml" --background
pid=$(pgrep -f "lsfs mount $img" | head -1)

# Every fill file whose last write succeeded must read back as written.
verify_fill() {
    local bad=0 checked=0 sum i
    for sum in "$work"/sums/*; do
        i=${sum##*/}
        if [[ $(sha256sum <"$mnt/fill/$i") != "$(cat "$sum")" ]]; then
            echo "stress: fill/$i does not read back as last written" >&2
            bad=1
        fi
        checked=$((checked + 1))
    done
    echo "== fill files: $checked read back as last written"
    ((bad == 0))
}

churn_pid=""
if ((fill > 0)); then
    # Cold files up to the fill level (statfs counts lsfs's usable blocks).
    read -r bsize blocks < <(stat -f -c '%S %b' "$mnt")
    nfiles=$((bsize * blocks * fill / 100 / 1048576))
    echo "== filling $fill %: $nfiles files of 1 MiB"
    mkdir "$mnt/fill" "$work/sums"
    for i in $(seq "$nfiles"); do
        head -c 1048576 /dev/urandom >"$work/buf"
        cp "$work/buf" "$mnt/fill/$i"
        sha256sum <"$work/buf" >"$work/sums/$i"
    done
    sync -f "$mnt"
    # Overwrite random fill files in place while stress-ng runs; the checksum
    # of each file's last content is kept outside the mount. A write that
    # fails (ENOSPC while stress-ng fills the rest) leaves the file partly
    # old and partly new, so its sum is dropped and it is not checked.
    ( end=$((SECONDS + secs)); n=0
      while ((SECONDS < end)); do
          i=$((RANDOM % nfiles + 1))
          head -c 1048576 /dev/urandom >"$work/churn"
          if dd if="$work/churn" of="$mnt/fill/$i" bs=1M conv=notrunc,fsync status=none 2>/dev/null; then
              sha256sum <"$work/churn" >"$work/sums/$i"
          else
              rm -f "$work/sums/$i"
          fi
          n=$((n + 1))
      done; echo "== churn: $n overwrites of fill files" ) &
    churn_pid=$!
fi

echo "== stress-ng for ${secs}s on $mnt"
stress-ng --temp-path "$mnt" --timeout "${secs}s" --metrics-brief --verify \
    --hdd 2 --hdd-bytes 32M --dir 1 --dentry 1 --rename 1 --link 1 --symlink 1 \
    --fallocate 1 --fallocate-bytes 16M --xattr 1 --seek 1 --seek-size 16M \
    --filename 1 --chdir 1 --chmod 1 --utime 1
if [[ -n $churn_pid ]]; then
    wait "$churn_pid"
    verify_fill
fi
hwm=$(awk '/VmHWM/ {print $2, $3}' "/proc/$pid/status")
echo "== cleaner"
"$lsfs" gc stats --mount "$mnt"
t0=$SECONDS
fusermount3 -u "$mnt"
# The server writes its last checkpoint after the kernel lets go.
wait_lsfs_exit "$img" 120 || true
echo "== server exited $((SECONDS - t0)) s after the unmount"
echo "== fsck"
"$lsfs" fsck "$img"
if ((fill > 0)); then
    echo "== remount"
    LSFS_LOG=warn "$lsfs" mount "$img" "$mnt" -o ro --background
    verify_fill
    fusermount3 -u "$mnt"
fi
echo "stress: passed; lsfs server peak RSS $hwm"
