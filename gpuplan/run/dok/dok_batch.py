"""The 8-GPU 高火力 DOK task of `gpuplan run dok:h100-8gpu-80gb`: one task holds all 8 GPUs and
runs the batch's items in its 8 slots, as the planner plans that offer (one task, billed once).

The task's command is a small runner in POSIX sh (the user's image may have no python and no
bash): one worker loop per GPU (CUDA_VISIBLE_DEVICES=g; as many as `nvidia-smi -L` lists, else
8), each claiming the next item nobody has claimed (an atomic `mkdir`), so a long item does not
hold up the others. Each item's command is the line every backend runs (command_line.py:
{item} as $GPUPLAN_ITEM, set to the item first, {out} and $NAME), run with `exec` (which also
keeps the runner's own functions from being called by a command of the same name);
$GPUPLAN_OUTPUT_DIR is the task's artifact folder. An item running longer than --timeout is
killed (kill -9 of its program; what it started itself may outlive it). Per item, in
$SAKURA_ARTIFACT_DIR/gpuplan/ (the task's artifact): <idx>.log (its stdout and stderr) and
<idx>.status (exit=, gpu=, start=, end= in epoch seconds, timed_out=); on stdout, the log
stream, a line as each item starts and ends. The task exits 0 only if every item succeeded.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import UsageError

PLAN = "h100-8gpu-80gb"
GPUS = 8
ITEM_TAG = "all"  # gpuplan-item=all: the one task runs every item of its job
# DOK states no size limit for `command` (a third-party DOK client found 200 KB+ accepted live),
# but the container's `sh -c SCRIPT` gets the script as ONE argument, and Linux refuses a single
# argument longer than 131,072 bytes (MAX_ARG_STRLEN): stay under that.
MAX_SCRIPT_BYTES = 120_000
# The spec's ContainerDefinition requires both `command` and `entrypoint` (string arrays; its
# examples: command ["/bin/sh","-c","env"], entrypoint ["sh","-c"]). As in Docker, the entrypoint
# replaces the image's ENTRYPOINT and the command becomes its arguments, so the runner sets the
# entrypoint to `sh -c` and sends the script as the one-word command: it runs whatever
# ENTRYPOINT the image has (an image with ENTRYPOINT ["python"] would otherwise get `sh -c
# SCRIPT` as python's arguments).
ENTRYPOINT = ("sh", "-c")


def quote(word: str) -> str:
    """One word for sh, taken literally (spaces, quotes, $, backticks, globs)."""
    return "'" + word.replace("'", "'\\''") + "'"


def script(items: Sequence[tuple[int, str]], command: Sequence[str], item_limit_s: int | None = None) -> str:
    """The runner for `items` (index, text), in that order, each killed after `item_limit_s`
    (none: no limit of its own); bad input when it is too big to send."""
    where = "\n".join(f"    {k}) i={idx} ;;" for k, (idx, _) in enumerate(items))
    from gpuplan.run import command_line

    line = command_line.exec_line(command)  # as on every backend: {item}, {out}, $NAME (command_line.py)
    what = "\n".join(f"    {k}) GPUPLAN_ITEM={quote(item)}; export GPUPLAN_ITEM; {line} ;;" for k, (_, item) in enumerate(items))
    text = _RUNNER.replace("@N@", str(len(items))).replace("@LIMIT@", str(int(item_limit_s or 0))) \
        .replace("@GPUS@", str(GPUS)).replace("@WHERE@", where).replace("@WHAT@", what)
    size = len(text.encode())
    if size > MAX_SCRIPT_BYTES:
        raise UsageError(f"{len(items):,} items make an 8-GPU DOK task's command of {size:,} bytes, over the"
                         f" {MAX_SCRIPT_BYTES:,} one task can take: split the items file and run each part")
    return text


_RUNNER = r"""# gpuplan: @N@ items on this task's GPUs, one per GPU at a time
D="${SAKURA_ARTIFACT_DIR:-/tmp}/gpuplan"
GPUPLAN_OUTPUT_DIR="${SAKURA_ARTIFACT_DIR:-/tmp}"; export GPUPLAN_OUTPUT_DIR
mkdir -p "$D/.claims" || exit 1
n=@N@
limit=@LIMIT@
gpuplan_idx() {
  case $1 in
@WHERE@
  esac
}
gpuplan_item() {
  case $1 in
@WHAT@
  esac
}
gpus=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >"$D/.gpus" 2>/dev/null; then
  while read -r w rest; do [ "$w" = GPU ] && gpus=$((gpus + 1)); done <"$D/.gpus"
