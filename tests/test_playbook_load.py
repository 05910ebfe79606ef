"""Playbook files and rendering, without any host: checks and actions run in a local bash."""

from __future__ import annotations

import os
import subprocess

import pytest

from gpuplan.errors import NotFound, UsageError
from gpuplan.hosts import playbook

NOUVEAU = "blacklist nouveau\nblacklist lbm-nouveau\noptions nouveau modeset=0\nalias nouveau off\nalias lbm-nouveau off\n"


def local(body: str, root, home, strict=True, **params) -> subprocess.CompletedProcess:
    """Run one rendered step script in a local bash with `root` as the system root."""
    merged = playbook.merged_params([playbook.load(n) for n in playbook.available()], {"root": str(root), **params})
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    return subprocess.run(["bash", "-s"], input=playbook.render(body, merged, strict), env=env, text=True,
                          capture_output=True)


def step(pb: str, name: str) -> playbook.Step:
    return next(s for s in playbook.load(pb).steps if s.name == name)


def test_every_builtin_playbook_loads_with_checks():
    names = playbook.available()
    assert {"gpu-driver", "cuda", "cudnn", "nccl", "openmpi-cuda", "docker-gpu", "cluster-network", "verify"} <= set(names)
    for n in names:
        pb = playbook.load(n)
        assert pb.steps and pb.description
        for s in pb.steps:
            assert s.always or s.check or s.only_if, f"{n}/{s.name}"
    reboots = [s.name for s in playbook.load("gpu-driver").steps if s.reboot]
    assert reboots == ["unload-nouveau", "load-driver"]


def test_nouveau_blacklist_has_exactly_report_a_lines_and_check_flips(tmp_path, monkeypatch):
    root = tmp_path / "root"
    s = step("gpu-driver", "blacklist-nouveau")
    assert local(s.check, root, tmp_path, strict=False).returncode != 0
    # a stand-in update-initramfs that leaves a mark
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "update-initramfs").write_text("#!/bin/sh\ntouch \"$0.ran\"\n")
    (stub / "update-initramfs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub}:{os.environ['PATH']}")
    r = local(s.action, root, tmp_path)
    assert r.returncode == 0, r.stderr
    assert (root / "etc/modprobe.d/blacklist-nouveau.conf").read_text() == NOUVEAU
    assert (stub / "update-initramfs.ran").exists()
    assert local(s.check, root, tmp_path, strict=False).returncode == 0
    (root / "etc/modprobe.d/blacklist-nouveau.conf").write_text("blacklist nouveau\n")
    assert local(s.check, root, tmp_path, strict=False).returncode != 0


def test_cuda_env_goes_at_the_top_of_bashrc_and_replaces_an_old_version(tmp_path):
    bashrc = tmp_path / ".bashrc"
    bashrc.write_text("case $- in\n  *i*) ;;\n  *) return;;\nesac\n")
    s = step("cuda", "bashrc-env")
    assert not s.sudo
    assert local(s.action, tmp_path, tmp_path, cuda_version="12.4").returncode == 0
    assert local(s.action, tmp_path, tmp_path, cuda_version="12.6").returncode == 0
    lines = bashrc.read_text().splitlines()
    assert lines[:4] == [
        "# >>> gpuplan cuda >>>",
        "export PATH=/usr/local/cuda-12.6/bin:$PATH",
        "export LD_LIBRARY_PATH=/usr/local/cuda-12.6/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
        "# <<< gpuplan cuda <<<",
    ]
    assert "cuda-12.4" not in bashrc.read_text() and lines[4] == "case $- in"
    assert local(s.check, tmp_path, tmp_path, strict=False, cuda_version="12.6").returncode == 0
    assert local(s.check, tmp_path, tmp_path, strict=False, cuda_version="12.8").returncode != 0
    # a non-interactive bash that sources it gets nvcc's directory on PATH before the early return
    out = subprocess.run(["bash", "-c", f". {bashrc}; echo $PATH"], capture_output=True, text=True).stdout
    assert out.startswith("/usr/local/cuda-12.6/bin:")


def test_params_are_double_quoted_so_only_dollar_expands(tmp_path):
    r = local('echo "$cuda_version|$nccl_version"', tmp_path, tmp_path,
              cuda_version='12.6"; touch pwned; echo "`id`', nccl_version="$HOME")
    assert r.returncode == 0
    assert r.stdout.strip() == f'12.6"; touch pwned; echo "`id`|{tmp_path}'
    assert not (tmp_path / "pwned").exists()


