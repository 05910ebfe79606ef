#!/usr/bin/env bash
# The README's promise, checked as a newcomer meets it: a fresh venv with exactly the Quickstart's
# install (the Quickstart's first line as written: `pip install .`, no extras, its venv activated),
# then every Examples line that names nothing more than that (no "# needs ..." comment), each run as
# written, bare `gpuplan` and all, in a fresh folder and GPUPLAN_HOME.
# Usage: bash scripts/fresh_install_examples.sh   (scripts/test.sh runs it before the suite)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
readme_block() {  # readme_block PATTERN: the README's text its regular expression's group 1 matches
    python3 - "$repo/README.md" "$1" <<'PY'
import re, sys
print(re.search(sys.argv[2], open(sys.argv[1], encoding="utf-8").read(), re.S | re.M).group(1))
PY
}
export GPUPLAN_HOME="$work/home"
# The Quickstart's first line as written, run in $work (its `.venv` is made there; its `pip install .`
# installs this checkout): it activates the venv in this shell, so the examples' bare `gpuplan` is its.
first="$(readme_block '^## Quickstart.*?```bash\n(.*?)\n')"
first="${first/install -q . /install -q $repo }"
cd "$work"
echo "\$ $first"
if ! eval "$first" > "$work/out.txt" 2>&1 < /dev/null; then
    cat "$work/out.txt"
    echo "fresh_install_examples: the Quickstart's first line failed: $first" >&2
    exit 1
fi
[ "$(command -v gpuplan)" = "$work/.venv/bin/gpuplan" ] || {
    echo "fresh_install_examples: after the Quickstart's first line, bare gpuplan is $(command -v gpuplan || echo missing), not its venv's" >&2
    exit 1
}
mkdir -p "$work/run"
cd "$work/run"
python3 - "$repo/README.md" > "$work/examples.txt" <<'PY'
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
