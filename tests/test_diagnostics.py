"""Why a cloud or a host could not be reached, told apart (DNS, refused, timed out) and said
once; `check` makes one authenticated call; a dead owned host does not stop a sweep."""

from __future__ import annotations

import socket
import time

import pytest
import yaml

from gpuplan.errors import unreachable


def test_unreachable_names_the_failure_through_wrapped_exceptions():
    try:
        try:
            raise socket.gaierror(-2, "Name or service not known")
        except OSError as inner:
            raise RuntimeError("wrapper") from inner
    except RuntimeError as outer:
        assert "DNS" in unreachable(outer)
    assert "refused" in unreachable(ConnectionRefusedError(111, "Connection refused"))
    assert "timed out" in unreachable(TimeoutError("timed out"))
    assert unreachable(ValueError("an answer came back")) is None


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def aws_env(gpuplan_home, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    return monkeypatch


def test_check_aws_with_nothing_listening_says_refused_once(aws_env, cli):
    aws_env.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
    r = cli("check", "aws", "--region", "us-east-1")
    assert r.code == 2
    lines = [ln for ln in (r.out + r.err).splitlines() if "refused" in ln]
    assert len(lines) == 1 and "connection was refused" in lines[0], r.out + r.err
    assert "credentials" not in lines[0].split("refused")[0].lower() or "cannot reach AWS" in lines[0]
    assert "Traceback" not in r.err


def test_check_aws_with_an_unknown_host_says_dns(aws_env, cli):
    aws_env.setenv("AWS_ENDPOINT_URL", "http://gpuplan-no-such-host.invalid:5000")
    r = cli("check", "aws", "--region", "us-east-1")
    assert r.code == 2
    assert "cannot resolve the host name (DNS)" in r.out and "refused the credentials" not in r.out


def test_check_sakura_with_a_refused_key_says_so_once(monkeypatch, gpuplan_home, cli):
    from support.sakura_fake import SakuraFake

    fake = SakuraFake()
    root = fake.start()
    try:
        for k, v in fake.env(root).items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("SAKURACLOUD_ACCESS_TOKEN_SECRET", "wrong")
        r = cli("check", "sakura")
        assert r.code == 2
        lines = [ln for ln in r.out.splitlines() if "HTTP 401" in ln]
        assert len(lines) == 1, r.out
    finally:
        fake.stop()


def test_check_azure_tells_a_refused_token_from_no_network(gpuplan_home, cli, monkeypatch):
    from azure.core.exceptions import ClientAuthenticationError

    from gpuplan.fleet import provider as registry
    from gpuplan.providers.azure import AzureProvider
    from support.azure_fake import FakeARM

    class Refusing:
        def get_token(self, *scopes, **kw):
            raise ClientAuthenticationError("AADSTS7000215: Invalid client secret provided.")

    class NoNetwork:
        def get_token(self, *scopes, **kw):
            raise ClientAuthenticationError("token request failed") from socket.gaierror(-3, "Temporary failure in "
                                                                                          "name resolution")

    fake = FakeARM()
    for credential, said in ((Refusing(), "Azure refused the credentials"), (NoNetwork(), "(DNS)")):
        registry.override("azure", lambda conf, c=credential: AzureProvider(
            {"subscription_id": fake.subscription, **conf}, credential=c, transport=fake.transport(),
            polling_interval=0, retry_total=0))
        try:
            t = time.monotonic()
            r = cli("check", "azure")
        finally:
            registry.override("azure", None)
        assert r.code == 2 and time.monotonic() - t < 10
        assert sum(said in ln for ln in r.out.splitlines()) == 1, r.out
        assert "Traceback" not in r.err and r.err.count("\n") <= 1


@pytest.mark.sshd
def test_a_sweep_goes_on_past_a_dead_owned_host_and_names_it(tmp_path, gpuplan_home, cli):
    from support.sshd import start_hosts, stop_hosts

    hosts = start_hosts(2, tmp_path)
    try:
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(yaml.safe_dump({"defaults": {"user": "root", "key": str(hosts[0].client_key_path)},
                                             "hosts": [{"name": h.name, "address": h.host, "port": h.port,
                                                        "host_key": h.host_public_key,
                                                        "gpus": {"model": "Tesla T4", "count": 1}, "group": "t4"}
                                                       for h in hosts]}))
        (gpuplan_home / "config").mkdir(parents=True, exist_ok=True)
        (gpuplan_home / "config" / "config.yaml").write_text(yaml.safe_dump(
            {"providers": {"baremetal": {"inventory": str(inventory)}}}))
        hosts[1].stop()
        r = cli("teardown", "--sweep", "--force", "--provider", "baremetal", "--yes")
        assert r.code == 0, r.err
        assert f"not reached: bare-metal host {hosts[1].name}" in r.out
        assert "refused" in r.out  # why, in words
    finally:
        stop_hosts(hosts)
