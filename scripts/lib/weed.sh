# shellcheck shell=bash
# A SeaweedFS S3 server on 127.0.0.1 for the scripts that mount s3:// URLs,
# set up as crates/lsfs/tests/weed/mod.rs sets up the tests' (one identity,
# signed requests, free ports, data in a directory of the caller's). Source
# it; it defines functions only:
#   weed_start DIR BUCKET  start `lsfs-weed mini` (scripts/install-deps.sh
#                          builds it) with its data in DIR, make BUCKET, and
#                          export the AWS_ variables that point lsfs at it;
#   weed_stop              stop it (SIGTERM, then SIGKILL after 10 s).

WEED_KEY_ID=lsfs-test
WEED_SECRET=lsfs-test-secret
WEED_REGION=us-east-1
weed_pid=
weed_ports=()

# weed_curl ARGS: curl signed as the server's identity; prints the status.
weed_curl() {
    curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 "aws:amz:$WEED_REGION:s3" \
        --user "$WEED_KEY_ID:$WEED_SECRET" "$@"
}

weed_start() {
    local dir=$1 bucket=$2 attempt i code
    local -a p
    if ! command -v lsfs-weed >/dev/null; then
        echo "weed.sh: lsfs-weed not found: run scripts/install-deps.sh (as root) to build it" >&2
        return 1
    fi
    mkdir -p "$dir/data"
    for attempt in 1 2 3; do
        # Ten ports the kernel calls free now, all held at once so that no
        # two are the same; a server that finds one taken meanwhile exits,
        # and the next attempt chooses again.
        read -r -a p < <(python3 -c '
import socket
s = [socket.socket() for _ in range(10)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
        # weed makes its identity from these two variables, and lsfs reads
        # every AWS_ one: neither inherits the caller's.
        (
            while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(AWS|S3)_')
            export AWS_ACCESS_KEY_ID=$WEED_KEY_ID AWS_SECRET_ACCESS_KEY=$WEED_SECRET
            exec lsfs-weed -logdir="$dir" mini -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
                -s3.port="${p[0]}" -s3.port.grpc="${p[1]}" \
                -master.port="${p[2]}" -master.port.grpc="${p[3]}" \
                -volume.port="${p[4]}" -volume.port.grpc="${p[5]}" \
                -filer.port="${p[6]}" -filer.port.grpc="${p[7]}" \
                -admin.port="${p[8]}" -admin.port.grpc="${p[9]}" \
                -s3.localSocket="$dir/s3.sock" -filer.localSocket="$dir/filer.sock" \
                -webdav=false -admin.ui=false -admin.port.legacy=0 \
                -s3.port.iceberg=0 -s3.port.lance=0 -master.telemetry=false
        ) </dev/null >>"$dir/weed.log" 2>&1 &
        weed_pid=$!
        weed_ports=("${p[@]}")
        for ((i = 0; i < 900; i++)); do
            kill -0 "$weed_pid" 2>/dev/null || break
            code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${p[0]}/" || true)
            [[ $code != 000 ]] && break
            sleep 0.1
        done
        if kill -0 "$weed_pid" 2>/dev/null && [[ $code != 000 ]]; then
            break
        fi
        weed_stop
        if ((attempt == 3)); then
            echo "weed.sh: lsfs-weed did not start; its log:" >&2
            tail -30 "$dir/weed.log" >&2
            return 1
        fi
    done
    export AWS_ENDPOINT_URL=http://127.0.0.1:${p[0]} AWS_REGION=$WEED_REGION AWS_ALLOW_HTTP=true \
        AWS_ACCESS_KEY_ID=$WEED_KEY_ID AWS_SECRET_ACCESS_KEY=$WEED_SECRET
    # Retried while the filer behind the S3 port is still starting.
    for ((i = 0; i < 450; i++)); do
        code=$(weed_curl -X PUT "$AWS_ENDPOINT_URL/$bucket" || true)
        [[ $code == 200 || $code == 409 ]] && return 0
        sleep 0.2
    done
    echo "weed.sh: making bucket $bucket answered $code" >&2
    return 1
}

weed_stop() {
    [[ -n $weed_pid ]] || return 0
    kill "$weed_pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$weed_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$weed_pid" 2>/dev/null || true
    wait "$weed_pid" 2>/dev/null || true
    weed_pid=
    # weed leaves some of its gRPC sockets in /tmp, named by port.
    local port part
    for port in "${weed_ports[@]}"; do
        for part in master volume filer admin s3; do
            rm -f "/tmp/seaweedfs-$part-grpc-$port.sock"
        done
    done
    weed_ports=()
}

# weed_scratch NAME: for benchmark scripts, a scratch directory $dir under
# /var/tmp with a mount point $mnt, and a SeaweedFS server in it serving
# bucket lsfs-bench; at exit, whatever is mounted on $mnt is unmounted,
# the server (and $mount_pid, the mount's process, if set) waited for,
# and $dir removed, also on failure.
weed_scratch() {
    dir=$(mktemp -d "/var/tmp/$1.XXXXXX")
    mnt=$dir/mnt
    mkdir "$mnt"
    mount_pid=
    trap weed_scratch_cleanup EXIT
    weed_start "$dir/weed" lsfs-bench
}

weed_scratch_cleanup() {
    if mountpoint -q "$mnt"; then
        fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" || true
    fi
    [[ -n $mount_pid ]] && { wait "$mount_pid" 2>/dev/null || true; }
    weed_stop
    rm -rf "$dir"
}
