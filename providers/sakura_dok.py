"""Sakura 高火力 DOK: GPU container tasks billed per second, over its REST API.

DOK has no machines to create, set up or tear down: a task runs one container image (the user's,
from any Docker Registry HTTP API V2 registry, at most 30 GB, linux/amd64) on one plan, and ends.
So this is a task client, not a `Provider`; the planner sees DOK offers as kind "task".

The API (manual.sakura.ad.jp/koukaryoku-dok-api/spec.html, summarised in
shared/notes/sakura-koukaryoku.md):

- base `https://secure.sakura.ad.jp/cloud/zone/is1a/api/managed-container/1.0` (is1a only; the
  part before `/is1a` follows SAKURACLOUD_API_ROOT_URL as for VRT), HTTP Basic auth with the same
  API key as さくらのクラウド (SAKURACLOUD_ACCESS_TOKEN / _SECRET or the usacloud profile);
- `POST /tasks/` {name, tags, execution_time_limit_sec (at least 600; default 20 days),
  containers: [{image, registry, command, entrypoint, environment, plan, http, ssh}]};
- `GET /tasks/{id}/` with status waiting, running, error, done, aborted or canceled;
- `POST /tasks/{id}/cancel/`; `GET /artifacts/{id}/download/` answers a presigned URL of the
  task's `SAKURA_ARTIFACT_DIR` as tar.gz (downloadable for 72 hours);
- logs: `POST /tasks/{id}/containers/{i}/stream/` answers {"url": a wss:// address, "token"}; the
  container's output then arrives as WebSocket messages (Authorization: Bearer <token>), while
  the task runs (read with providers/wsread.py, no dependency);
- one running task per project: the others wait (FAQ), which is why the planner plans a DOK
  queue as one machine.

Not verified against the live API (no account): the task list's envelope is read as the one
`unit_prices/` answers ({"meta": {page, page_size, count, total_pages}, "results": [...]}, as a
public price collector parses it); the task's `artifact` field ({"id": ...}) is assumed; the log
stream's shape ({"url", "token"}, Bearer auth, messages of output text, only while the task
runs), a container's `execution_seconds` and `exit_code`, and the `tag` filter of the task list
are as a third-party DOK CLI (a Python package `dok`, its client and `task logs` command) uses
them. Whether the stream repeats the output from the task's start is not known: `logs` prints
what it sends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import AuthMissing, ProviderError, UsageError

PLANS = ("v100-32gb", "h100-80gb", "h100-8gpu-80gb")
FINAL = ("done", "error", "aborted", "canceled")
MIN_TIME_LIMIT_S = 600
MAX_ENVIRONMENT_CHARS = 8192
ZONE = "is1a"


@dataclass(frozen=True)
class DokTask:
    """A task as the API reports it."""

    id: str
    name: str
    status: str  # waiting | running | error | done | aborted | canceled
    plan: str
    tags: tuple[str, ...]
    artifact_id: str | None
    execution_s: int | None = None  # the container's run time as the API reports it (what is billed)
    exit_code: int | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINAL


def _task(raw: Mapping) -> DokTask:
    containers = raw.get("containers") or [{}]
    artifact = raw.get("artifact") or {}
    return DokTask(
        id=str(raw["id"]), name=str(raw.get("name", "")), status=str(raw.get("status", "")),
        plan=str(containers[0].get("plan", "")), tags=tuple(raw.get("tags") or ()),
        artifact_id=str(artifact["id"]) if isinstance(artifact, Mapping) and artifact.get("id") else None,
        execution_s=_whole(containers[0].get("execution_seconds")), exit_code=_whole(containers[0].get("exit_code")),
    )


def _whole(value) -> int | None:
    """An integer field the API may leave out or send as null (or as a number in text)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(float(value)) if isinstance(value, (int, float, str)) and str(value).strip() else None
    except ValueError:
        return None


