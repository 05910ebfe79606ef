"""The cloud's interruption notice (issue 35): on an AWS cluster every node watches its own
instance metadata (IMDSv2: a session token, then spot/instance-action); the node announced is
drained (set aside, its running items told to stop with SIGTERM), its items run again elsewhere
from their checkpoints, not counted as failures, and `run --recover` buys a replacement at once.

The cloud is moto in server mode, reached by gpuplan's own AWS provider (boto3): `provision
--spot` makes spot instances there, the replacement is asked for there (spot first, then, its
spot request refused for capacity, on-demand), and `teardown` removes them there. moto's
instances cannot run anything, so the machines behind them are loopback sshd hosts: the test's
provider hands out each instance moto made with a loopback host's address and host key (its
login user root, and the cluster's key authorized there). Real Ray runs on those hosts, each with
a loopback stand-in of its instance metadata service (the node's AWS_EC2_METADATA_SERVICE_ENDPOINT,
as the AWS SDKs read it). The notice is given once items run on the second node."""

from __future__ import annotations

import json
import shlex
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytestmark = pytest.mark.sshd
CLUSTER = "spotty"
# Up to 60 steps of 0.5 s, each written to the checkpoint (the notice is looked for every 5 s);
# says where it began. Each step is written to a temporary file and renamed, as a job must: the
# folder is sent to the head as it is at that moment, and a step file caught empty mid-write came
# back as an empty start (run 54c: the resumed item read "", its loop ended at once). The steps
# stop early once the file HURRY exists: the test makes it when the replacement runs an item, as
# everything the test looks at has happened by then (it saves the 30 s the items had left).
ITEM = ('f="$GPUPLAN_CHECKPOINT_DIR/step"; s=$(cat "$f" 2>/dev/null || echo 0); start=$s; '
        'while [ "$s" -lt 60 ] && [ ! -e HURRY ]; do s=$((s+1)); echo $s > "$f.tmp"; mv "$f.tmp" "$f"; sleep 0.5; done; '
        'echo "{item} $GPUPLAN_NODE from $start" > {out}/result')


