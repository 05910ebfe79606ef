"""`gpuplan estimate --plot FILE.svg|.png`: the cost / wall-time chart and the pick's timeline.

Top: every feasible plan as a point (wall time against yen) coloured by its provider, the
Pareto frontier as a line with each of its points labelled, the recommendation marked, and for
the frontier's plans and the pick their yen and wall ranges where the table shows them (every
GPU at its speed band's low and high end, planning/evidence.py) as error bars; the budget
(`--budget`) and the deadline (`--deadline`) drawn as lines. The yen axis reads in yen with
thousands separators ("¥1,285"), the wall axis in durations ("1:30 h"); each is linear unless the
plans span more than 20x (then log, with ticks at 1, 2 and 5 of each decade, still written in yen
and durations). Bottom: the recommended plan's machines on a time axis, each bar cut into what it
is billed for (setup, capture, staging, jobs, idle tail), its jobs written on it, and the unbilled
wait while an image is captured and launched. The figure is saved with a tight bounding box:
every label is inside the file. Every figure comes from the Plan fields the table prints.

matplotlib is an optional extra (`pip install 'gpuplan[plot]'`), imported only here. SVG text is
kept as text (svg.fonttype none) and the artists carry ids (gid), so the file can be read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from gpuplan.errors import UsageError
from gpuplan.planning import fmt

MAX_TIMELINE_ROWS = 40
MAX_FRONTIER_LABELS = 8  # past that the labels would hide the points
# one colour per provider (Okabe-Ito, readable with colour blindness); others cycle through it
PROVIDER_COLOURS = {"aws": "#e69f00", "azure": "#0072b2", "gcp": "#009e73", "sakura": "#cc79a7",
                    "sakura-phy": "#d55e00", "baremetal": "#000000", "slurm": "#56b4e9"}
OTHER_COLOURS = ("#f0e442", "#999999")
PARTS = (  # VmUse field, label, colour
    ("setup_s", "setup", "#e69f00"),
    ("capture_s", "capture", "#cc79a7"),
    ("staging_s", "staging", "#009e73"),
    ("jobs_s", "jobs", "#0072b2"),
    ("idle_s", "idle tail", "#bbbbbb"),
)


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'gpuplan[plot]'") from None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG
    matplotlib.rcParams["svg.hashsalt"] = "gpuplan"  # the same estimate gives the same file
    import matplotlib.pyplot as plt

    return plt


def check_target(path: Path) -> tuple[Path, str]:
    """A --plot FILE this can draw into (.svg or .png, matplotlib there), and its suffix: checked
    by a command before it does anything, so that a drawing asked for at its end cannot fail there."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".svg", ".png"):
        raise UsageError(f"--plot {path}: name an .svg or .png file")
    _pyplot()
    return path, suffix


def _label(plan) -> str:
    how = "from an image" if plan.setup == "image" else "from scratch"
    return f"{plan.label} {how}"


def write(est, path: Path, deadline_s: int | None = None, budget: Decimal | None = None) -> Path:
    """Draw the estimate into `path` (.svg or .png); `deadline_s` and `budget` (yen) as lines."""
    path, suffix = check_target(path)
    plt = _pyplot()
    rec = est.recommended
    vms = list(rec.vms) if rec is not None else []
    rows = min(len(vms), MAX_TIMELINE_ROWS)
    fig, (chart, timeline) = plt.subplots(
        2, 1, figsize=(10, 5.5 + 0.28 * max(rows, 3)), gridspec_kw={"height_ratios": [5, 1.2 + 0.28 * max(rows, 3)]})
    _chart(chart, est, deadline_s, budget)
    if rec is not None:
        _timeline(timeline, rec, vms[:rows], len(vms) - rows)
    else:
        timeline.axis("off")
        timeline.text(0.5, 0.5, f"no recommendation: {est.reason}", ha="center", va="center", wrap=True)
    return _save(fig, path, suffix)


def _jobs_text(names: Sequence[str]) -> str:
    """The jobs a machine runs, written on its bar: all of them when few, else the first and a count."""
    if len(names) <= 3:
        return ", ".join(names)
    return f"{names[0]} … {names[-1]} ({len(names)} jobs)"


