#!/usr/bin/env bash
# The README's promise, checked as a newcomer meets it: a fresh venv with exactly the Quickstart's
# install (`pip install .`, no extras), then every Examples line that names nothing more than that
# (no "# needs ..." comment), each run as written in a fresh folder and GPUPLAN_HOME.
# Usage: bash scripts/fresh_install_examples.sh   (scripts/test.sh runs it before the suite)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$repo"
mkdir -p "$work/run"
cd "$work/run"
export GPUPLAN_HOME="$work/home" PATH="$work/venv/bin:$PATH"
"$work/venv/bin/python" - "$repo/README.md" > "$work/examples.txt" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
block = re.search(r"^## Examples\n.*?```console\n(.*?)```", text, re.S | re.M).group(1)
for line in block.splitlines():
    command, _, comment = line.partition(" #")
    if command.strip() and not comment.strip():
        print(command.strip())
PY
ran=0
while IFS= read -r line; do
    echo "\$ $line"
    if ! eval "$line" > "$work/out.txt" 2>&1 < /dev/null; then
        cat "$work/out.txt"
        echo "fresh_install_examples: failed after the Quickstart's install: $line" >&2
        exit 1
    fi
    ran=$((ran + 1))
done < "$work/examples.txt"
echo "fresh_install_examples: $ran README examples ran on a fresh install"