class Metadata(ThreadingHTTPServer):
    """One node's instance metadata service: tokens for PUT /latest/api/token; the spot notice
    404 until `announce()`, and only with a token it gave."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.notice: dict | None = None
        self.tokens: set[str] = set()
        self.asked = 0
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def announce(self) -> None:
        self.notice = {"action": "terminate", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))}


class _Handler(BaseHTTPRequestHandler):
    server: Metadata

    def log_message(self, *args) -> None:
        pass

    def do_PUT(self) -> None:
        if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self.send_error(400)
            return
        token = f"t{len(self.server.tokens)}"
        self.server.tokens.add(token)
        self._send(200, token.encode())

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") not in self.server.tokens:
            self.send_error(401)  # IMDSv2 only: no token, no answer
            return
        self.server.asked += 1
        if self.path == "/latest/meta-data/spot/instance-action" and self.server.notice:
            self._send(200, json.dumps(self.server.notice).encode())
        else:
            self.send_error(404)

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def loopback_aws(hosts, spot_capacity: dict):
    """A factory for gpuplan's AWS provider, talking to moto, whose machines are `hosts`: the n-th
    instance that comes up gets the n-th host's address and host key; the cluster's login key is
    authorized on every host. With spot_capacity["gone"] set, a spot RunInstances is refused as
    AWS refuses it when spot capacity is gone."""
    from botocore.exceptions import ClientError

    from support.aws_moto import loopback_aws_class

    class LoopbackAws(loopback_aws_class(hosts)):
        def client(self, service, region):
            made = (service, region) in self._clients
            c = super().client(service, region)
            if service == "ec2" and not made:
                c.meta.events.register("before-parameter-build.ec2.RunInstances", refuse_spot)
            return c

    def refuse_spot(params, **_):
        if spot_capacity.get("gone") and params.get("InstanceMarketOptions"):
            raise ClientError({"Error": {"Code": "InsufficientInstanceCapacity", "Message":
                               "There is no Spot capacity available that matches your request."}}, "RunInstances")

    return LoopbackAws


def test_on_moto_a_notice_drains_the_node_its_items_finish_from_checkpoints_and_a_replacement_joins(
        tmp_path, moto_aws, gpuplan_home, monkeypatch, cli):
    import yaml

    from gpuplan import paths
    from gpuplan.fleet import provider as registry
    from gpuplan.store.state import State
    from support.ray_env import free_port_range, ray_venv, stop_ray
    from support.sshd import start_hosts, stop_hosts

    monkeypatch.setenv("GPUPLAN_RAY_VENV", str(ray_venv()))
    port = free_port_range(4)
    monkeypatch.setenv("GPUPLAN_RAY_PORT", str(port))
    monkeypatch.setenv("GPUPLAN_RAY_OBJECT_STORE_MB", "80")
    monkeypatch.setenv("GPUPLAN_POLL_S", "0.3")
    monkeypatch.setenv("COLUMNS", "250")
    servers = [Metadata(), Metadata(), Metadata()]
    hosts = start_hosts(3, tmp_path, host_env=[{"AWS_EC2_METADATA_SERVICE_ENDPOINT": s.url} for s in servers])
    spot_capacity: dict = {}
    registry.override("aws", loopback_aws(hosts, spot_capacity))
    try:
        paths.config_dir().mkdir(parents=True, exist_ok=True)
        (paths.config_dir() / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": {
            "ami": moto_aws.ami, "quota_vcpus": "64", "ssh_cidr": "198.51.100.7", "poll_s": "0.01"}}}))
        r = cli("provision", "--yes", "aws:g4dn.xlarge", "x2", "--spot", "--name", CLUSTER, "--no-bootstrap")
        assert r.code == 0, r.err
        ec2 = moto_aws.ec2()
        live = [i for res in ec2.describe_instances()["Reservations"] for i in res["Instances"]]
        assert [i.get("InstanceLifecycle") for i in live] == ["spot", "spot"]

        hurry = tmp_path / "hurry"

        def stepped(host) -> bool:  # an item has run a step on this host
            return any(p.read_text().strip() not in ("", "0")
                       for p in (host.fake_root / "root/.gpuplan/jobs").glob("*/checkpoints/*/step"))

        def announce_once_items_run_there() -> None:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not stepped(hosts[1]):
                time.sleep(0.2)
            spot_capacity["gone"] = True  # the region's spot capacity goes with it
            servers[1].announce()
            while time.monotonic() < deadline and not stepped(hosts[2]):  # the replacement's host
                time.sleep(0.2)
            hurry.touch()

        watcher = threading.Thread(target=announce_once_items_run_there, daemon=True)
        watcher.start()
        (tmp_path / "items.txt").write_text("a\nb\nc\nd\n")
        r = cli("run", CLUSTER, "--items", str(tmp_path / "items.txt"), "--checkpoint-every", "2s", "--recover",
                "--on-demand-fallback", "-y", "--", "sh", "-c", ITEM.replace("HURRY", shlex.quote(str(hurry))))
        watcher.join(1)
        assert r.code == 0, r.out + r.err
        assert "4 ok of 4 items" in " ".join(r.out.split())
        err = " ".join(r.err.split())
        assert f"{CLUSTER}-1 is being taken back by the cloud" in err, err
        assert "a replacement, 1x aws:g4dn.xlarge (spot), costs" in err and "trying on-demand" in err, err
        assert "a replacement, 1x aws:g4dn.xlarge, costs" in err, err
        assert f"{CLUSTER}-3 joined the batch in place of {CLUSTER}-1" in err, err
        out = " ".join(r.out.split())  # the end line: what the interruption cost
        assert "interrupted: 1 node taken back by the cloud" in out and "item-seconds redone" in out, out

        state = State(paths.state_db())
        [job] = state.jobs(CLUSTER)
        [q] = state.job_quarantines(job.id)
        assert (q.node, q.code) == (f"{CLUSTER}-1", "interrupted") and "terminate" in q.reason
        items = state.job_items(job.id)
        assert {it.status for it in items} == {"ok"}
        # nothing ended on the node taken back; the replacement ran items of the batch
        assert f"{CLUSTER}-1" not in {it.node for it in items} and f"{CLUSTER}-3" in {it.node for it in items}
        results = sorted(p.read_text().split() for h in hosts
                         for p in (h.fake_root / "root/.gpuplan/jobs" / job.id / "out").glob("*/result"))
        assert len(results) == 4 and [res for res in results if res[3] != "0"], results  # resumed from checkpoints
        assert servers[0].asked > 0 and servers[0].notice is None  # the head watched too, and stayed
        # the replacement: the spot request refused (its node failed, nothing made), then on-demand in moto,
        # billed at the on-demand price
        status = {n.name: n.status for n in state.nodes(CLUSTER)}
        assert status == {f"{CLUSTER}-0": "running", f"{CLUSTER}-1": "lost", f"{CLUSTER}-2": "failed",
                          f"{CLUSTER}-3": "running"}
        live = {next(t["Value"] for t in i["Tags"] if t["Key"] == "gpuplan-node"): i
                for res in ec2.describe_instances()["Reservations"] for i in res["Instances"]}
        assert sorted(live) == [f"{CLUSTER}-0", f"{CLUSTER}-1", f"{CLUSTER}-3"]
        assert live[f"{CLUSTER}-3"].get("InstanceLifecycle") is None  # on-demand
        prices = {row["node"]: row["price_jpy_per_hour"] for row in state.ledger_rows() if row["cluster"] == CLUSTER}
        assert prices[f"{CLUSTER}-3"] > prices[f"{CLUSTER}-0"] == prices[f"{CLUSTER}-1"]
        state.close()

        r = cli("cost-report")  # the ledger's account shows it too
        assert r.code == 0, r.err
        report = " ".join(r.out.split())
        assert f"{CLUSTER} {job.id} interrupted: 1 node taken back by the cloud" in report, report
        r = cli("teardown", "--yes", CLUSTER)
        assert r.code == 0, r.err
        assert moto_aws.held() == {}
    finally:
        registry.override("aws", None)
        stop_ray(f"{CLUSTER}-", port, 4)
        stop_hosts(hosts)
        for s in servers:
            s.shutdown()