def _hours(seconds: float) -> float:
    return seconds / 3600


def colours(providers: Sequence[str]) -> dict[str, str]:
    """Each provider's colour in the chart, in the order given."""
    out: dict[str, str] = {}
    spare = iter(OTHER_COLOURS * (1 + len(providers)))
    for name in providers:
        if name not in out:
            out[name] = PROVIDER_COLOURS.get(name) or next(spare)
    return out


def _chart(ax, est, deadline_s: int | None, budget: Decimal | None = None) -> None:
    from matplotlib.lines import Line2D

    from gpuplan.planning import evidence

    # owned hardware the user did not name is priced at its power alone: left out, as from the pick
    shown = [p for p in est.plans if p.feasible and p.recommendable]
    colour = colours(sorted({p.provider for p in shown}))
    ax.scatter([_hours(p.wall_s) for p in shown], [float(p.cost) for p in shown], s=14,
               color=[colour[p.provider] for p in shown], gid="plans", zorder=2)
    by_provider = [Line2D([], [], ls="", marker="o", ms=5, color=c,
                          label=f"{name} ({fmt.count(sum(1 for p in shown if p.provider == name))} plans)")
                   for name, c in colour.items()]
    front = sorted(est.pareto, key=lambda p: p.wall_s)
    # the yen and wall ranges of the plans that are named on the chart: the frontier's and the pick's
    named = {id(p): p for p in [*front, *([est.recommended] if est.recommended is not None else [])]}
    ranged = [p for p in named.values() if p.feasible]
    streams = est.workload.streams is not None
    spans = [(p, sp) for p in ranged
             if (sp := evidence.plan_range(p, streams)) is not None and sp.shown]  # the ranges the table shows
    # every duration on the chart in one unit, as the table writes them ("1:14 h" beside "0:47 h")
    scale = fmt.scale_of([p.wall_s for p in shown] + [sp.wall_s[1] for _, sp in spans]
                         + ([deadline_s] if deadline_s else []))
    for i, (p, sp) in enumerate(spans):
        x, y = _hours(p.wall_s), float(p.cost)
        bars = ax.errorbar([x], [y], xerr=[[max(0.0, x - _hours(sp.wall_s[0]))], [max(0.0, _hours(sp.wall_s[1]) - x)]],
                           yerr=[[max(0.0, y - float(sp.cost[0]))], [max(0.0, float(sp.cost[1]) - y)]], fmt="none",
                           ecolor=colour.get(p.provider, "#999999"), elinewidth=1, capsize=3, alpha=0.7, zorder=1)
        wall_bar, yen_bar = bars.lines[2]  # matplotlib draws the x error bars, then the y ones
        wall_bar.set_gid(f"range-{i}-wall")
        yen_bar.set_gid(f"range-{i}-yen")
    if front:
        ax.plot([_hours(p.wall_s) for p in front], [float(p.cost) for p in front], "-o", color="#0072b2", ms=4,
                label="Pareto frontier (cheapest for its wall time)", gid="frontier", zorder=3)
        for i, p in enumerate(front[:MAX_FRONTIER_LABELS]):
            if p is est.recommended:
                continue  # the pick has its own, longer label
            ax.annotate(f"{p.label}: {fmt.yen(p.cost)}, {fmt.duration(p.wall_s, scale)}", (_hours(p.wall_s), float(p.cost)),
                        xytext=(6, -12 if i % 2 else 6), textcoords="offset points", fontsize=7, color="#0072b2",
                        gid=f"frontier-label-{i}", annotation_clip=False)
    rec = est.recommended
    if rec is not None:
        ax.scatter([_hours(rec.wall_s)], [float(rec.cost)], s=160, marker="*", color="#d55e00", zorder=4,
                   label="recommended", gid="pick")
        ax.annotate(f"{_label(rec)}: {fmt.yen(rec.cost)}, {fmt.duration(rec.wall_s, scale)}",
                    (_hours(rec.wall_s), float(rec.cost)), xytext=(8, 8), textcoords="offset points",
                    fontsize=9, gid="pick-label", annotation_clip=False)
    if deadline_s is not None:
        ax.axvline(_hours(deadline_s), color="#d55e00", ls="--", lw=1, label=f"deadline {fmt.duration(deadline_s, scale)}",
                   gid="deadline")
    if budget is not None:
        ax.axhline(float(budget), color="#009e73", ls=":", lw=1.2, label=f"budget {fmt.yen(budget)}", gid="budget")
    # log axes where the plans span more than a factor of 20, so the cheap end is not a smudge; not
    # where a plan drawn is at ¥0 or 0 s (owned hosts with no power price): a log axis puts it at
    # minus infinity, and its label with it (matplotlib's "Tight layout not applied")
    drawn = [*shown, *front, *([rec] if rec is not None else [])]
    costs = [float(p.cost) for p in drawn]
    walls = [p.wall_s for p in drawn]
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if costs and min(costs) > 0 and max(costs) / min(costs) > 20:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    if walls and min(walls) > 0 and max(walls) / min(walls) > 20:
        ax.set_xscale("log")  # 1, 2 and 5 of each decade: a decade of hours alone showed the one tick "1"
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt.yen(Decimal(str(v)).quantize(Decimal(1)))))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt.duration(v * 3600, scale) if v > 0 else "0"))
    ax.set_xlabel("wall time (setup counted); bars: the range at each GPU's speed band")
    ax.set_ylabel("cost (yen, billed as each provider bills)")
    w = est.workload
    ax.set_title(f"{w.name}: {fmt.count(len(w.jobs))} jobs, catalog {est.snapshot}", fontsize=11)
    ax.grid(True, alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=by_provider + handles, fontsize=8, loc="upper right")