def test_ubuntu_release_and_repo_come_from_os_release(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text('ID=ubuntu\nVERSION_ID="22.04"\n')
    r = local('echo "$nvidia_repo $cuda_dash $cuda_major"', tmp_path, tmp_path, cuda_version="12.8")
    assert r.stdout.strip() == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64 12-8 12"


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"name": "x", "steps": [{"name": "a", "action": "true"}]}, "needs a check"),
        ({"name": "x", "steps": [{"name": "a", "check": "true", "action": "x", "reboot_after": True}]}, "unknown key(s) reboot_after"),
        ({"name": "x", "steps": [{"name": "a", "check": "true"}]}, "exactly one of action"),
        ({"name": "x", "steps": [{"name": "a", "check": "t", "script": "nope.sh"}]}, "script 'nope.sh' not found"),
        ({"name": "x", "steps": [{"name": "a", "check": "t", "action": "t", "timeout_s": "soon"}]}, "timeout_s must be whole seconds"),
        ({"name": "x", "steps": [{"name": "a", "check": "t", "action": "t"}, {"name": "a", "check": "t", "action": "t"}]}, "unique"),
        ({"name": "x", "steps": []}, "non-empty list of steps"),
        ({"name": "x", "stepz": []}, "unknown key(s) stepz"),
    ],
)
def test_malformed_playbooks_get_one_line_naming_the_problem(doc, message):
    with pytest.raises(UsageError) as info:
        playbook.parse(doc, "my.yaml")
    assert message in str(info.value) and str(info.value).startswith("my.yaml")
    assert "\n" not in str(info.value)


def test_playbook_file_by_path_and_unknown_names(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\ndescription: d\nparams: {greeting: hi}\nsteps:\n  - {name: s, check: 'false', action: 'echo $greeting'}\n")
    pb = playbook.load(str(f))
    assert pb.params == {"greeting": "hi"} and pb.steps[0].sudo
    with pytest.raises(NotFound, match="no playbook named 'cudaa'; known: cluster-network, cuda"):
        playbook.load("cudaa")
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    with pytest.raises(UsageError, match="not valid YAML"):
        playbook.load(str(tmp_path / "bad.yaml"))


def test_params_parsing_and_unknown_params():
    assert playbook.parse_params(["cuda_version=12.8", "root=$X"]) == {"cuda_version": "12.8", "root": "$X"}
    with pytest.raises(UsageError, match="use NAME=VALUE"):
        playbook.parse_params(["cuda_version"])
    with pytest.raises(UsageError, match="unknown parameter.*cuda_verison"):
        playbook.merged_params([playbook.load("cuda")], {"cuda_verison": "12.8"})


def test_dry_run_renders_commands_without_connecting():
    from gpuplan.hosts.remote import Host

    hosts = [Host("a", "192.0.2.1"), Host("b", "192.0.2.2")]  # TEST-NET: nothing answers
    r = playbook.run_playbooks(hosts, [playbook.load("gpu-driver"), playbook.load("nccl")], {"nccl_version": "2.23.4-1+cuda12.6"}, dry_run=True)
    assert r.dry_run and r.ok
    assert all(s.status == "dry-run" for h in r.hosts for s in h.steps)
    assert "'blacklist lbm-nouveau'" in r.scripts["gpu-driver/blacklist-nouveau action"]
    assert r.scripts["gpu-driver/unload-nouveau action"].endswith("# then wait for the reboot")
    assert r.params["nccl_version"] == "2.23.4-1+cuda12.6"


def test_a_failed_step_is_told_by_its_last_error_line():
    """The line of a failed remote step is the output's last line naming an error (issue 33: a
    flattened traceback came back as one "line" holding \\x0a); the rest stays for --debug."""
    from gpuplan.hosts.remote import Result

    traceback_out = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n    start()\n"
                     "ConnectionError: Failed to connect to GCS at 10.0.0.1:6379\n\nPlease check the logs.\n")
    assert Result(1, traceback_out, "", 0.1).why() == "ConnectionError: Failed to connect to GCS at 10.0.0.1:6379"
    apt = "Reading package lists...\nE: Unable to locate package cuda-toolkit-12-9\n"
    assert Result(100, "", apt, 0.1).why() == "E: Unable to locate package cuda-toolkit-12-9"
    assert Result(3, "step one\nstep two\n", "", 0.1).why() == "step two"  # nothing names an error: the last line
    assert Result(1, "", "", 0.1).why() == "no output"
