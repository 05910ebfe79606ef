#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine, then runs the whole suite.
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

# Python writes its bytecode caches (.pyc files in __pycache__ folders, which git ignores) for the
# set-up and the suite. Where the machine sets PYTHONDONTWRITEBYTECODE (this machine does),
# every Python process of the suite would compile what it imports from source again: uv installs no
# .pyc files, so importing the Azure and Google SDKs took 7.9 s of CPU instead of 3.5 s, and pytest's
# collection (its assertion rewriting) 12.5 s instead of 4.8 s in each worker (2026-11-29).
unset PYTHONDONTWRITEBYTECODE

# The set-up runs three things side by side, since each mostly waits on the network or the disk:
# the README's Examples on a fresh install (it needs only python3), the system packages (apt), and
# the Python venvs; then ruff, and the suite once apt and the venvs are done. The Examples and the
# types go on beside the suite and are waited for at its end: the Examples are about 55 s of one core
# (pip installing scipy and the rest into their fresh venv), and while the set-up waited for them the
# other core was idle half the first minute (run 57b: the cores 52 % busy for the first 60 s).
work="$(mktemp -d)"
# On exit: stop what the set-up left running, remove the scratch folder, and exit with the status the
# script had (the suite's). `kill` with no job left fails, and under `set -e` that failure would
# otherwise become the script's exit status (CI saw exit 2 after every test had passed).
cleanup() {
    local status=$?
    local left
    left="$(jobs -p)"
    # shellcheck disable=SC2086 # one pid per word
    if [ -n "$left" ]; then kill $left 2>/dev/null || true; fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT

# The README's Examples on exactly the Quickstart's install, in a fresh venv (no test extras): about
# 45 s of one core on a fresh clone, its output shown once it ends. At a lower CPU priority (nice 5),
# like the type check below: both only have to end before the suite does, and at the same priority
# they take CPU from its first, Ray-heavy tests (the effect is not measured apart from the scheduling
# change of the same day); at nice 5 both still ended within the suite's time (run 59f).
nice -n 5 bash scripts/fresh_install_examples.sh > "$work/examples.log" 2>&1 & examples=$!

# System packages the tests start for real, each group checked and, when missing, installed with the
# others in ONE apt-get update and ONE apt-get install (as root; otherwise each group's tests are skipped):
# - OpenSSH sshd for the SSH/bootstrap/baremetal tests (they start their own on loopback);
# - Slurm (tests/support/slurm.py starts slurmctld, slurmd, slurmdbd on MariaDB and munge on this machine,
#   each its own process under /run/gpuplan-test-slurm; no service is enabled);
# - docker-daemon (issue 41): dockerd for tests/test_docker_daemon.py (tests/support/docker_daemon.py starts it
#   in a scratch folder, stops it by its pid) and busybox-static for the image it builds FROM scratch;
# - PostgreSQL (issue 45): the server binaries for the state tests on PostgreSQL (tests/support/postgres.py
#   starts a server in a scratch folder on a loopback port, stops it by its data folder; no cluster is made).
missing=()
if [ ! -x /usr/sbin/sshd ] || ! command -v ssh-keygen >/dev/null; then
    missing+=("openssh-server openssh-client|openssh-server is missing; install it (sudo apt-get install openssh-server) or the sshd tests are skipped")
fi
if [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/slurmdbd ] || [ ! -x /usr/sbin/mariadbd ] || [ ! -x /usr/sbin/munged ]; then
    missing+=("slurm-wlm slurmdbd munge mariadb-server|slurm-wlm, slurmdbd, munge or mariadb-server is missing; install them or the Slurm tests are skipped")
fi
if [ ! -x /usr/sbin/dockerd ] || [ ! -x /bin/busybox ]; then
    missing+=("docker.io busybox-static|docker.io or busybox-static is missing; install them or the real-Docker tests are skipped")
fi
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    missing+=("postgresql|postgresql is missing; install it (sudo apt-get install postgresql) or the PostgreSQL state tests are skipped")
fi
apt=""
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        packages=""
        for group in "${missing[@]}"; do packages="$packages ${group%%|*}"; done
        # dpkg without an fsync per file (--force-unsafe-io: a crash mid-install means installing again,
        # which this script does)
        # shellcheck disable=SC2086 # the package names, split on purpose
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -o Dpkg::Options::=--force-unsafe-io $packages; } > "$work/apt.log" 2>&1 & apt=$!
    else
        for group in "${missing[@]}"; do echo "scripts/test.sh: ${group#*|}" >&2; done
    fi
fi

