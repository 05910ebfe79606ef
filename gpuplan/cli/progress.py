"""Progress for work that takes more than a few seconds (provision, bootstrap, image build,
teardown, catalog refresh, status --refresh).

On a terminal: a spinner line under the output with the time elapsed and the latest step, each
step also printed above it as a line that stays. Piped: the step lines alone, as before, so logs
and tests read the same text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator


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
