"""How long output is laid out on a terminal: one table style for every command that prints a
table (estimate, catalog, bench, cost-report), and one progress line for work that takes more
than a few seconds (`working`).

On a terminal: a rich table with a rule under the header and no outer box, fitted to the
terminal's width (columns that may wrap fold, the others never do). Piped into another program:
plain text, one line per row, columns padded with spaces, no colour, no width limit and no
trailing spaces, so `gpuplan catalog | grep NAME` finds a row whole.

Cells are plain text (never rich markup: a name like `gpuplan[plot]` prints as written); a cell
may be a (text, style) pair to colour it on a terminal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

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


# Progress for work that takes more than a few seconds (provision, bootstrap, image build, teardown,
# catalog refresh, status --refresh): on a terminal a spinner line under the output with the time
# elapsed and the latest step, each step also printed above it as a line that stays; piped, the
# step lines alone, so logs and tests read the same text.
@contextlib.contextmanager
def working(console, what: str) -> Iterator[Callable[[str], None]]:
    """A progress callback for `what` ("provisioning demo"), shown on `console` (stderr)."""
    from rich.text import Text

    def line(message: str) -> None:
        console.print(Text.assemble(("… ", "dim"), message), soft_wrap=True)

    if not console.is_terminal:
        yield line
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                   console=console, transient=True)
    with bar:
        task = bar.add_task(what, total=None)

        def step(message: str) -> None:
            line(message)
            bar.update(task, description=f"{what}: {message}")

        yield step
