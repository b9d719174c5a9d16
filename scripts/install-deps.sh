#!/usr/bin/env bash
# Installs the tools the lsfs test scripts need, and only what is missing.
# Safe to run again: every step checks first. Run as root on Debian.
set -euo pipefail

# python3: scripts/bench.sh's report (bench/report.py, standard library only);
# blktrace: scripts/overwrite-bench.sh's FTL traces (blktrace, blkparse);
# linux-perf: bench/profile.sh; stress-ng: scripts/stress.sh; gcc and
# libc6-dev: the linker cargo calls (rustup does not install one);
# linux-source-6.1 (the source tree it untars), git and sqlite3:
# scripts/everyday.sh; curl: scripts/lib/weed.sh waits for the S3 server
# with it.
APT_PACKAGES=(fuse3 libfuse3-dev pkg-config fio postmark dbench btrfs-progs xfsprogs e2fsprogs blktrace
              python3 linux-perf stress-ng gcc libc6-dev linux-source-6.1 git sqlite3 curl)

if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps.sh: must run as root (apt-get, newusers)" >&2
    exit 1
fi

# --- apt packages -----------------------------------------------------------
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]})); then
    echo "apt: installing ${missing[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
else
    echo "apt: all of ${APT_PACKAGES[*]} already installed"
fi

# --- cargo-installed test programs ------------------------------------------
# pjdfstest: the Rust rewrite of the POSIX test suite (crate "pjdfstest").
# fsx: the File System eXerciser port by asomers (crate "fsx", binary "fsx").
if ! command -v cargo >/dev/null; then
    echo "install-deps.sh: cargo not found; install Rust (rustup) first" >&2
    exit 1
fi
# cargo installs into ~/.cargo/bin, which a fresh root shell may not have on PATH.
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
for crate in pjdfstest fsx; do
    if command -v "$crate" >/dev/null; then
        echo "cargo: $crate already installed at $(command -v "$crate")"
    else
        echo "cargo: installing $crate"
        cargo install --locked "$crate"
    fi
done

# --- lints (scripts/test.sh): clippy and rustfmt for the default toolchain ---
if ! command -v rustup >/dev/null; then
    echo "install-deps.sh: rustup not found; it installs clippy, rustfmt and the nightly toolchain" >&2
    exit 1
fi
for comp in clippy rustfmt; do
    if rustup component list --installed | grep -q "^$comp"; then
        echo "rustup: $comp already installed"
    else
        rustup component add "$comp"
    fi
done

# --- fuzzing (scripts/fuzz.sh): a nightly toolchain and cargo-fuzz ------------
if ! command -v rustup >/dev/null; then
    echo "install-deps.sh: rustup not found; it installs the nightly toolchain fuzzing needs" >&2
    exit 1
fi
if rustup toolchain list | grep -q '^nightly'; then
    echo "rustup: nightly already installed"
else
    echo "rustup: installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if command -v cargo-fuzz >/dev/null; then
    echo "cargo: cargo-fuzz already installed at $(command -v cargo-fuzz)"
else
    echo "cargo: installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi

# --- dummy users and groups that pjdfstest's config names -------------------
# add_user NAME UID GID: a locked account with no home, made with newusers.
# An empty UID lets newusers choose; a GID that names no group makes one.
add_user() {
    local name=$1 uid=$2 gid=$3 home_existed=false
    [[ -e /nonexistent ]] && home_existed=true
    echo "$name:*:$uid:$gid:pjdfstest dummy user:/nonexistent:/usr/sbin/nologin" | newusers
    # newusers hashes the password field; lock the account so it has none.
    usermod -p '*' "$name"
    # newusers creates the home directory; /nonexistent must stay absent.
    if ! $home_existed && [[ -d /nonexistent ]]; then
        rmdir /nonexistent
    fi
    echo "user: created $name"
}

getent group nogroup >/dev/null || groupadd -g 65534 nogroup
getent passwd nobody >/dev/null || add_user nobody 65534 65534
for name in tests pjdfstest; do
    if getent passwd "$name" >/dev/null; then
        echo "user: $name already exists"
    else
        if getent group "$name" >/dev/null; then
            add_user "$name" "" "$(getent group "$name" | cut -d: -f3)"
        else
            add_user "$name" "" "$name"
        fi
    fi
    getent group "$name" >/dev/null || groupadd "$name"
done
# --- SeaweedFS: the S3 server the s3:// tests start on localhost -----------
# crates/lsfs/tests/s3_mount.rs and scripts/s3-suites.sh run `lsfs-weed
# mini`. Built from its Go module at a pinned version (no release binary is
# fetched), into a directory named after that version so that changing the
# pin builds anew. The build takes about 20 minutes on 2 cores. Debian's
# golang is too old for it (go.mod asks for go 1.26.6): the machine's own Go
# is required.
WEED_MODULE=github.com/seaweedfs/seaweedfs
WEED_VERSION=v0.0.0-20261109003541-7506e5f91cd6
WEED_BIN=/var/cache/lsfs/seaweedfs-$WEED_VERSION/weed
if [[ -x $WEED_BIN ]] && "$WEED_BIN" version >/dev/null 2>&1; then
    echo "seaweedfs: $WEED_BIN already built"
else
    if ! command -v go >/dev/null; then
        echo "install-deps.sh: go not found; SeaweedFS ($WEED_MODULE) needs Go 1.26.6 or later to build" >&2
        exit 1
    fi
    echo "seaweedfs: building $WEED_MODULE@$WEED_VERSION with $(go version) (about 20 minutes)"
    # The module cache holds the source read-only; the build may rewrite
    # go.mod and go.sum (-mod=mod), so it runs in a writable copy.
    weed_src=$(go mod download -json "$WEED_MODULE@$WEED_VERSION" |
        python3 -c 'import json, sys; m = json.load(sys.stdin); sys.exit(m["Error"]) if m.get("Error") else print(m["Dir"])')
    weed_build=$(mktemp -d /var/tmp/lsfs-weed-build.XXXXXX)
    # An interrupted build leaves nothing behind (the copy is made writable
    # first: rm cannot empty read-only directories).
    trap 'chmod -R u+w "$weed_build" 2>/dev/null; rm -rf "$weed_build"' EXIT
    cp -r "$weed_src" "$weed_build/src"
    chmod -R u+w "$weed_build/src"
    (cd "$weed_build/src" &&
        GOFLAGS="${GOFLAGS:-} -mod=mod -buildvcs=false" go build -o "$weed_build/weed" ./weed)
    "$weed_build/weed" version >/dev/null
    # Installed whole under a temporary name and renamed: a reader never
    # finds half a binary.
    install -d "$(dirname "$WEED_BIN")"
    install -m 0755 "$weed_build/weed" "$WEED_BIN.new"
    mv -f "$WEED_BIN.new" "$WEED_BIN"
    chmod -R u+w "$weed_build"
    rm -rf "$weed_build"
    trap - EXIT
    echo "seaweedfs: installed $WEED_BIN"
fi
if [[ $(readlink /usr/local/bin/lsfs-weed 2>/dev/null) != "$WEED_BIN" ]]; then
    ln -sfn "$WEED_BIN" /usr/local/bin/lsfs-weed
    echo "seaweedfs: linked /usr/local/bin/lsfs-weed -> $WEED_BIN"
else
    echo "seaweedfs: /usr/local/bin/lsfs-weed -> $WEED_BIN already"
fi

echo "install-deps.sh: done"