def _timeline(ax, rec, vms: Sequence, hidden: int) -> None:
    """One bar per machine, from when it starts to when it is released."""
    used_labels: set[str] = set()
    starts = []
    for i, v in enumerate(vms):
        busy = v.setup_s + v.capture_s + v.staging_s + v.jobs_s + v.idle_s
        start = v.end_s - busy
        starts.append(start)
        x = start
        y = len(vms) - 1 - i
        for field, label, colour in PARTS:
            width = getattr(v, field)
            if width <= 0:
                continue
            ax.barh(y, _hours(width), left=_hours(x), height=0.6, color=colour, gid=f"vm{i}-{label.replace(' ', '-')}",
                    label=label if label not in used_labels else None)
            used_labels.add(label)
            if field == "jobs_s" and v.jobs:
                ax.text(_hours(x + width / 2), y, _jobs_text(v.jobs), ha="center", va="center", fontsize=7,
                        color="white", gid=f"vm{i}-job-names", clip_on=True)
            x += width
    workers = [s for s, v in zip(starts, vms) if v.role == "worker"]
    builders = [(i, v) for i, v in enumerate(vms) if v.role == "builder"]
    if builders and workers:
        # Azure-style: the builder is deallocated while captured, then workers launch from the image
        i, b = builders[0]
        wait = min(workers) - b.end_s
        if wait > 0:
            ax.barh(len(vms) - 1 - i, _hours(wait), left=_hours(b.end_s), height=0.6, color="none",
                    edgecolor="#cc79a7", hatch="//", gid="image-wait", label="image capture + launch (not billed)")
    ax.set_yticks(range(len(vms)), [f"{v.offer.name} ({v.role}): {fmt.plural(len(v.jobs), 'job')}" if v.jobs
                                     else f"{v.offer.name} ({v.role})" for v in reversed(vms)], fontsize=8)
    from matplotlib.ticker import FuncFormatter

    scale = fmt.scale_of([rec.wall_s])  # its ticks in the unit of its wall ("0:06 h", never "0.1")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt.duration(v * 3600, scale) if v > 0 else "0"))
    ax.set_xlabel("time from the start")
    more = f"; {fmt.count(hidden)} more machines not drawn" if hidden else ""
    ax.set_title(f"recommended: {_label(rec)}, {fmt.yen(rec.cost)}, wall {fmt.duration(rec.wall_s)}{more}",
                 fontsize=10)
    ax.legend(fontsize=8, loc="lower right", ncols=3)
    ax.grid(True, axis="x", alpha=0.3)



