"""Why a plan is excluded or warned, as values: a code from one enum and the figures that explain
it (by how much, which offer, which source). Decisions compare codes and figures; `render` is the
one place that turns an outcome into words, for the table, CSV and the messages (JSON carries the
code and the figures as they are).

Figures are plain values (str, int, Decimal) in a fixed order, so an outcome is hashable and two
outcomes are alike exactly when their codes and figures are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any

from gpuplan.planning import fmt


class Code(str, Enum):
    """What excludes a plan (or an offer) or warns about it."""

    DEADLINE = "deadline"  # wall time past --deadline
    MAX_YEN_PER_HOUR = "max_yen_per_hour"  # the fleet costs more an hour than --max-yen-per-hour
    QUOTA = "quota"  # over the user's total vCPU quota (--quota azure=20)
    FAMILY_QUOTA = "family_quota"  # over the user's quota of one family (--quota azure:NC=24)
    DEFAULT_QUOTA = "default_quota"  # warning: over the provider's default total quota
    DEFAULT_FAMILY_QUOTA = "default_family_quota"  # warning: over a family's default quota
    QUOTA_UNKNOWN = "quota_unknown"  # warning: needs quota of a family whose limit is not known
    RETIRED = "retired"
    TASK_LIMIT = "task_limit"  # warning: one container task runs past the service's default time limit
    RETIRES = "retires"  # warning: the offer retires (or ends sale) before the plan could end
    UNPRICED = "unpriced"
    PRICED_LATER = "priced_later"  # the price row is younger than the as-of month
    NOT_AVAILABLE = "not_available"  # the offer starts after the as-of month
    MEMORY = "memory"  # one job needs more memory than the GPU has
    NO_SPEED = "no_speed"  # no speed figure for the GPU
    PACKING = "packing"  # k jobs per GPU cannot be planned (see figure "why")
    REAL_TIME = "real_time"  # one stream alone cannot keep up
    FLEET_LIMIT = "fleet_limit"  # needs more machines than the one owned
    PROVISION_LIMIT = "provision_limit"  # more machines than `provision` makes in one cluster
    LINK = "link"  # no sourced link figure for data-parallel
    IMAGE = "image"  # no image can start this fleet
    SPOT = "spot"  # warning: interruptible capacity
    GLOBAL_BATCH = "global_batch"  # warning: global batch past the validated one


@dataclass(frozen=True)
class Outcome:
    code: Code
    figures: tuple[tuple[str, Any], ...] = ()

    def get(self, name: str, default: Any = None) -> Any:
        for key, value in self.figures:
            if key == name:
                return value
        return default

    def as_dict(self) -> dict[str, Any]:
        """For JSON: the code and each figure (Decimal as an exact string)."""
        out: dict[str, Any] = {"code": self.code.value}
        for key, value in self.figures:
            out[key] = str(value) if isinstance(value, Decimal) else value
        return out

    def without(self, *names: str) -> Outcome:
        """The same outcome without some figures (rows alike but for the offer's name fold)."""
        return Outcome(self.code, tuple((k, v) for k, v in self.figures if k not in names))

    def __str__(self) -> str:
        return render(self)


def of(code: Code, **figures: Any) -> Outcome:
    return Outcome(code, tuple(figures.items()))


def shown(outcome: Outcome) -> Outcome:
    """The outcome with its figures at the precision people read them (durations as fmt.duration
    shows them, quantities to 3 decimals), whatever the words: outcomes that read alike are alike
    here (the table folds rows so, and counts kinds of exclusion so)."""
    f = dict(outcome.figures)
    if outcome.code is Code.DEADLINE:
        return of(Code.DEADLINE, by=fmt.duration(f["wall_s"] - f["deadline_s"]), wall=fmt.duration(f["wall_s"]),
                  deadline=fmt.duration(f["deadline_s"]), **({"slow_end": True} if f.get("slow_end") else {}))
    if outcome.code is Code.TASK_LIMIT:
        return of(Code.TASK_LIMIT, offer=f["offer"], task=fmt.duration(f["task_s"]), limit=fmt.duration(f["limit_s"]))
    if outcome.code is Code.RETIRES:
        return of(Code.RETIRES, offer=f["offer"], retired_on=f["retired_on"], successor=f.get("successor", ""))
    if outcome.code is Code.REAL_TIME:
        return of(Code.REAL_TIME, gpu=f["gpu"], frame_ms=number(f["frame_s"] * 1000), need_ms=number(f["need_s"] * 1000),
                  fps=number(f["fps"]), slower=f"{f['frame_s'] / f['need_s']:.2f}")
    return Outcome(outcome.code, tuple((k, number(v) if isinstance(v, Decimal) else v) for k, v in outcome.figures))


def only(outcomes: tuple[Outcome, ...], code: Code) -> bool:
    """Every outcome has this code (and there is at least one)."""
    return bool(outcomes) and all(o.code is code for o in outcomes)


def codes(outcomes) -> list[str]:
    return [o.code.value for o in outcomes]


def number(value: Decimal | int) -> str:
    """A quantity (GiB, ms): at most 3 decimals, no trailing zeros."""
    text = f"{Decimal(value).quantize(Decimal('0.001')):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _deadline(f: Mapping[str, Any]) -> str:
    if f.get("slow_end"):  # --strict: the wall range's slow end is judged
        return (f"misses the deadline by {fmt.duration(f['wall_s'] - f['deadline_s'])} at its wall range's slow end"
                f" (up to {fmt.duration(f['wall_s'])} > {fmt.duration(f['deadline_s'])}; --strict)")
    return (f"misses the deadline by {fmt.duration(f['wall_s'] - f['deadline_s'])} (wall {fmt.duration(f['wall_s'])} >"
            f" {fmt.duration(f['deadline_s'])})")


def _default_quota(f: Mapping[str, Any]) -> str:
    return (f"needs {f.get('need', f['vcpus'])} {f.get('unit', 'vCPUs')}, over {f['provider']}'s default"
            f" {f['quota_name']} quota of {f['limit']}:"
            f" `gpuplan check {f['provider']}` reads yours")


def _default_family_quota(f: Mapping[str, Any]) -> str:
    return (f"needs {f['vcpus']} vCPUs of {f['family']}, over its default quota of {f['limit']}:"
            f" `gpuplan check {f.get('provider', '')}` reads yours").replace("check `", "check PROVIDER`")


def _quota_unknown(f: Mapping[str, Any]) -> str:
    name = f" ({f['name']})" if f.get("name") else ""
    return (f"needs {f['need']} {f['unit']} of {f['provider']} {f['family']}{name}; your quota is unknown:"
            f" `gpuplan check {f['provider']}` reads it")


def _retired(f: Mapping[str, Any]) -> str:
    succ = f"; successor {f['successor']}" if f.get("successor") else ""
    return f"{f['offer']} retired on {f['retired_on']} (as of {f['snapshot']}){succ}"


def _retires(f: Mapping[str, Any]) -> str:
    succ = f"; successor {f['successor']}" if f.get("successor") else ""
    return (f"{f['offer']} retires or ends sale on {f['retired_on']}, before this plan could end (started by"
            f" {f['start']}, its {fmt.duration(f['wall_s'])} run to {f['ends']}): not recommended{succ}")


def _task_limit(f: Mapping[str, Any]) -> str:
    return (f"one {f['offer']} task would run {fmt.duration(f['task_s'])}, past DOK's default limit of"
            f" {fmt.duration(f['limit_s'])}, which `gpuplan run` keeps (whether DOK accepts a longer one is not"
            " documented): split the batch into parts that each end within it")


def _packing(f: Mapping[str, Any]) -> str:
    k, why = f["per_gpu"], f["why"]
    if why == "no_memory":
        return f"{k} per GPU needs a fixed memory fraction per job; the workload gives no memory_gib"
    if why == "memory" and f.get("share") is not None:
        share, most = Decimal(f["share"]) * 100, Decimal(f["most_share"]) * 100
        return (f"{k} per GPU: {k} x {number(f['need_gib'])} GiB (a fixed fraction of {number(share)} % + "
                f"{number(f['context_gib'])} GiB CUDA context each) exceed the {f['gpu_memory_gib']} GiB of a {f['gpu']};"
                f" {k} fit at most {number(most)} % each, below the least that ran as fast")
    if why == "memory":
        return (f"{k} per GPU: {k} x {number(f['need_gib'])} GiB fixed fractions exceed the {f['gpu_memory_gib']} GiB "
                f"of a {f['gpu']}")
    if why == "not_measured":
        where = f"measured only on {f['measured_on']}" if f.get("measured_on") else "not measured"
        return (f"{k} per GPU on {f['gpu']}: per-stream efficiency {where}; it depends on the job and"
                f" the GPU: measure it there (gpuplan bench --max-pack {k})")
    if why == "did_not_fit":
        return f"{k} per GPU: {k} jobs did not fit one {f['gpu']} in the measurement"
    return (f"{k} per GPU: no measured per-stream efficiency for {k} jobs on one {f['gpu']} (measure it with "
            f"gpuplan bench)")


def _real_time(f: Mapping[str, Any]) -> str:
    alone, need = f["frame_s"], f["need_s"]
    return (f"real time out of reach on a {f['gpu']}: one stream alone takes {number(alone * 1000)} ms"
            f" per frame, {number(f['fps'])} fps needs at most {number(need * 1000)} ms: {alone / need:.2f}x too slow")


def _link(f: Mapping[str, Any]) -> str:
    if f["between"] == "machines":
        return (f"no inter-node network figure for {f['offer']} (catalog/links.csv):"
                " data-parallel over several machines is not planned on it")
    return (f"no GPU-to-GPU link figure for {f['offer']} (catalog/links.csv):"
            " data-parallel over its GPUs is not planned")


def _image(f: Mapping[str, Any]) -> str:
    if f["why"] == "no_capture":
        return f"no image capture on {f['provider']} as of {f['month']} ({f['source']})"
    return (f"an image built on {f['offer']} ({f['gpu']}) cannot start {f['other']} ({f['other_gpu']}): {f['provider']}"
            f" images start the {f['usable_by'].replace('-', ' ')} only ({f['source']})")


def _spot(f: Mapping[str, Any]) -> str:
    return (f"spot ({f['offer']}): {f['rule']}; an interrupted job redoes its work since its last checkpoint (or its"
            " start): the expected cost is in this plan's yen and wall (the spot risk line); checkpoint long jobs, or"
            " plan on demand")


def _global_batch(f: Mapping[str, Any]) -> str:
    return (f"global batch {f['batch']:,} ({f['per_gpu']} per GPU x {f['gpus']} GPUs) is past the"
            f" {f['validated']:,} validated ({f['source']}): accuracy may suffer;"
            " tune the learning rate and batch size first")


_WORDS: dict[Code, Callable[[Mapping[str, Any]], str]] = {
    Code.DEADLINE: _deadline,
    Code.MAX_YEN_PER_HOUR: lambda f: (f"costs {fmt.yen(f['yen_per_hour'], 2)}/h, over max_yen_per_hour"
                                      f" {fmt.yen(f['max_yen_per_hour'], 2)}/h"),
    Code.QUOTA: lambda f: (f"needs {f['vcpus']} vCPUs at once, over your {f['provider']} quota of {f['limit']}"
                           + (f" (read by gpuplan check on {f['read_at'][:10]})" if f.get("read_at") else "")),
    Code.FAMILY_QUOTA: lambda f: (f"needs {f['vcpus']} vCPUs of {f['family']}, over your quota"
                                  f" {f['provider']}:{f['given_family']}={f['limit']}"
                                  + (f" (read by gpuplan check on {f['read_at'][:10]})" if f.get("read_at") else "")),
    Code.DEFAULT_QUOTA: _default_quota,
    Code.DEFAULT_FAMILY_QUOTA: _default_family_quota,
    Code.QUOTA_UNKNOWN: _quota_unknown,
    Code.RETIRED: _retired,
    Code.RETIRES: _retires,
    Code.TASK_LIMIT: _task_limit,
    Code.UNPRICED: lambda f: f"{f['what']} not sourced for {f['offer']}; set it in prices.yaml",
    Code.PRICED_LATER: lambda f: f"{f['offer']} priced {f['priced']}, after the as-of month {f['month']}",
    Code.NOT_AVAILABLE: lambda f: f"{f['offer']} not available until {f['available_from']}",
    Code.MEMORY: lambda f: (f"a job needs {number(f['need_gib'])} GiB, more than the {f['gpu_memory_gib']} GiB of a "
                            f"{f['gpu']}"),
    Code.NO_SPEED: lambda f: (f"no published {f['kind']} figure for {f['gpu']} (catalog/gpus.csv); measure it:"
                              " `gpuplan probe` times your job on it, or add speed: to the workload"),
    Code.PACKING: _packing,
    Code.REAL_TIME: _real_time,
    Code.FLEET_LIMIT: lambda f: (f"{f['streams']} streams need {f['machines']} machines of {f['per_machine']} streams;"
                                 + (" one task runs at a time" if f.get("task")
                                    else f" you have {'one' if f['have'] == 1 else f['have']}")),
    Code.PROVISION_LIMIT: lambda f: (f"{f['machines']:,} machines: `gpuplan provision` makes at most {f['limit']:,}"
                                     " per cluster"),
    Code.LINK: _link,
    Code.IMAGE: _image,
    Code.SPOT: _spot,
    Code.GLOBAL_BATCH: _global_batch,
}


def render(outcome: Outcome) -> str:
    """The outcome in words (today's wording); the only place that makes them."""
    return _WORDS[outcome.code](dict(outcome.figures))


def sentences(outcomes) -> str:
    """Several outcomes as one line, as a plan's reason reads."""
    return "; ".join(render(o) for o in outcomes)
