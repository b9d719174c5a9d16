#!/usr/bin/env bash
# The external suites of scripts/suites.sh (pjdfstest, fsx, fsx on shared
# blocks, fsck) on a file system in a real S3 server: SeaweedFS on
# 127.0.0.1 (scripts/lib/weed.sh), started here and stopped at the end,
# also on failure. Usage: scripts/s3-suites.sh PATH_TO_LSFS_BINARY
# FSX_OPS, FSX_CLONE_OPS and LSFS_MOUNT_OPTS as for scripts/suites.sh, but
# fewer fsx operations by default: every flush uploads the segments it
# touched whole (2 MiB each), and fsx's 100,000 operations put 30 GB in
# 8,600 flushes and had not finished after 14 minutes.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lsfs=$(realpath "${1:?usage: s3-suites.sh PATH_TO_LSFS}")

# shellcheck source=lib/weed.sh
source "$here/lib/weed.sh"
weed_dir=$(mktemp -d /var/tmp/lsfs-s3-suites.XXXXXX)
cleanup() {
    weed_stop
    rm -rf "$weed_dir"
}
trap cleanup EXIT
weed_start "$weed_dir" lsfs-suites
echo "== SeaweedFS at $AWS_ENDPOINT_URL"
FSX_OPS=${FSX_OPS:-10000} FSX_CLONE_OPS=${FSX_CLONE_OPS:-2000} \
    LSFS_IMAGE=s3://lsfs-suites/suites "$here/suites.sh" "$lsfs"
