#!/usr/bin/env bash
# Lists functions longer than a limit (default 70 lines, signature to closing
# brace) in the given Rust sources (default: crates/lsfs-core/src), longest
# first, skipping #[cfg(test)] modules and *_tests.rs files. Long functions
# hide the protocol they implement; this keeps the count visible.
# Usage: scripts/long-functions.sh [LIMIT] [PATH...]
set -euo pipefail
limit=${1:-70}
shift || true
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- crates/lsfs-core/src
files=$(find "$@" -name '*.rs' ! -name '*_tests.rs' | sort)
# shellcheck disable=SC2086 # paths in this repository have no spaces
python3 -c "$(cat <<'PY'
import re, sys

limit = int(sys.argv[1])
fn_re = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"[^"]*"\s+)?fn\s+(\w+)')
found = []

def strip(line):
    # Drop string/char literals and line comments so braces inside them
    # do not count.
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split('//', 1)[0]

for path in sys.argv[2:]:
    lines = open(path, encoding='utf-8').read().split('\n')
    i = 0
    pending_test = False
    while i < len(lines):
        s = lines[i].strip()
        if s.startswith('#[cfg(test)]'):
            pending_test = True
        elif pending_test and re.match(r'(pub\s+)?mod\s+\w+\s*\{', s):
            # Skip the whole test module.
            depth = 0
            while i < len(lines):
                t = strip(lines[i])
                depth += t.count('{') - t.count('}')
                i += 1
                if depth <= 0:
                    break
            pending_test = False
            continue
        elif s and not s.startswith('#'):
            pending_test = False
        m = fn_re.match(lines[i])
        if m:
            start, depth, opened = i, 0, False
            j = i
            while j < len(lines):
                t = strip(lines[j])
                if not opened and ';' in t and '{' not in t:
                    break  # a declaration without a body
                depth += t.count('{') - t.count('}')
                opened = opened or '{' in t
                if opened and depth <= 0:
                    n = j - start + 1
                    if n > limit:
                        found.append((n, path, start + 1, m.group(7)))
                    break
                j += 1
        i += 1

for n, path, line, name in sorted(found, reverse=True):
    print(f'{n:5} {path}:{line} {name}', flush=True)
print(f'{len(found)} functions over {limit} lines', file=sys.stderr)
PY
)" "$limit" $files
