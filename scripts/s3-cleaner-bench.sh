#!/usr/bin/env bash
# What the cleaner costs an object store (docs/OBJECT_STORE.md): a file
# system in a real S3 server (SeaweedFS on 127.0.0.1, scripts/lib/weed.sh),
# a file filling FILL_MIB of it, then random overwrites of 64 KiB (the same
# seeded sequence each time) adding up to OVERWRITE_MIB, so that the
# cleaner must run; for each value of cleaner.cached_read_cost given (the
# default 0.1 prefers victims whose object is cached; 1 weighs every
# victim alike, as on a disk) a fresh file system, and what `lsfs gc
# stats` reports: passes, victims, blocks copied, the GETs and bytes the
# cleaner's reads fetched, all GETs, the DELETEs of its victims' objects,
# and the time the overwrites took. Usage:
#   scripts/s3-cleaner-bench.sh PATH_TO_LSFS [COST...]
# (COST defaults to "0.1 1"; SIZE to 256M, FILL_MIB to 160, OVERWRITE_MIB
# to 512, SEED to 1; DISK_CACHE=SIZE adds a disk cache of that bound,
# object_disk_cache_bytes). Discards run at each checkpoint (discard=on), so the
# DELETEs are counted by the end. The server is stopped and its directory
# removed at the end, also on failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lsfs=$(realpath "${1:?usage: s3-cleaner-bench.sh PATH_TO_LSFS [COST...]}")
shift
costs=("$@")
((${#costs[@]})) || costs=(0.1 1)
size=${SIZE:-256M}
fill_mib=${FILL_MIB:-160}
overwrite_mib=${OVERWRITE_MIB:-512}
seed=${SEED:-1}

# shellcheck source=lib/weed.sh
source "$here/lib/weed.sh"
weed_scratch lsfs-cleaner-bench

echo "file system $size, file $fill_mib MiB, $overwrite_mib MiB of random 64 KiB overwrites" \
    "(seed $seed)${DISK_CACHE:+, disk cache $DISK_CACHE}"
for cost in "${costs[@]}"; do
    url=s3://lsfs-bench/cost-$cost
    "$lsfs" mkfs --size "$size" "$url" >/dev/null
    printf '[cleaner]\ncached_read_cost = %s\n' "$cost" >"$dir/$cost.toml"
    opts=discard=on
    [[ -n ${DISK_CACHE:-} ]] && opts+=",object_disk_cache=$dir/dc-$cost,object_disk_cache_bytes=$DISK_CACHE"
    "$lsfs" mount "$url" "$mnt" --config "$dir/$cost.toml" -o "$opts" 2>"$dir/$cost.log" &
    mount_pid=$!
    for ((i = 0; i < 200; i++)); do mountpoint -q "$mnt" && break; sleep 0.05; done
    mountpoint -q "$mnt" || { cat "$dir/$cost.log"; exit 1; }
    secs=$(python3 - "$mnt/f" "$fill_mib" "$overwrite_mib" "$seed" <<'EOF'
import os, random, sys, time
path, fill, over, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
chunk = 64 << 10
rng = random.Random(seed)
fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
block = bytes(rng.getrandbits(8) for _ in range(chunk))
for i in range(fill * 16):
    os.pwrite(fd, block, i * chunk)
os.fsync(fd)
t0 = time.monotonic()
for i in range(over * 16):
    # Each chunk differs a little, so that nothing could share blocks.
    os.pwrite(fd, i.to_bytes(8, "little") + block[8:], rng.randrange(fill * 16) * chunk)
    if i % 256 == 255:
        os.fsync(fd)
os.fsync(fd)
os.close(fd)
print(f"{time.monotonic() - t0:.1f}")
EOF
)
    "$lsfs" gc stats --json --mount "$mnt" | python3 -c '
import json, sys
v = json.load(sys.stdin)
s, o = v["stats"], v["object_store"]
c = o["cleaner"]
mib = lambda b: b / (1 << 20)
print("  cached_read_cost %s: overwrites in %s s; %d passes, %d victims, %d blocks copied (%.1f MiB);"
      " cleaner GETs %d (%.1f MiB), all GETs %d (%.1f MiB); PUTs %d (%.1f MiB);"
      " DELETEs %d, of the cleaner'"'"'s victims %d; GETs answered not found %s"
      % (sys.argv[1], sys.argv[2], s["passes"], s["segments_cleaned"], s["blocks_copied"],
         mib(c["copied_bytes"]), c["gets"], mib(c["get_bytes"]), o["gets"], mib(o["get_bytes"]),
         o["puts"], mib(o["put_bytes"]), o["deletes"], c["deletes"], o.get("get_misses", "-")))' "$cost" "$secs"
    fusermount3 -u "$mnt"
    wait "$mount_pid"
    mount_pid=
    "$lsfs" fsck "$url" | tail -1
done
