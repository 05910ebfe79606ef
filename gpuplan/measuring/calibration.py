"""Whether a finished batch is evidence of its workload's speed (issue 42).

A batch run with a saved plan becomes a speed the planner uses (a calibration) only when:
- it ran the plan's whole batch, and no item failed;
- it ran the workload's job: the command's words begin with a command the workload names
  (`command:` in its file; the built-in workloads name their reference job, `python -m
  gpuplan.jobs.colorize` for colorize-hd) or the one the plan was made for; never an arbitrary
  `command:` such as `echo {item}`, whose times say nothing about the job;
- on the kind of machine planned (provider, machine type and count);
- and every item's time is plausible against the plan's band: an item of predicted time p on a
  GPU whose speed band is low-high took between p / high and p / low (docs/model.md, "Speed
  evidence and its band").
Otherwise the batch is kept as an observation and `Verdict.why` says which test it failed.

Times are on the clock the backend bills: each DOK task's billed run time, each item's run time
on its host for a cluster batch; never the client's wall clock (a client that watched a DOK batch
for 21 s while its tasks were billed 900 s must not make the job 40x faster).

Pure: no state, no SQL, no words decided elsewhere; gpuplan/run/items.calibrate records what this
decides and `said` renders it.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum


class Why(str, Enum):
    """The outcome: USED, or the first test the batch failed."""

    USED = "used"
    FAILED = "failed"  # some items failed
    PARTIAL = "partial"  # not the plan's whole batch
    OTHER_COMMAND = "other command"  # not the workload's job
    OTHER_FLEET = "other fleet"  # not the planned machines (kept as a per-GPU speed point)
    NO_TIMES = "no times"  # the backend gave no item times
    IMPLAUSIBLE = "implausible"  # an item's time outside the plan's band


@dataclass(frozen=True)
class Batch:
    """A finished batch as evidence: what ran, where, and each item's time on `clock`."""

    job: str
    command: tuple[str, ...]
    provider: str
    size: str
    nodes: int
    item_seconds: tuple[float, ...]
    clock: str  # CLOCK_TASKS or CLOCK_ITEMS
    failed: int = 0


CLOCK_TASKS = "billed task time"  # DOK: each task's run time as the backend bills it
CLOCK_ITEMS = "item run time on its host"  # a cluster batch: each item's process, timed where it ran


@dataclass(frozen=True)
class Verdict:
    why: Why
    predicted_item_s: Decimal | None = None  # the plan's mean time per item
    measured_item_s: Decimal | None = None  # the batch's mean time per item, on its clock
    low_s: Decimal | None = None  # the plausible range of one item's time (p / high .. p / low)
    high_s: Decimal | None = None
    outside: tuple[float, ...] = ()  # the item times outside it
    command: str = ""  # the batch's command, for the line
    accepted: tuple[str, ...] = ()  # the commands that would have counted
    planned: str = ""  # the fleet planned and the one that ran, for the line
    ran: str = ""

    @property
    def used(self) -> bool:
        return self.why is Why.USED


def accepted_commands(named: Sequence[str], plan_command: str | None = None) -> tuple[str, ...]:
    """The commands whose batches may calibrate: those the workload names and the plan's own."""
    out = [c for c in named if c.strip()]
    if plan_command and plan_command.strip():
        out.append(plan_command)
    return tuple(dict.fromkeys(out))


def measured_job(probe: Sequence[str], command: Sequence[str]) -> str:
    """The job a probe measured, as a command a plan records (its `command`, which `decide` then
    accepts): the probe command's words before its first {units} or {item}, cut to the words the
    batch's own command begins with too ("python train.py" of `python train.py --steps {units}`
    and `python train.py {item}`); "" where they share none: the probe timed another program
    than the one the batch runs, and vouches for neither."""
    fixed = []
    for word in probe:
        if "{units}" in word or "{item}" in word:
            break
        fixed.append(word)
    shared = []
    for a, b in zip(fixed, command):
        if _word(a) != _word(b):
            break
        shared.append(a)
    while shared and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", shared[0]):  # leading VAR=value words: not the job
        shared.pop(0)
    # an interpreter and its options alone ("python", "sh -c") name no job: they would accept any script
    if not any(not w.startswith("-") and _word(w) not in _INTERPRETERS for w in shared):
        return ""
    return shlex.join(shared)


_INTERPRETERS = frozenset({"python", "sh", "bash", "env", "uv", "run", "exec"})


_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


def _word(word: str) -> str:
    """A command word compared by what it runs: any python interpreter is `python`."""
    base = os.path.basename(word)
    return "python" if _PYTHON.fullmatch(base) else word