def budget_chart(path: Path, title: str, days: Sequence[int], spent: Sequence[Decimal], budget: Decimal | None,
                 committed: Decimal) -> Path:
    """`gpuplan budget PROJECT --plot FILE`: a month's spend, day by day (JST; cumulative, the
    ledger's yen by the end of each day), against its budget (a line; none: no limit), with what
    live reservations hold stacked on the last day drawn."""
    path, suffix = check_target(path)
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.step(list(days), [float(y) for y in spent], where="post", color="#0072b2", label="spent", gid="spent")
    if days and committed:
        ax.bar([days[-1]], [float(committed)], bottom=[float(spent[-1])], width=0.6, color="#e69f00",
               label=f"committed {fmt.yen(committed)}", gid="committed")
    if budget is not None:
        ax.axhline(float(budget), color="#d55e00", linestyle="--", label=f"budget {fmt.yen(budget)}", gid="budget")
    ax.set_xlabel("day of the month (JST)")
    ax.set_ylabel("yen, consumption tax included")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt.yen(Decimal(str(v)).quantize(Decimal(1)))))
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path, suffix)


# a run chart's time ticks are this many seconds apart: the first that gives at most 8 of them
TICK_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800,
                432000, 864000)


@dataclass(frozen=True)
class MachineRun:
    """One machine of a batch beside what its plan gave it (run/against_plan.py builds these): its
    planned jobs phase (the plan's jobs_s: a run starts on machines already set up), and the items
    it ran, each as (start, end) seconds from the batch's start."""

    name: str  # the node, or "planned machine N" where no node matched it
    planned_s: int | None  # None: the plan had no machine for this node
    planned_items: int
    spans: tuple[tuple[float, float], ...]  # its items' latest attempts
    interrupted: tuple[tuple[float, float], ...] = ()  # attempts stopped when the cloud took the node back


@dataclass(frozen=True)
class RunPicture:
    """A batch drawn against its plan: `gpuplan jobs CLUSTER JOB --plot`."""

    job: str
    state: str
    machines: tuple[MachineRun, ...]
    yen: tuple[tuple[float, Decimal], ...]  # (seconds from the batch's start, yen billed by then)
    yen_basis: str  # how the yen are counted, in words ("consumption tax included")
    planned_wall_s: Decimal | None = None  # the plan's jobs phase; None: run without --plan
    planned_yen: Decimal | None = None
    plan_file: str = ""
    note: str = ""  # why the plan is not drawn, where it is not