fi
[ "$gpus" -gt 0 ] || gpus=@GPUS@
[ "$gpus" -le "$n" ] || gpus=$n
gpuplan_one() {
  gpuplan_idx "$1"
  s=$(date +%s)
  echo "gpuplan: item $i start gpu $2"
  ( CUDA_VISIBLE_DEVICES=$2; export CUDA_VISIBLE_DEVICES; gpuplan_item "$1" ) >"$D/$i.log" 2>&1 </dev/null &
  p=$!
  if [ "$limit" -gt 0 ]; then  # a watchdog that looks every second (and so ends within one of the item)
    ( while kill -0 "$p" 2>/dev/null; do
        if [ $(($(date +%s) - s)) -ge "$limit" ]; then : >"$D/.claims/$1/timed-out"; kill -9 "$p"; exit 0; fi
        sleep 1
      done ) >/dev/null 2>&1 &
  fi
  wait "$p"
  rc=$?
  t=0
  [ ! -f "$D/.claims/$1/timed-out" ] || t=1
  printf 'exit=%s\ngpu=%s\nstart=%s\nend=%s\ntimed_out=%s\n' "$rc" "$2" "$s" "$(date +%s)" "$t" >"$D/$i.status"
  echo "gpuplan: item $i end gpu $2 exit $rc"
}
gpuplan_worker() {
  k=0
  while [ "$k" -lt "$n" ]; do
    if mkdir "$D/.claims/$k" 2>/dev/null; then gpuplan_one "$k" "$1"; fi
    k=$((k + 1))
  done
}
echo "gpuplan: $n items on $gpus GPUs"
g=0
while [ "$g" -lt "$gpus" ]; do
  gpuplan_worker "$g" &
  g=$((g + 1))
done
wait
bad=0
k=0
while [ "$k" -lt "$n" ]; do
  gpuplan_idx "$k"
  e=
  if [ -f "$D/$i.status" ]; then
    while IFS='=' read -r key v; do [ "$key" = exit ] && e=$v; done <"$D/$i.status"
  fi
  [ "$e" = 0 ] || bad=$((bad + 1))
  k=$((k + 1))
done
echo "gpuplan: batch end, $bad of $n items failed"
[ "$bad" -eq 0 ]
"""


@dataclass(frozen=True)
class ItemStatus:
    exit_code: int | None
    gpu: int | None
    start: int  # epoch seconds
    end: int
    timed_out: bool = False  # killed after its --timeout


_MEMBER = re.compile(r"(?:^|/)gpuplan/(\d+)\.(status|log)$")


def _members(path: Path, want=lambda idx, kind: True) -> dict[tuple[int, str], bytes]:
    """The runner's files in an artifact (tar.gz of SAKURA_ARTIFACT_DIR) that `want`, read in
    place (never extracted), by (item index, "status" | "log"); wherever in the archive the
    folder sits."""
    out: dict[tuple[int, str], bytes] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for m in tar:
                hit = _MEMBER.search(m.name)
                if hit and m.isfile() and want(int(hit[1]), hit[2]):
                    f = tar.extractfile(m)
                    if f is not None:
                        out[(int(hit[1]), hit[2])] = f.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise UsageError(f"the artifact {path} is not a readable tar.gz ({exc}); delete it and look again") from None
    return out


def statuses(path: Path) -> dict[int, ItemStatus]:
    """Each item's outcome as the runner wrote it; an item it did not finish has none."""
    out = {}
    for (idx, _), data in _members(path, lambda _i, kind: kind == "status").items():
        fields = dict(line.partition("=")[::2] for line in data.decode(errors="replace").splitlines())
        if not fields.get("start", "").isdigit() or not fields.get("end", "").isdigit():
            continue  # cut short as it was written
        code = fields.get("exit", "")
        gpu = fields.get("gpu", "")
        exit_code = int(code) if code.isdigit() else None
        out[idx] = ItemStatus(exit_code, int(gpu) if gpu.isdigit() else None, int(fields["start"]), int(fields["end"]),
                              fields.get("timed_out") == "1" and exit_code != 0)
    return out


def item_log(path: Path, idx: int) -> bytes | None:
    return _members(path, lambda i, kind: i == idx and kind == "log").get((idx, "log"))