def check_task_input(plan: str, image: str, environment: Mapping[str, str] | None,
                     time_limit_s: int | None) -> dict[str, str]:
    """What DOK would refuse in a task, refused here in one line (UsageError); the environment
    as DOK takes it. Callers that record something first (a batch's job) check before they do."""
    if plan not in PLANS:
        raise UsageError(f"sakura DOK: unknown plan {plan!r}; plans: {', '.join(PLANS)}")
    if not image.strip():
        raise UsageError("sakura DOK: name the container image to run (e.g. registry.example/me/job:1)")
    env = {str(k): str(v) for k, v in (environment or {}).items()}
    reserved = sorted(k for k in env if k.startswith("SAKURA_"))
    if reserved:
        raise UsageError(f"sakura DOK: environment names starting SAKURA_ are DOK's own ({reserved[0]}); rename it")
    size = sum(len(k) + len(v) for k, v in env.items())
    if size >= MAX_ENVIRONMENT_CHARS:
        raise UsageError(f"sakura DOK: the environment holds {size:,} characters; DOK takes fewer than "
                         f"{MAX_ENVIRONMENT_CHARS:,}: pass large inputs through object storage")
    if time_limit_s is not None and time_limit_s < MIN_TIME_LIMIT_S:
        raise UsageError(f"sakura DOK: a time limit of {time_limit_s} s is under DOK's minimum of "
                         f"{MIN_TIME_LIMIT_S} s")
    return env