# Python set-up, done once and reused: each step is skipped when what it installs is there at its
# pinned version, checked by the package's metadata folder (no import: `import torch` alone takes
# seconds on a busy machine), so a second run starts the suite within seconds.
installed() {  # installed VENV DIST VERSION: VENV has DIST==VERSION
    compgen -G "$1/lib/python3*/site-packages/$2-$3.dist-info" >/dev/null
}
[ -x .venv/bin/python ] || python3 -m venv .venv
# uv (from PyPI, into .venv) installs the test extras in about 11 s and Ray in about 4 s on a fresh
# machine, where pip took 95 s and 45 s (2 cores, 2026-11-29); pip is used where uv cannot be had.
uv=""
if [ -x .venv/bin/uv ] || .venv/bin/pip install -q uv; then uv=.venv/bin/uv; fi
install_into() {  # install_into VENV PIP-ARGS...
    local venv=$1; shift
    if [ -n "$uv" ]; then "$uv" pip install -q --python "$venv/bin/python" "$@"; else "$venv/bin/pip" install -q "$@"; fi
}
# Ray for the run-engine tests, beside the rest: the loopback "nodes" share one venv built once
# (tests/support/ray_env.py names the place and version); the `ray` playbook skips its install where
# the pinned version is there. Ray's modules are compiled at install (4 s more): uv writes no .pyc
# files, and every Ray process of the first tests would compile what it imports until one wrote them.
RAY_VENV="${GPUPLAN_TEST_RAY_VENV:-/tmp/gpuplan-test-ray-2.60.0}"
{ { [ -x "$RAY_VENV/bin/ray" ] && installed "$RAY_VENV" ray 2.60.0; } || \
    { python3 -m venv "$RAY_VENV" && install_into "$RAY_VENV" "ray[default]==2.60.0" ${uv:+--compile-bytecode}; } || \
    echo "scripts/test.sh: Ray could not be installed; the run-engine tests will be skipped" >&2; } & ray=$!
# torch CPU build for the reference-job tests: 2.13.0 is the build this machine kind keeps on disk,
# in the folder pip's find-links names (uv does not look there, so it is given the file: 5 s against
# pip's 36 s); pinning it first keeps the bench extra from pulling a multi-GB CUDA build.
if ! installed .venv torch 2.13.0*; then
    links="${PIP_FIND_LINKS:-$(.venv/bin/pip config get global.find-links 2>/dev/null || true)}"
    wheel="$(compgen -G "${links:-/nonexistent}/torch-2.13.0*.whl" | head -1 || true)"
    { if [ -n "$uv" ] && [ -n "$wheel" ]; then install_into .venv "$wheel"; else .venv/bin/pip install -q torch==2.13.0; fi; } || \
        echo "scripts/test.sh: torch unavailable; reference-job tests will be skipped" >&2
fi
# gpuplan itself (editable) with its test extras: installed again only when pyproject.toml changed
# since the last install here (its dependencies, extras or entry points).
stamp=.venv/.gpuplan-test-setup
want="$(python3 -c 'import hashlib,sys; print(hashlib.sha256(open("pyproject.toml","rb").read()).hexdigest())')"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! compgen -G ".venv/lib/python3*/site-packages/__editable__*gpuplan*" >/dev/null; then
    install_into .venv -e '.[test]'
    echo "$want" > "$stamp"
fi
echo "scripts/test.sh: Python set-up done in ${SECONDS} s" >&2
# Lint first (config in pyproject.toml): a finding fails the run before any test starts.
.venv/bin/ruff check .
# Types, beside the suite like the Examples, and waited for at its end: gpuplan/planning with no mypy
# errors, the rest within scripts/mypy-baseline.txt (which may only shrink; re-record it with
# `.venv/bin/python scripts/mypy_baseline.py --record`). With no cache (a fresh clone) it is 58 s of
# one core, and the set-up waited for it while the other core had nothing left to do (run 58c).
nice -n 5 .venv/bin/python scripts/mypy_baseline.py > "$work/types.log" 2>&1 & types=$!
failed=0
wait "$ray"
if [ -n "$apt" ] && ! wait "$apt"; then
    tail -20 "$work/apt.log" >&2
    echo "scripts/test.sh: apt-get could not install the system packages; the tests that need them will be skipped" >&2
fi
echo "scripts/test.sh: set-up and lint done in ${SECONDS} s (types and the README's Examples run beside the suite)" >&2
# Three workers, a test file to each at a time (tests/conftest.py says what keeps them apart, and
# tests/support/schedule.py which file goes next: no two of the costliest side by side); the
# slowest tests named at the end, with the wall time. CI runs
# on a busy 2-core machine: there two workers left the cores idle 22 % of the time (the Ray tests
# wait on processes, SSH and caps) and took 1,241 s; three kept them 92 % busy and took 1,102 s
# (2026-11-29). Not the longest files first: that put the three Ray-heavy files side by side at the
# start, and a `ray start` there could not reach its head's GCS (run 53d); nor the costliest first
# with a Ray file between two others: 14 of the 15 slowest tests went over 60 s and two cap tests
# failed on the load (run 57c), where xdist's order (most tests first) had 1-5. GPUPLAN_TEST_WORKERS=N
# sets the number; 0 runs the suite in this one process.
workers="${GPUPLAN_TEST_WORKERS:-3}"
suite=0
if [ "$workers" -gt 0 ]; then
    .venv/bin/python -m pytest -n "$workers" --dist loadfile --durations=15 "$@" || suite=$?
else
    .venv/bin/python -m pytest --durations=15 "$@" || suite=$?
fi
# The types' and the Examples' own results: the run fails when either did, even with every test passed.
wait "$types" || failed=$?
cat "$work/types.log"
wait "$examples" || failed=$?
cat "$work/examples.log"
[ "$suite" = 0 ] || exit "$suite"
exit "$failed"
