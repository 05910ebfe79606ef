"""The Ray run backend's adapter (RunBackend, run/backends.py): a batch on the Ray engine of a
cluster gpuplan provisioned or claimed (cloud VMs, rented servers, owned hosts). Its code: the
runner (run/ray/runner.py), the engine on the nodes (engine.py, ray_driver.py), containers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.planning import fmt
from gpuplan.run import backends
from gpuplan.run.backends import (
    CAP,
    CHECKPOINTS,
    IMAGE,
    PER_GPU,
    RECOVER,
    REGISTRY_LOGIN,
    RETRIES,
    TORCHRUN,
    WORKDIR,
    Fetched,
    Submission,
)
from gpuplan.run.items import job_row

if TYPE_CHECKING:
    from gpuplan.run.items import RunSummary
    from gpuplan.store.state import JobRow, State


class RayBackend:
    name = "ray"
    has_cluster = True
    poll_s = 1.0
    stopped = ("running item", "stopped on every node")
    pseudo_clusters: tuple[str, ...] = ()
    supports = frozenset({RECOVER, WORKDIR, TORCHRUN, PER_GPU, RETRIES, CHECKPOINTS, CAP, IMAGE, REGISTRY_LOGIN})
    refusal = "a cluster run is a batch on the cluster's Ray engine"
    refusal_hint = ""
    unit = "item"

    def resolve(self, target: str, predicted: Mapping[str, Any] | None) -> str:
        return target

    def resumed(self, old: JobRow, sub: Submission) -> Submission:
        from dataclasses import replace

        o = old.options
        return replace(sub, target=old.cluster, command=tuple(old.command), per_gpu=o.get("per_gpu", sub.per_gpu),
                       retries=o.get("retries", sub.retries), timeout_s=o.get("timeout_s", sub.timeout_s),
                       checkpoint_every_s=sub.checkpoint_every_s or o.get("checkpoint_every_s", 0),
                       image=sub.image or o.get("image") or "", node_workdir=o.get("workdir") or "")

    def offer_of(self, target: str) -> Any:
        return None

    def time_limit_within(self, offer: Any, billed: Decimal, limit_s: int) -> int:
        return limit_s  # the driver stops the batch at the cap's moment (CAP)

    def submitted(self, state: State, job: str, count: int) -> str:
        return fmt.plural(count, "rank" if job_row(state, job).options.get("torchrun") else "item")

    def notes(self, job: str) -> list[str]:
        return []

    def after(self, job: str) -> list[str]:
        return []

    def names(self, target: str) -> bool:
        return not any(b.pseudo_clusters and b.names(target) for b in backends.registered().values())

    def serves(self, offer: Any) -> bool:
        # machines gpuplan makes: cloud VMs, rented servers, owned hosts (not a task plan, nor a shared queue's partition)
        return offer.kind != "task" and not any(b.name != self.name and b.serves(offer) for b in backends.registered().values())

    def target_of(self, offer: Any, cluster: str) -> str:
        return cluster

    def task_steps(self, offer: Any, image: str, items: int, outputs: Path) -> list[str]:
        return []  # a cluster's steps (provision, bootstrap, run, fetch, teardown) are launcher.steps' own

    def bench_hint(self, offer: Any, job: str, out: str) -> str | None:
        return None  # `bench --on` provisions (or claims) one machine of the offer

    def preflight(self, image: str) -> None:
        return None  # the cluster's provider is checked by whoever makes the cluster

    def validate(self, sub: Submission) -> None:
        from gpuplan.run.ray import runner

        if sub.torchrun is not None:
            runner.torchrun_program(list(sub.command))  # a program torchrun can start: a .py file or -m MODULE

    def dashboard(self, state: State, target: str, port: int, ready: Callable[[int], None],
                  stop: Callable[[], bool]) -> None:
        from gpuplan.run.ray import engine

        engine.serve_dashboard(engine.engine_of(state, target), port, ready, stop)

    def submit(self, state: State, sub: Submission, progress: Callable[[str], None]) -> str:
        from gpuplan.fleet import locks
        from gpuplan.run.ray import runner

        command = list(sub.command)  # `env` reaches each item (in its container too) from a 0600 file: runner.submit
        if sub.torchrun is not None:
            self.validate(sub)  # bad input before anything starts
            with locks.cluster(sub.target):  # no teardown or bootstrap while the job is submitted
                return runner.submit_torchrun(state, sub.target, command, python=sub.torchrun.python,
                                              master_port=sub.torchrun.master_port, timeout=sub.timeout_s,
                                              options=dict(sub.options), local_workdir=sub.workdir, progress=progress)
        stop_at, options = sub.stop_at, dict(sub.options)
        if sub.cap is not None and stop_at is None:  # `run --max-yen`: the nodes' bill for the batch from now
            stop_at = runner.cap_stop_at(state, sub.target, sub.cap)
            options["cap"] = sub.cap.at(stop_at).options()
            progress(f"--max-yen {fmt.yen(sub.cap.yen)}: the batch stops at {stop_at:%Y-%m-%d %H:%M:%S} UTC if it is"
                     " still running")
        with locks.cluster(sub.target):  # no teardown or bootstrap while the batch is submitted
            return runner.submit(state, sub.target, list(sub.items), command, per_gpu=sub.per_gpu, retries=sub.retries,
                                 timeout=sub.timeout_s, options=options, resumes=sub.resumes,
                                 workdir=sub.node_workdir, local_workdir=sub.workdir, progress=progress,
                                 image=sub.image or None, registry=sub.registry, stop_at=stop_at,
                                 checkpoint_every_s=sub.checkpoint_every_s, recover=sub.recover,
                                 env=dict(sub.env))

    def claims(self, row: JobRow) -> bool:
        return self.names(row.cluster)

    def session(self, state: State, job: str) -> AbstractContextManager[Any]:
        from gpuplan.hosts import remote
        from gpuplan.run.ray import engine

        return remote.connect(engine.engine_of(state, job_row(state, job).cluster).head.host)

    def refresh(self, state: State, job: str, conn: Any = None) -> JobRow:
        from gpuplan.run.ray import runner

        return runner.refresh_engine(state, job, conn)

    def cancel(self, state: State, job: str) -> int:
        from gpuplan.run.ray import runner

        running = state.job_counts(job).get("running", 0)
        runner.cancel_engine(state, job)
        return running  # the items that were running, each stopped on its node (process group, container)

    def yen(self, state: State, row: JobRow, at: Any = None) -> Decimal | None:
        from gpuplan.run.ray import runner

        return runner.engine_job_yen(state, row, at)

    def summary(self, state: State, job: str) -> RunSummary:
        from gpuplan.run.ray import runner

        return runner.engine_summary(state, job)

    def outputs(self, state: State, job: str, into: Path, item: str | None = None) -> Fetched:
        from gpuplan.run.ray import runner

        skipped: list[str] = []
        items, files = runner.fetch_outputs(state, job, item, into, skipped)
        return Fetched(items, files, tuple(skipped))

    def logs(self, state: State, job: str, item: str | None, follow: bool, write: Callable[[str], None],
             note: Callable[[str], None]) -> None:
        from gpuplan.run.ray import runner

        runner.engine_logs(state, job, item, follow, write)
