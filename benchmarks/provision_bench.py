"""Provisioning concurrency on AWS, against moto: does creating 16 machines take less than
twice as long as creating 1?

    .venv/bin/python benchmarks/provision_bench.py [--repeat 3] [--latency-ms 100]

Each run wipes moto, registers an AMI, then times `create()` + `wait_ready()` (which includes
reading each node's host key from its console output) of the AWS provider for 1 node and for
16 nodes (median of --repeat runs each) and prints both figures and their ratio. moto runs as
its own process, so the emulator's work does not share this process's interpreter lock with the
provider's launch threads.

Two settings are measured:
- raw moto: every call costs only moto's own CPU (milliseconds). moto handles RunInstances
  largely one at a time, so 16 launches cost about 16 times one launch however they are
  issued; this setting cannot tell concurrent from serial launching (the serial row shows it).
- simulated API latency (--latency-ms, default 100, an assumption, not a measured EC2 figure):
  every AWS call first sleeps that long in the calling thread (a botocore before-send hook), as
  a network round trip and the API's own processing would. This is what concurrency saves on a
  real cloud, and where the < 2x target applies. The serial row (max_workers=1) shows what
  launching one at a time would cost under the same latency.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REGION = "us-east-1"
SIZE = "g4dn.xlarge"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str, str]:
    amis = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    amis.write("[]")
    amis.close()
    port = free_port()
    env = {**os.environ, "MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION": "true", "MOTO_ENABLE_AMI_VALIDATION": "true",
           "MOTO_ENABLE_KEYPAIR_VALIDATION": "true", "MOTO_AMIS_PATH": amis.name}
    # moto's server with the console output a real instance has (cloud-init's host key block,
    # which wait_ready reads): tests/support/aws_moto.py
    serve = f"import sys; sys.path.insert(0, 'tests'); from support.aws_moto import serve; serve({port})"
    proc = subprocess.Popen([sys.executable, "-c", serve], env=env, cwd=Path(__file__).resolve().parents[1],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    import requests

    while True:
        try:
            requests.get(url + "/moto-api/", timeout=1)
            return proc, url, amis.name
        except requests.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit("moto_server did not start") from None
            time.sleep(0.1)


def one_run(url: str, count: int, latency_s: float, workers: int = 16) -> float:
    import boto3
    import requests

    from gpuplan.fleet.provider import NodeSpec
    from gpuplan.providers.aws import AwsProvider

    requests.post(url + "/moto-api/reset", timeout=30).raise_for_status()
    ami = boto3.client("ec2", region_name=REGION, endpoint_url=url).register_image(
        Name="bench-ubuntu", RootDeviceName="/dev/sda1", Architecture="x86_64", VirtualizationType="hvm",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 8}}])["ImageId"]
    prov = AwsProvider({"ami": ami, "quota_vcpus": str(8 * count), "poll_s": "0.05", "max_workers": str(workers)})
    if latency_s:
        for service in ("ec2", "service-quotas"):
            prov.client(service, REGION).meta.events.register("before-send", lambda **_: time.sleep(latency_s))
    else:  # build the clients outside the timed part either way
        prov.client("ec2", REGION), prov.client("service-quotas", REGION)
    names = [f"bench-{i}" for i in range(count)]
    spec = NodeSpec(cluster="bench", size=SIZE, region=REGION, ssh_user="ubuntu",
                    ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBu7cm5mXsN0MhGm2oJqkT8bYb5tQ0T3Ck0lF3o9v2Jt b",
                    ttl_s=3600, tags={"gpuplan-cluster": "bench", "gpuplan-owner": "bench"}, ssh_cidr="203.0.113.5/32")
    t0 = time.perf_counter()
    made = prov.create(spec, names)
    ready = prov.wait_ready(REGION, [i.id for i in made], timeout_s=60)
    elapsed = time.perf_counter() - t0
    assert len(ready) == count and all(i.public_ip for i in ready), "not every machine came up"
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=100.0, help="simulated round trip added to every AWS call")
    args = ap.parse_args()
    proc, url, amis = start_moto()
    os.environ.update(AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION=REGION, AWS_EC2_METADATA_DISABLED="true")
    os.environ.pop("AWS_PROFILE", None)
    latency = args.latency_ms / 1000
    rows = []
    try:
        one_run(url, 1, 0)  # warm-up: imports, models, moto's first requests
        for label, lat in (("raw moto", 0.0), (f"{args.latency_ms:.0f} ms simulated API latency", latency)):
            t1 = [one_run(url, 1, lat) for _ in range(args.repeat)]
            t16 = [one_run(url, 16, lat) for _ in range(args.repeat)]
            serial = [one_run(url, 16, lat, workers=1) for _ in range(args.repeat)]
            rows.append((label, t1, t16, serial))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        os.unlink(amis)
    print(f"AWS provider against moto_server: create() + wait_ready() of {SIZE}, median of {args.repeat} runs")
    for label, t1, t16, serial in rows:
        m1, m16, ms = statistics.median(t1), statistics.median(t16), statistics.median(serial)
        print(f"{label}:")
        print(f"  1 machine:              {m1 * 1000:8.1f} ms   (runs: {', '.join(f'{t * 1000:.0f}' for t in t1)})")
        print(f"  16 machines:            {m16 * 1000:8.1f} ms   (runs: {', '.join(f'{t * 1000:.0f}' for t in t16)})")
        print(f"  16 machines, serial:    {ms * 1000:8.1f} ms   (max_workers=1, for comparison)")
        print(f"  ratio 16/1:             {m16 / m1:8.2f}   (target < 2.00: {'met' if m16 / m1 < 2 else 'NOT met'})")


if __name__ == "__main__":
    main()
