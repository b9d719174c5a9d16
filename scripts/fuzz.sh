#!/usr/bin/env bash
# Fuzzes every cargo-fuzz target in fuzz/ for FUZZ_SECS seconds each, starting
# from the checked-in seeds (fuzz/corpus/<target>/), and fails on any crash:
# a panic, a hang (one input over FUZZ_TIMEOUT_SECS), an allocation over 64 MiB
# (fuzz/src/lib.rs) or a process over FUZZ_RSS_MB. Prints the executions per target.
#
#   FUZZ_SECS=20          seconds per target (CI); the long campaign used 300-600
#   FUZZ_JOBS=1           targets fuzzed at once (one core each)
#   FUZZ_TARGETS="a b"    only these targets (default: all, from `cargo fuzz list`)
#   FUZZ_TIMEOUT_SECS=10  one input taking longer is a hang
#   FUZZ_RSS_MB=1024      memory limit of the fuzzing process
#   FUZZ_SEED=0           libFuzzer's seed (0: a random one; CI fixes it so a run replays)
#
# Installs what is missing: a nightly toolchain and cargo-fuzz. New inputs go
# to a temporary corpus; crashing inputs to fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FUZZ_SECS=${FUZZ_SECS:-20}
FUZZ_JOBS=${FUZZ_JOBS:-1}
FUZZ_TIMEOUT_SECS=${FUZZ_TIMEOUT_SECS:-10}
FUZZ_RSS_MB=${FUZZ_RSS_MB:-1024}
FUZZ_SEED=${FUZZ_SEED:-0}
# No ASan: lsfs-core has no unsafe code on these paths, and ASan made the
# image target 8x slower. Allocation limits come from fuzz/src/lib.rs instead.
SANITIZER=none

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz: installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null; then
    echo "fuzz: installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi

cd fuzz
targets=${FUZZ_TARGETS:-$(cargo +nightly fuzz list)}
echo "fuzz: building $(echo $targets | wc -w) targets"
if [[ -z ${FUZZ_TARGETS:-} ]]; then
    cargo +nightly fuzz build --sanitizer "$SANITIZER"
else
    for t in $targets; do cargo +nightly fuzz build --sanitizer "$SANITIZER" "$t"; done
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run_target NAME: fuzz NAME; its log is $work/NAME.log, its exit code $work/NAME.rc.
run_target() {
    local t=$1 rc=0
    mkdir -p "$work/$t.corpus" "artifacts/$t"
    cargo +nightly fuzz run --sanitizer "$SANITIZER" "$t" "$work/$t.corpus" "corpus/$t" -- \
        -max_total_time="$FUZZ_SECS" -timeout="$FUZZ_TIMEOUT_SECS" \
        -rss_limit_mb="$FUZZ_RSS_MB" -seed="$FUZZ_SEED" -print_final_stats=1 \
        -artifact_prefix="artifacts/$t/" >"$work/$t.log" 2>&1 || rc=$?
    echo "$rc" >"$work/$t.rc"
}

for t in $targets; do
    while (($(jobs -rp | wc -l) >= FUZZ_JOBS)); do
        wait -n || true
    done
    echo "fuzz: $t for ${FUZZ_SECS}s"
    run_target "$t" &
done
wait

failed=0
printf '%-14s %12s %10s  %s\n' target executions exec/s result
for t in $targets; do
    log=$work/$t.log
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    if [[ $(cat "$work/$t.rc") == 0 ]]; then
        result=ok
    else
        result="CRASH (exit $(cat "$work/$t.rc"))"
        failed=$((failed + 1))
    fi
    printf '%-14s %12s %10s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$result"
    if [[ $result != ok ]]; then
        # The panic message comes before a long backtrace: show it first.
        echo "---- $t: the panic ----"
        grep -A1 'panicked at' "$log" | head -n 6 || true
        echo "---- $t: end of its log ----"
        grep -v '^#[0-9]' "$log" | tail -n 40
        echo "---- replay: cd fuzz && cargo +nightly fuzz run --sanitizer $SANITIZER $t artifacts/$t/<file>"
    fi
done
if ((failed)); then
    echo "fuzz: $failed target(s) crashed" >&2
    exit 1
fi
echo "fuzz: no crash in $(echo $targets | wc -w) targets"
