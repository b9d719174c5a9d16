#!/bin/sh
# Threaded logging in the engine: off, adaptive and always, side by side, at several
# utilizations, in process (the hot_cold_wa example: no FUSE, a memory device, the simulated
# clock), so the runs compare work done, not this shared machine's speed.
#
# Usage: docs/bench/threaded-logging/engine-sweep.sh OUT_DIR [ACCESS] [FILE_BLOCKS] [MIB] [SEGMENT_BLOCKS] [ROUNDS] [UTILS] [MODES]
#   defaults: uniform, 16-block (64 KiB) files, 128 MiB, 256-block segments, 2 rounds,
#   UTILS "0.80 0.85 0.88 0.90 0.92", MODES "off adaptive always".
# Writes OUT_DIR/ACCESS-UTIL-MODE.json (one JSON line each, see the example's doc comment) and
# prints a markdown table. Two runs at a time (one per core of the development machine).
set -eu
OUT=${1:?usage: engine-sweep.sh OUT_DIR [ACCESS] [FILE_BLOCKS] [MIB] [SEGMENT_BLOCKS] [ROUNDS] [UTILS] [MODES]}
ACCESS=${2:-uniform}
FILE_BLOCKS=${3:-16}
MIB=${4:-128}
SEG=${5:-256}
ROUNDS=${6:-2}
UTILS=${7:-"0.80 0.85 0.88 0.90 0.92"}
MODES=${8:-"off adaptive always"}
mkdir -p "$OUT"
cd "$(dirname "$0")/../../.."
cargo build --release -q -p lsfs-core --example hot_cold_wa
BIN=${CARGO_TARGET_DIR:-target}/release/examples/hot_cold_wa

running=0
for u in $UTILS; do
    for m in $MODES; do
        "$BIN" balanced on "$u" "$ROUNDS" "$MIB" "$SEG" 1500 0 "$m" "$ACCESS" "$FILE_BLOCKS" \
            >"$OUT/$ACCESS-$u-$m.json" 2>"$OUT/$ACCESS-$u-$m.err" &
        running=$((running + 1))
        if [ "$running" -ge 2 ]; then
            wait
            running=0
        fi
    done
done
wait

python3 - "$OUT" "$ACCESS" "$UTILS" "$MODES" <<'EOF'
import json, os, sys
out, access, utils, modes = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
print(f"| util | live share | " + " | ".join(f"{m}: cost / data WA / plugged" for m in modes) + " |")
print("|---|---|" + "---|" * len(modes))
for u in utils:
    cells, share = [], ""
    for m in modes:
        p = os.path.join(out, f"{access}-{u}-{m}.json")
        try:
            d = json.load(open(p))
        except Exception:
            cells.append("failed (see .err)")
            continue
        share = f"{d['live_share']:.3f}"
        cells.append(f"{d['write_cost']:.2f} / {d['data_write_amplification']:.2f} / {d['blocks_plugged']}")
    print(f"| {u} | {share} | " + " | ".join(cells) + " |")
EOF
