"""The 高火力 DOK run backend's adapter (RunBackend, run/backends.py): items as Sakura DOK container
tasks, one task per item (or one 8-GPU task for them all). Its code: run/dok/dok_runs.py and
dok_batch.py; what it shares with the other task backend: run/task_batches.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpuplan.errors import UsageError
from gpuplan.planning import fmt
from gpuplan.run.backends import IMAGE, QUOTE, REGISTRY_ID, Fetched, Submission
from gpuplan.run.items import job_row
from gpuplan.run.task_batches import TaskBackend

if TYPE_CHECKING:
    from gpuplan.store.state import JobRow, State


class DokBackend(TaskBackend):
    name = "dok"
    poll_s = 10.0
    stopped = ("DOK task", "cancelled (waiting or running)")
    pseudo_clusters: tuple[str, ...] = ("dok",)
    supports = frozenset({IMAGE, REGISTRY_ID, QUOTE})
    refusal = "a DOK run is one container task per item (or one 8-GPU task, one item per GPU)"
    refusal_hint = (" (those are for cluster runs: put the code in the image; --timeout bounds each task's bill;"
                    " `--resume JOB` resubmits what failed)")
    unit = "DOK task"

    def runs(self) -> ModuleType:
        from gpuplan.run.dok import dok_runs

        return dok_runs

    @property
    def min_time_limit_s(self) -> int:  # type: ignore[override]
        from gpuplan.providers.sakura_dok import MIN_TIME_LIMIT_S

        return MIN_TIME_LIMIT_S

    def resolve(self, target: str, predicted: Mapping[str, Any] | None) -> str:
        return self.runs().plan_of(target, predicted)

    def resumed(self, old: JobRow, sub: Submission) -> Submission:
        from dataclasses import replace

        o = old.options
        return replace(sub, target=o["dok_plan"], command=tuple(old.command), image=sub.image or o["image"],
                       env=sub.env or o.get("environment") or {}, registry_id=sub.registry_id or o.get("registry") or "",
                       timeout_s=o.get("time_limit_s") or sub.timeout_s)

    def submitted(self, state: State, job: str, count: int) -> str:
        row = job_row(state, job)
        plan = row.options.get("dok_plan")
        if self.runs().is_batch(row):
            return f"one {plan} DOK task for {fmt.plural(count, 'item')}, one per GPU at a time"
        return f"{fmt.plural(count, 'DOK task')} on {plan}, one running at a time per project"

    def notes(self, job: str) -> list[str]:
        return [f"artifacts: `gpuplan dok artifacts --run {job}`"]

    def after(self, job: str) -> list[str]:
        return [f"artifacts (each task's SAKURA_ARTIFACT_DIR, for 72 hours): `gpuplan dok artifacts --run {job} --out DIR`"]

    def names(self, target: str) -> bool:
        return self.runs().is_dok(target)

    def serves(self, offer: Any) -> bool:
        return offer.kind == "task" and offer.name.startswith("dok-")

    def target_of(self, offer: Any, cluster: str) -> str:
        return offer.name.removeprefix("dok-")  # the task plan

    def bench_hint(self, offer: Any, job: str, out: str) -> str | None:
        return (f"run `gpuplan bench {job} --local --out {out}` on one {offer.gpu} (as a `gpuplan dok submit` task from"
                f" an image with gpuplan[bench], or any machine with that GPU), then `--profile {out}`")

    def task_steps(self, offer: Any, image: str, items: int, outputs: Path) -> list[str]:
        return [f"1. send {fmt.plural(items, 'DOK task')} on {offer.name.removeprefix('dok-')} from image"
                f" {image or '(none given)'}, one running at a time",
                f"2. follow them; each task's artifact (SAKURA_ARTIFACT_DIR) is fetched into {outputs}"]

    def preflight(self, image: str) -> None:
        _need_image(image, "the pick")
        self.runs().default_client().check_credentials()

    def validate(self, sub: Submission) -> None:
        from gpuplan.providers.sakura_dok import MIN_TIME_LIMIT_S

        if sub.timeout_s < MIN_TIME_LIMIT_S:
            raise UsageError(f"--timeout {sub.timeout_s}: a DOK task's time limit is at least {MIN_TIME_LIMIT_S} s")

    def submit(self, state: State, sub: Submission, progress: Callable[[str], None]) -> str:
        dok_runs = self.runs()
        _need_image(sub.image, sub.target)
        self.validate(sub)
        command = list(sub.command)
        if sub.outputs_env:  # $GPUPLAN_OUTPUT_DIR is where an item's outputs go: on DOK, the task's artifact folder
            command = ["sh", "-c", 'GPUPLAN_OUTPUT_DIR="${SAKURA_ARTIFACT_DIR:-/tmp}" exec "$@"', "gpuplan", *command]
        registry = sub.registry_id or getattr(sub.registry, "dok_registry", "") or None
        return dok_runs.submit(state, dok_runs.default_client(), sub.target, sub.image, list(sub.items), command,
                               environment=dict(sub.env), registry=registry, time_limit_s=sub.timeout_s,
                               resumes=sub.resumes, options=dict(sub.options), progress=progress,
                               **({"confirm": sub.confirm} if sub.confirm is not None else {}))

    def dashboard(self, state: State, target: str, port: int, ready: Callable[[int], None],
                  stop: Callable[[], bool]) -> None:
        raise UsageError("a DOK batch has no cluster and no dashboard: `gpuplan jobs dok` shows its tasks")

    def outputs(self, state: State, job: str, into: Path, item: str | None = None) -> Fetched:
        if item is not None:
            raise UsageError("a DOK task's outputs are its artifact: fetch them all with `--fetch DIR` (no ITEM)")
        items, files = self.runs().fetch_artifacts(state, job, into)
        return Fetched(items, files)


def _need_image(image: str, what: str) -> None:
    if not image:
        raise UsageError(f"{what} is a 高火力 DOK task plan: every item runs in a container there; name the container"
                         " image each task runs: give the batch an image (image: or --image), e.g. one built from your"
                         " code's Dockerfile")