class DokClient:
    """Submit, watch, cancel tasks and fetch their artifacts. Never prints."""

    def __init__(self, config: Mapping[str, str] | None = None, *, env: Mapping[str, str] | None = None,
                 home: Path | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, poll_s: float = 10.0, retries: int = 4,
                 retry_base_s: float = 1.0) -> None:
        from gpuplan.providers.sakura import SakuraProvider

        self._vrt = SakuraProvider(config or {}, env=env, home=home)  # the key and the API root, shared
        self.sleep, self.clock, self.poll_s = sleep, clock, poll_s
        self.retries, self.retry_base_s = retries, retry_base_s
        self._http = None

    def check_credentials(self) -> None:
        self._vrt.check_credentials()

    def base_url(self) -> str:
        return f"{self._vrt.api_root()}/{ZONE}/api/managed-container/1.0"

    def _session(self):
        if self._http is None:
            import requests

            s = requests.Session()
            s.auth = self._vrt.api_key()
            s.headers.update({"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "gpuplan"})
            self._http = s
        return self._http

    def _call(self, method: str, path: str, body: Mapping | None = None) -> dict:
        from gpuplan.providers.sakura import send

        data = json.dumps(body, ensure_ascii=False).encode() if body is not None else None
        status, payload = send(self._session(), method, f"{self.base_url()}/{path}", data=data, retry_on=(429, 503),
                               retries=self.retries, retry_base_s=self.retry_base_s, sleep=self.sleep,
                               unreachable_as=f"sakura DOK: cannot reach {self.base_url()} ({{why}}); check the network")
        if status < 300:
            return payload if isinstance(payload, dict) else {"results": payload}
        detail = (payload.get("detail") or payload.get("error_msg") or "") if isinstance(payload, dict) else ""
        where = f"sakura DOK: {method} /{path.split('?')[0]} failed: HTTP {status}" + (f" {detail}" if detail else "")
        if status in (401, 403):
            if "not running" in str(detail).lower():
                raise _Conflict(where)
            raise AuthMissing(f"{where}; check the API key, that it may use 高火力 DOK, and that the DOK terms "
                              "were accepted once (control panel)")
        if status == 409 or "not running" in str(detail).lower():
            raise _Conflict(where)
        if status == 404:
            raise _Gone(where)
        raise ProviderError(where)

    # --- tasks --------------------------------------------------------------------------

    def submit(self, name: str, image: str, plan: str, command: Sequence[str] = (), *,
               entrypoint: Sequence[str] = (), environment: Mapping[str, str] | None = None,
               tags: Sequence[str] = (), time_limit_s: int | None = None, registry: str | None = None) -> DokTask:
        """Queue one task. Bad input is refused before the API is asked."""
        env = check_task_input(plan, image, environment, time_limit_s)
        body = {
            "name": name, "tags": list(tags),
            "containers": [{"image": image, "registry": registry, "command": list(command),
                            "entrypoint": list(entrypoint), "environment": env, "plan": plan}],
        }
        if time_limit_s is not None:
            body["execution_time_limit_sec"] = time_limit_s
        return _task(self._call("POST", "tasks/", body))

    def task(self, task_id: str) -> DokTask:
        return _task(self._call("GET", f"tasks/{task_id}/"))

    def tasks(self, tag: str | None = None) -> list[DokTask]:
        """Every task of the project (those carrying `tag` when given), page by page."""
        from urllib.parse import quote

        found: list[DokTask] = []
        page = 1
        while True:
            body = self._call("GET", f"tasks/?page={page}&page_size=100" + (f"&tag={quote(tag)}" if tag else ""))
            found += [_task(t) for t in body.get("results") or []]
            if page >= int((body.get("meta") or {}).get("total_pages") or 1):
                return [t for t in found if tag is None or tag in t.tags]
            page += 1

    def cancel(self, task_id: str) -> DokTask:
        """Stop a waiting or running task; one already finished is left as it is."""
        try:
            self._call("POST", f"tasks/{task_id}/cancel/")
        except _Conflict:
            pass
        return self.task(task_id)

    def logs(self, task_id: str, *, follow: bool = False, container: int = 0, idle_s: float = 2.0) -> Iterator[str]:
        """The task's output as its log stream sends it. A waiting task is waited for when
        `follow`; without `follow` the stream is read until it is quiet for `idle_s`; with it,
        until the task ends (the server closes the stream). A task that is not running has no
        stream: its output is in its artifact, if it wrote one."""
        from gpuplan.providers import wsread

        task = self.task(task_id)
        while follow and task.status == "waiting":
            self.sleep(self.poll_s)
            task = self.task(task_id)
        if task.status != "running":
            raise UsageError(f"sakura DOK: task {task.name} is {task.status}: its log streams only while it runs"
                             + (" (`--follow` waits for it to start)" if task.status == "waiting" else
                                "; what it wrote to SAKURA_ARTIFACT_DIR is in its artifact"))
        try:
            stream = self._call("POST", f"tasks/{task_id}/containers/{container}/stream/")
        except _Conflict:  # it ended between the two calls
            raise UsageError(f"sakura DOK: task {task.name} ended before its log could be read; its artifact "
                             "holds what it wrote to SAKURA_ARTIFACT_DIR") from None
        if not stream.get("url"):
            raise ProviderError(f"sakura DOK: no log stream address for task {task.name}")
        headers = {"Authorization": f"Bearer {stream['token']}"} if stream.get("token") else {}
        yield from wsread.messages(str(stream["url"]), headers, idle_s=None if follow else idle_s)

    def wait(self, task_ids: Sequence[str], timeout_s: float) -> list[DokTask]:
        """Poll until every task has finished (in the order given); raise after `timeout_s`."""
        deadline = self.clock() + timeout_s
        while True:
            now = [self.task(t) for t in task_ids]
            if all(t.finished for t in now):
                return now
            if self.clock() >= deadline:
                left = ", ".join(f"{t.name} {t.status}" for t in now if not t.finished)
                raise ProviderError(f"sakura DOK: tasks not finished after {timeout_s:.0f} s ({left}); "
                                    "they keep running: cancel them or wait longer")
            self.sleep(self.poll_s)

    def download_artifact(self, task: DokTask, dest: Path) -> Path:
        """Fetch the task's artifact (its SAKURA_ARTIFACT_DIR as tar.gz) into `dest`."""
        if task.artifact_id is None:
            raise UsageError(f"sakura DOK: task {task.name} ({task.status}) has no artifact"
                             + ("" if task.finished else " yet: it has not finished"))
        url = self._call("GET", f"artifacts/{task.artifact_id}/download/").get("url")
        if not url:
            raise ProviderError(f"sakura DOK: no download URL for the artifact of {task.name}")
        import requests

        dest.parent.mkdir(parents=True, exist_ok=True)
        try:  # streamed to the file: an artifact may hold up to 20 GB
            with requests.get(url, timeout=600, stream=True) as r:
                if r.status_code != 200:
                    raise ProviderError(f"sakura DOK: artifact download of {task.name} failed: HTTP {r.status_code} "
                                        "(links last 72 hours after the task ends)")
                with dest.open("wb") as f:
                    for chunk in r.iter_content(chunk_size=1 << 20):
                        f.write(chunk)
        except requests.RequestException as exc:
            dest.unlink(missing_ok=True)
            raise ProviderError(f"sakura DOK: cannot download the artifact of {task.name} "
                                f"({exc.__class__.__name__})") from exc
        return dest


class _Conflict(ProviderError):
    """409: e.g. cancelling a task that has already finished."""


class _Gone(ProviderError):
    """404."""
