"""The Slurm run backend's adapter (RunBackend, run/backends.py): a batch as one Slurm job array
on a cluster of slurm.yaml, one array task per item, one GPU each. Its code:
run/slurm/slurm_runs.py; what it shares with the other task backend: run/task_batches.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpuplan.errors import UsageError
from gpuplan.planning import fmt
from gpuplan.run.backends import Fetched, Submission
from gpuplan.run.task_batches import TaskBackend

if TYPE_CHECKING:
    from gpuplan.store.state import JobRow, State


class SlurmBackend(TaskBackend):
    name = "slurm"
    poll_s = 5.0
    stopped = ("Slurm array task", "cancelled (pending or running), none left in squeue")
    pseudo_clusters: tuple[str, ...] = ("slurm",)
    supports: frozenset[str] = frozenset()
    refusal = "a Slurm run is one array task per item, one GPU each, on the nodes as they are"

    def runs(self) -> ModuleType:
        from gpuplan.run.slurm import slurm_runs

        return slurm_runs

    def resolve(self, target: str, predicted: Mapping[str, Any] | None) -> str:
        return target

    def resumed(self, old: JobRow, sub: Submission) -> Submission:
        from dataclasses import replace

        o = old.options
        return replace(sub, target=f"slurm:{o['slurm_cluster']}/{o['partition']}", command=tuple(old.command),
                       env=sub.env or o.get("env") or {}, timeout_s=o.get("timeout_s") or sub.timeout_s)

    def offer_of(self, target: str) -> Any:
        from gpuplan.providers import slurm

        return slurm.offer_of(target.split(":", 1)[1]) if ":" in target else None

    def submitted(self, state: State, job: str, count: int) -> str:
        return f"{fmt.plural(count, 'item')} as one Slurm job array"

    def names(self, target: str) -> bool:
        return self.runs().is_slurm(target)

    def serves(self, offer: Any) -> bool:
        return offer.provider == "slurm"  # a partition of slurm.yaml (providers/slurm.py)

    def target_of(self, offer: Any, cluster: str) -> str:
        return "slurm:" + offer.name.replace(".", "/", 1)  # CLUSTER.PARTITION -> slurm:CLUSTER/PARTITION

    def bench_hint(self, offer: Any, job: str, out: str) -> str | None:
        cluster, _, partition = offer.name.partition(".")  # a partition is shared, never provisioned
        return (f"run `srun -p {partition or 'PARTITION'} --gres=gpu:1 gpuplan bench {job} --local --out {out}` on"
                f" {cluster}'s login host (gpuplan[bench] installed there), then `--profile {out}`")

    def task_steps(self, offer: Any, image: str, items: int, outputs: Path) -> list[str]:
        return [f"1. submit {fmt.plural(items, 'item')} to Slurm partition {offer.name} as one job array"
                " (one GPU per task; the queue's wait comes first)",
                f"2. follow it with squeue/sacct; each item's outputs are fetched into {outputs}"]

    def preflight(self, image: str) -> None:
        if image:
            raise UsageError("the pick is a Slurm partition: its batch runs on the nodes as they are; containers"
                             " (image:) are not supported there yet")

    def validate(self, sub: Submission) -> None:
        return None  # what it cannot take is refused by its options (supports) and by submit's own checks

    def submit(self, state: State, sub: Submission, progress: Callable[[str], None]) -> str:
        return self.runs().submit(state, sub.target, list(sub.items), sub.command, env=dict(sub.env),
                                  timeout_s=sub.timeout_s, image=sub.image, options=dict(sub.options),
                                  resumes=sub.resumes, progress=progress)

    def session(self, state: State, job: str) -> AbstractContextManager[Any]:
        return self.runs().session(state, job)  # one SSH connection to the login host while following

    def dashboard(self, state: State, target: str, port: int, ready: Callable[[int], None],
                  stop: Callable[[], bool]) -> None:
        raise UsageError("a Slurm batch runs on a shared cluster's queue: it has no gpuplan dashboard; `gpuplan jobs"
                         " slurm` shows its tasks (squeue on the login host shows the queue)")

    def outputs(self, state: State, job: str, into: Path, item: str | None = None) -> Fetched:
        items, files = self.runs().fetch_outputs(state, job, into, item)
        return Fetched(items, files)