def run_chart(path: Path, pic: RunPicture) -> Path:
    """Draw a batch against its plan into `path` (.svg or .png). Top: per machine, the plan's jobs
    phase as an outlined bar and what it ran as solid bars (each item one bar, from its start to
    its end; attempts the cloud stopped hatched). Bottom: the yen billed over the batch's time,
    by the one billing rule (priced at each moment given, joined by straight lines), and the
    plan's yen for its jobs phase and its wall as lines."""
    path, suffix = check_target(path)
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    machines = pic.machines[:MAX_TIMELINE_ROWS]
    rows = max(len(machines), 2)
    fig, (bars, money) = plt.subplots(2, 1, figsize=(10, 3.5 + 0.45 * rows),
                                      gridspec_kw={"height_ratios": [1 + 0.45 * rows, 2.5]})
    ends = [e for m in machines for _, e in (*m.spans, *m.interrupted)] + [float(t) for t, _ in pic.yen]
    longest = max([*ends, *(float(m.planned_s) for m in machines if m.planned_s)], default=0.0)
    scale = fmt.scale_of([int(longest)])
    hours = FuncFormatter(lambda v, _: fmt.duration(v * 3600, scale) if v > 0 else "0")
    step = _hours(next((s for s in TICK_STEPS_S if longest / s <= 8), TICK_STEPS_S[-1]))  # ticks it writes apart
    legend: set[str] = set()

    def once(label: str) -> str | None:  # each kind of bar named once in the legend
        if label in legend:
            return None
        legend.add(label)
        return label

    for i, m in enumerate(machines):
        y = len(machines) - 1 - i
        if m.planned_s is not None:
            bars.barh(y + 0.22, _hours(m.planned_s), height=0.36, color="none", edgecolor="#0072b2", lw=1.2,
                      gid=f"planned-{i}", label=once("planned (its jobs phase)"))
        for k, (start, end) in enumerate(m.spans):
            bars.barh(y - 0.2, _hours(end - start) or 1e-6, left=_hours(start), height=0.36, color="#e69f00",
                      edgecolor="white", lw=0.4, gid=f"actual-{i}-{k}", label=once("actual (one bar an item)"))
        for k, (start, end) in enumerate(m.interrupted):
            bars.barh(y - 0.2, _hours(end - start), left=_hours(start), height=0.36, color="none", edgecolor="#d55e00",
                      hatch="//", gid=f"interrupted-{i}-{k}", label=once("stopped: node taken back"))
    labels = []
    for m in reversed(machines):
        planned = "not in the plan" if m.planned_s is None else f"planned {fmt.plural(m.planned_items, 'item')}"
        labels.append(f"{m.name}: {fmt.plural(len(m.spans), 'item')} ({planned})")
    bars.set_yticks(range(len(machines)), labels, fontsize=8)
    bars.set_ylim(-0.7, len(machines) - 0.3)
    bars.set_xlabel("time from the batch's start")
    bars.set_ylabel("machine")
    hidden = len(pic.machines) - len(machines)
    more = f"; {fmt.count(hidden)} more machines not drawn" if hidden else ""
    against = f"against {pic.plan_file}" if pic.planned_wall_s is not None else (pic.note or "no plan")
    bars.set_title(f"job {pic.job} ({pic.state}) {against}{more}", fontsize=10)
    bars.grid(True, axis="x", alpha=0.3)
    if legend:
        bars.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))

    if pic.yen:
        money.plot([_hours(t) for t, _ in pic.yen], [float(y) for _, y in pic.yen], color="#e69f00",
                   gid="yen-actual", label=f"billed: {fmt.yen(pic.yen[-1][1])}")
    if pic.planned_yen is not None:
        money.axhline(float(pic.planned_yen), color="#0072b2", ls="--", lw=1, gid="yen-planned",
                      label=f"planned: {fmt.yen(pic.planned_yen)} for its jobs phase")
    if pic.planned_wall_s is not None:
        money.axvline(_hours(int(pic.planned_wall_s)), color="#0072b2", ls=":", lw=1, gid="wall-planned",
                      label=f"planned wall {fmt.duration(int(pic.planned_wall_s), scale)}")
    money.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt.yen(Decimal(str(v)).quantize(Decimal(1)))))
    money.set_xlabel("time from the batch's start")
    money.set_ylabel(f"yen billed so far\n({pic.yen_basis})")
    money.set_ylim(bottom=0)
    money.grid(True, alpha=0.3)
    if money.get_legend_handles_labels()[0]:
        money.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    right = _hours(int(max(longest, float(pic.planned_wall_s or 0)))) * 1.05 or 1 / 60
    for ax in (bars, money):
        ax.set_xlim(0, right)
        ax.xaxis.set_major_locator(MultipleLocator(step))
        ax.xaxis.set_major_formatter(hours)
    return _save(fig, path, suffix)


def _save(fig, path: Path, suffix: str) -> Path:
    """Write the figure to `path` as `suffix` says (an SVG without its date, so the same plot
    is the same file) and close it; one line where the file cannot be written."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        fig.savefig(path, format=suffix[1:], metadata={"Date": None} if suffix == ".svg" else None,
                    bbox_inches="tight", pad_inches=0.2)
    except OSError as exc:
        raise UsageError(f"cannot write the plot to {path} ({exc.strerror})") from None
    finally:
        plt.close(fig)
    return path
