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


def _label(plan) -> str:
    how = "from an image" if plan.setup == "image" else "from scratch"
    return f"{plan.label} {how}"


def write(est, path: Path, deadline_s: int | None = None, budget: Decimal | None = None) -> Path:
    """Draw the estimate into `path` (.svg or .png); `deadline_s` and `budget` (yen) as lines."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".svg", ".png"):
        raise UsageError(f"--plot {path}: name an .svg or .png file")
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


def _hours(seconds: int) -> float:
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
    # log axes where the plans span more than a factor of 20, so the cheap end is not a smudge
    costs = [float(p.cost) for p in shown if p.cost > 0]
    walls = [p.wall_s for p in shown if p.wall_s > 0]
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if costs and max(costs) / min(costs) > 20:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    if walls and max(walls) / min(walls) > 20:
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
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".svg", ".png"):
        raise UsageError(f"--plot {path}: name an .svg or .png file")
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