def runs_job(command: Sequence[str], accepted: Sequence[str]) -> bool:
    """Whether the batch's command words begin with one of the accepted commands (leading
    VAR=value words and gpuplan's own `exec "$@"` wrapper skipped; any python interpreter counts
    as `python`)."""
    words = list(command)
    # gpuplan's own wrapper (a DOK task's output folder): `sh -c '... exec "$@"' gpuplan CMD...` runs CMD
    if len(words) > 4 and words[:2] == ["sh", "-c"] and words[2].rstrip().endswith('exec "$@"'):
        words = words[4:]
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words.pop(0)
    got = [_word(w) for w in words]
    for text in accepted:
        try:
            want = [_word(w) for w in shlex.split(text)]
        except ValueError:
            continue
        if want and got[:len(want)] == want:
            return True
    return False


def decide(batch: Batch, predicted: dict, accepted: Sequence[str]) -> Verdict:
    """Whether `batch` calibrates the plan `predicted` (saved_plan.SavedPlan.prediction: its
    workload, fleet, jobs, and item_s / band_low / band_high where the plan gives them)."""
    shown = " ".join(batch.command)
    if batch.failed:
        return Verdict(Why.FAILED, command=shown)
    if len(batch.item_seconds) != predicted["jobs"]:
        return Verdict(Why.PARTIAL, command=shown, planned=str(predicted["jobs"]), ran=str(len(batch.item_seconds)))
    if not runs_job(batch.command, accepted):
        return Verdict(Why.OTHER_COMMAND, command=shown, accepted=tuple(accepted))
    planned = [(t, n) for t, n in predicted.get("fleet") or [(predicted["instance_type"], batch.nodes)] if n]
    ran = [(batch.size, batch.nodes)]
    if batch.provider != predicted["provider"] or sorted(planned) != ran:
        def says(fleet, provider):
            return " + ".join(f"{n} x {t}" for t, n in fleet) + f" ({provider or '?'})"

        return Verdict(Why.OTHER_FLEET, command=shown, planned=says(planned, predicted["provider"]),
                       ran=says(ran, batch.provider))
    times = [t for t in batch.item_seconds if t is not None]
    if not times or len(times) != len(batch.item_seconds):
        return Verdict(Why.NO_TIMES, command=shown)
    measured = Decimal(str(sum(times))) / len(times)
    item = predicted.get("item_s")
    if item is None:  # a plan file without per-item figures: its jobs phase over its items, one slot per machine
        item = Decimal(predicted["wall_s"]) * batch.nodes / max(1, predicted["jobs"])
    item = Decimal(item)
    low, high = Decimal(predicted.get("band_low") or 1), Decimal(predicted.get("band_high") or 1)
    lo_s, hi_s = item / high, item / low
    outside = tuple(t for t in times if not lo_s <= Decimal(str(t)) <= hi_s)
    if outside or item <= 0:
        return Verdict(Why.IMPLAUSIBLE, item, measured, lo_s, hi_s, outside, shown)
    return Verdict(Why.USED, item, measured, lo_s, hi_s, (), shown)


def said(v: Verdict, workload: str, instance_type: str) -> str:
    """The batch's end line: what was recorded, or why no speed was."""
    from gpuplan.planning import fmt

    if v.why is Why.USED:
        return (f"calibration recorded: `gpuplan estimate --workload {workload}` now plans {instance_type} with the"
                f" measured speed (mean item {fmt.duration(v.measured_item_s)} against {fmt.duration(v.predicted_item_s)}"
                " planned); `gpuplan profiles` lists it")
    head = "not recorded as a calibration: "
    if v.why is Why.FAILED:
        return head + "some jobs failed"
    if v.why is Why.PARTIAL:
        return (f"{head}{fmt.plural(int(v.ran), 'job')} ran, the plan has {v.planned}; "
                "run the plan's whole batch to calibrate it")
    if v.why is Why.OTHER_COMMAND:
        names = " or ".join(f"`{c}`" for c in v.accepted) or "none (add `command:` to the workload file)"
        return (f"{head}the batch ran `{_short(v.command)}`, not {workload}'s job ({names}): its times say nothing"
                " about the job's speed; kept as an observation, the estimate is unchanged")
    if v.why is Why.OTHER_FLEET:
        return f"{head}the plan is for {v.planned}, the batch ran on {v.ran}; kept as a per-GPU speed point"
    if v.why is Why.NO_TIMES:
        return f"{head}the backend gave no time for some items; kept as an observation"
    worst = max(v.outside, key=lambda t: abs(float(v.predicted_item_s or 0) - t))
    return (f"{head}an item took {fmt.duration(Decimal(str(worst)))}, outside the plan's band of"
            f" {fmt.duration(v.low_s)} to {fmt.duration(v.high_s)} per item ({fmt.duration(v.predicted_item_s)} planned);"
            " kept as an observation, the estimate is unchanged")


def _short(text: str, most: int = 60) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"
