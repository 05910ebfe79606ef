"""How long output is laid out on a terminal: one table style for every command that prints a
table (estimate, catalog, bench, cost-report), and one live display for work that takes more
than a few seconds (`working`, `LiveView`).

On a terminal: a rich table with a rule under the header and no outer box, fitted to the
terminal's width (columns that may wrap fold, the others never do). Piped into another program:
plain text, one line per row, columns padded with spaces, no colour, no width limit and no
trailing spaces, so `gpuplan catalog | grep NAME` finds a row whole.

Cells are plain text (never rich markup: a name like `gpuplan[plot]` prints as written); a cell
may be a (text, style) pair to colour it on a terminal.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpuplan.planning import fmt

Cell = str | tuple[str, str]


@dataclass(frozen=True)
class Column:
    name: str
    right: bool = False  # figures: right-aligned
    wrap: bool = False  # may fold onto more lines on a narrow terminal (descriptions, reasons)


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, markup=False, soft_wrap=True)


def _text(cell: Cell) -> str:
    return cell[0] if isinstance(cell, tuple) else cell


def plain(columns: list[Column], rows: list[list[Cell]], title: str | None = None) -> str:
    """The piped form: a title line, the header, a rule of dashes, one line per row."""
    texts = [[" ".join(_text(c).split("\n")) for c in row] for row in rows]
    widths = [max([len(col.name)] + [len(r[i]) for r in texts]) for i, col in enumerate(columns)]

    def line(cells) -> str:
        return "  ".join(c.rjust(w) if col.right else c.ljust(w) for c, w, col in zip(cells, widths, columns)).rstrip()

    out = [title] if title else []
    out += [line(col.name for col in columns), line("-" * w for w in widths)]
    out += [line(r) for r in texts]
    return "\n".join(out) + "\n"


def render(out, columns: list[Column], rows: list[list[Cell]], title: str | None = None) -> None:
    """Print the table on `out` (a rich Console): rich on a terminal, plain() when piped."""
    if not out.is_terminal:
        out.file.write(plain(columns, rows, title))
        return
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for col in columns:
        kw = {"justify": "right"} if col.right else {}
        table.add_column(col.name, **kw, **({"overflow": "fold", "ratio": 1, "min_width": 12} if col.wrap else {"no_wrap": True}))
    for row in rows:
        table.add_row(*[Text(c[0], style=c[1]) if isinstance(c, tuple) else Text(c) for c in row])
    out.print(table)


# Progress for work that takes more than a few seconds (launch, probe, provision, bootstrap, image
# build, teardown, catalog refresh, status --refresh): on a terminal one live display (LiveView,
# below) with the time elapsed, the work's latest step and each machine's; piped, the step lines
# alone, so logs and tests read the same text.
@contextlib.contextmanager
def working(console, what: str, machines=None) -> Iterator[Callable[[str], None]]:
    """A progress callback for `what` ("provisioning demo"), shown on `console` (stderr): one live
    display on a terminal (each machine's latest step among `machines()`), a "… step" line each
    elsewhere."""
    with LiveView(console, machines=machines, title=what) as view:
        yield view.step


# --- the live display ------------------------------------------------------------------------------
# One live display of long work (issue 46): launch, probe, provision and bootstrap redraw one
# block on a terminal instead of printing a line per change. It holds each machine's latest step,
# the batch's progress bar with its ETA, and the yen spent so far against the cap.
#
# Only the CLI draws it. The services keep reporting as they always did, through the `progress`
# callback (a step in words) and the batch's looks (run/batches.Progress); `LiveView.step` and
# `LiveView.batch` are those callbacks. Where stderr is not a terminal (a pipe, a log file, the
# tests) nothing is redrawn: each step is the same "… step" line as before and the batch's lines are
# printed by the caller as before, so what a log records is unchanged.
#
# A step is shown as a machine's when it starts with the machine's name (the playbooks' "gpu-1
# cuda/driver: running", provisioning's "gpu-1: ..."); the machines are named by `machines()`, read
# again at each step (they exist only once provisioning made their rows). Every other step is the
# work's own latest line.

WORK = ""  # the steps that name no machine


class LiveView:
    def __init__(self, console: Any, cap_yen: Decimal | int | None = None,
                 machines: Callable[[], list[str]] | None = None, title: str = "") -> None:
        self.console = console
        self.cap_yen = cap_yen
        self.machines = machines or (lambda: [])
        self.title = title  # what the work is ("provisioning demo"), with its time so far
        self.started = time.monotonic()
        self.steps: dict[str, str] = {}  # machine name (WORK: none) -> its latest step
        self.progress: Any = None  # the batch's latest look (run/batches.Progress)
        self._live: Any = None

    @property
    def drawing(self) -> bool:
        """Redrawn in place (a terminal) rather than printed a line at a time."""
        return bool(self.console.is_terminal)

    def __enter__(self) -> LiveView:
        if self.drawing:
            from rich.live import Live

            # redrawn 4 times a second (the time so far ticks) and at once on every step
            self._live = Live(console=self.console, get_renderable=self.render, refresh_per_second=4, transient=False)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The display stopped while something else uses the terminal (a question), then resumed."""
        live = self._live
        if live is None:
            yield
            return
        live.stop()
        try:
            yield
        finally:
            live.start()

    def step(self, message: str) -> None:
        """A service's progress callback: a step in words."""
        if not self.drawing:
            from rich.text import Text

            self.console.print(Text.assemble(("… ", "dim"), message), soft_wrap=True)
            return
        subject = next((m for m in self.machines() if message == m or message.startswith((f"{m} ", f"{m}:"))), WORK)
        self.steps[subject] = message
        self._redraw()

    def batch(self, progress: Any) -> None:
        """A look at the running batch (run/batches.Progress); drawn only on a terminal."""
        self.progress = progress
        self._redraw()

    def _redraw(self) -> None:
        if self._live is not None:
            self._live.refresh()

    def render(self) -> Any:
        """The display as rich renderables: the work's step, each machine's step, the batch's bar
        and the yen line."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        parts: list[Any] = []
        if self.title:
            parts.append(Text.assemble((self.title, "bold"), f" ({fmt.duration(time.monotonic() - self.started)})"))
        if WORK in self.steps:
            parts.append(Text.assemble(("… ", "dim"), self.steps[WORK]))
        machines = [(m, s) for m, s in self.steps.items() if m != WORK]
        if machines:
            table = Table.grid(padding=(0, 2))
            for name, step in machines:
                table.add_row(Text(name, style="bold"), Text(step[len(name):].lstrip(": ")))
            parts.append(table)
        p = self.progress
        if p is not None:
            done = p.ok + p.failed
            bar = Table.grid(padding=(0, 1))
            eta = "-" if p.eta_s is None else fmt.duration(p.eta_s)
            bar.add_row(ProgressBar(total=max(p.total, 1), completed=done, width=30),
                        Text(f"{done}/{p.total} items ({p.failed} failed, {p.running} running), ETA {eta}"))
            parts.append(bar)
            parts.append(Text(self.yen_line()))
        return Group(*parts)

    def yen_line(self) -> str:
        """What the batch has spent so far, against its cap where it has one."""
        p = self.progress
        spent = "?" if p is None or p.yen is None else fmt.yen(p.yen)
        if self.cap_yen is None:
            return f"{spent} so far (no max_yen)"
        return f"{spent} so far of the max_yen cap, {fmt.yen(self.cap_yen)} as the ledger counts it"
