"""Every example line of the README (its Examples block) and of docs/demo.md (the session on the
demo hosts) runs as written and does what the text says; the README stays short, shows the
Quickstart's estimate as it prints, and its links and the docs' links lead somewhere.

Nothing here reaches a network or creates a billed resource: what would create something is
written with --dry-run in the README itself; `check aws` and the sweep read moto in server mode;
`catalog refresh` reads the recorded price pages; the cluster commands (bootstrap, ssh, run,
teardown) work on `demo`, two loopback sshd hosts in the bare-metal inventory, with the stand-in
GPU tools (bootstrap with
`--param root=$GPUPLAN_FAKE_ROOT`, so that its files land in each host's fake root)."""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest
import yaml
from test_baremetal_provider import write_inventory

from gpuplan.market import catalog_refresh
from support.price_sources_fake import PriceSources
from support.sshd import start_hosts, stop_hosts

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DEMO_DOC = ROOT / "docs" / "demo.md"
COMMANDS_DOC = ROOT / "docs" / "commands.md"


def example_lines(path: Path = README, heading: str = "## Examples") -> list[tuple[str, str]]:
    """(command, comment) for each line of the first console block under `heading`: the comment
    says what a line needs beyond the Quickstart's install ("needs gpuplan[plot]"), or is empty.
    scripts/fresh_install_examples.sh reads the README's block the same way."""
    text = path.read_text(encoding="utf-8")
    block = re.search(rf"^{re.escape(heading)}\n.*?```console\n(.*?)```", text, re.S | re.M)
    assert block, f"{path.name} has no {heading} section with a console block"
    out = []
    for line in block.group(1).splitlines():
        command, _, comment = line.partition(" #")
        if command.strip():
            out.append((command.strip(), comment.strip()))
    return out


def all_examples() -> list[str]:
    """The README's Examples, then the session on the demo hosts, in the order they run."""
    demo = example_lines(DEMO_DOC, "## A session on the demo hosts")
    return [command for command, _ in example_lines() + demo]


def test_what_an_example_needs_beyond_the_quickstart_is_said():
    """The Quickstart installs gpuplan alone: a README line that plots, uses a cloud's SDK,
    benchmarks or needs credentials says so (scripts/fresh_install_examples.sh runs the lines with no comment
    on a fresh install, where a sweep with no credentials exits 2)."""
    # (provision --dry-run runs without the provider's SDK: it names the missing extra in a note)
    for command, comment in example_lines():
        for word, extra in (("--plot", "gpuplan[plot]"), ("check aws", "gpuplan[aws]"), ("bench", "gpuplan[bench]"),
                            ("refresh", "network"), ("--sweep", "credentials")):
            if word in command:
                assert extra in comment, f"{command!r} needs {extra}: say so in its comment"
        assert "demo" not in command, f"{command!r} needs the demo hosts: it belongs in docs/demo.md"


def test_the_examples_cover_every_command():
    used = {shlex.split(line)[1] for line in all_examples()}
    table = set(re.findall(r"^\| `gpuplan ([a-z-]+)", COMMANDS_DOC.read_text(encoding="utf-8"), re.M))
    assert table and table <= used, f"commands in docs/commands.md's table without an example: {sorted(table - used)}"


def test_the_readme_is_short_and_its_quickstart_is_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150, "README.md is over 150 lines: move the detail into docs/"
    quickstart = re.search(r"^## Quickstart.*?```bash\n(.*?)```", text, re.S | re.M).group(1).splitlines()
    assert len(quickstart) == 2 and quickstart[1] == "bash scripts/test.sh"  # .ci/run runs the second
    # the venv is activated in the same line, so every example's bare `gpuplan` works as written (issue 46)
    assert quickstart[0].startswith("python3 -m venv .venv && . .venv/bin/activate && pip install -q . && gpuplan estimate ")
    # the demo line runs as written on a root machine (no sudo in front); the Ray download is said
    for doc in (text, DEMO_DOC.read_text(encoding="utf-8")):
        assert ".venv/bin/python scripts/demo.py" in doc and "sudo .venv" not in doc
        assert "380 MB" in doc


def test_the_readme_shows_the_quickstart_estimate_as_it_prints(cli):
    """The output under "## An estimate" is what the Quickstart's first command prints today (line
    breaks aside): after changing what estimate prints, paste its output there again."""
    text = README.read_text(encoding="utf-8")
    command = re.search(r"^## Quickstart.*?```bash\n(.*?)\n", text, re.S | re.M).group(1)
    args = shlex.split(command.split("&& gpuplan ")[1])
    shown = re.search(r"^## An estimate\n.*?```text\n(.*?)```", text, re.S | re.M).group(1)
    r = cli(*args)
    assert r.code == 0, r.err
    assert " ".join(shown.split()) == " ".join(r.out.split()), \
        f"README.md's estimate output is not what `gpuplan {' '.join(args)}` prints now; paste this:\n{r.out}"


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file (code blocks skipped)."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = "".join(c for c in heading.lower() if c.isalnum() or c in " -_").replace(" ", "-")
        out.add(slug)
    return out


def test_links_in_the_readme_and_docs_lead_somewhere():
    for doc in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            where = f"{doc.relative_to(ROOT)}: link {target}"
            assert path.exists(), f"{where}: no such file"
            if anchor and path.suffix == ".md":
                assert anchor in _anchors(path), f"{where}: no such heading in {path.name}"


@pytest.fixture
def world(moto_aws, gpuplan_home, tmp_path, monkeypatch):
    """A fresh home with AWS credentials for moto, today's price pages recorded, an inventory
    of two owned T4 hosts (loopback sshd), and a videos.txt in the working folder."""
    (gpuplan_home / "config").mkdir(parents=True)
    # moto's Service Quotas does not know EC2: the limit comes from config, as a user could set it
    (gpuplan_home / "config" / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": {"quota_vcpus": "64"}}}))
    fake = PriceSources()
    monkeypatch.setattr(catalog_refresh, "new_session", fake.session)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "videos.txt").write_text("clip-a.mp4\nclip-b.mp4\nclip-c.mp4\n")
    batch = re.search(r"^## Run it.*?```yaml\n(.*?)```", README.read_text(), re.S | re.M).group(1)
    (tmp_path / "batch.yaml").write_text(batch)  # the README's own batch file
    hosts = start_hosts(2, tmp_path / "hosts")
    inventory = write_inventory(gpuplan_home / "config" / "inventory.yaml", hosts)
    # Ray binds to the nodes' private addresses: on these loopback hosts, that is loopback
    inventory.write_text(re.sub(r"private_address: \S+", "private_address: 127.0.0.1", inventory.read_text()))
    # `gpuplan run` starts Ray on the hosts: the tests' Ray venv, ports of its own, a small object store
    from support.ray_env import free_port_range, ray_venv, stop_ray

    monkeypatch.setenv("GPUPLAN_RAY_VENV", str(ray_venv()))
    port = free_port_range(2)
    monkeypatch.setenv("GPUPLAN_RAY_PORT", str(port))
    monkeypatch.setenv("GPUPLAN_RAY_OBJECT_STORE_MB", "80")
    monkeypatch.setenv("GPUPLAN_POLL_S", "0.3")
    try:
        yield tmp_path
    finally:
        stop_ray("demo-", port, 2)
        stop_hosts(hosts)


def _run_each(lines: list[str], cli, capfd) -> dict[str, str]:
    """Each line run in order, as written; what it printed, by line."""
    ran = {}
    for line in lines:
        args = shlex.split(line)
        assert args[0] == "gpuplan", line
        if args[1] == "bootstrap" and "--param" not in args:
            # The loopback hosts are this machine: the playbooks' files go under each host's fake
            # root (the `root` parameter every playbook honours), never into this machine's /etc.
            args += ["--param", "root=$GPUPLAN_FAKE_ROOT"]
        capfd.readouterr()
        r = cli(*args[1:])
        assert r.code == 0, f"{line}\n{r.err}{r.out}"
        child = capfd.readouterr()  # what a child process (ssh) wrote to the terminal itself
        ran[line] = r.out + r.err + child.out + child.err
    return ran


def test_every_readme_example_runs(world, cli, capfd):
    ran = _run_each([command for command, _ in example_lines()], cli, capfd)
    # What each one is there to show, in a word.
    assert "4x Standard_NC6" in ran["gpuplan estimate --videos 4 --as-of 2017-08 --save plan.json"]
    assert (world / "plan.json").exists() and (world / "tradeoff.svg").read_text().startswith("<?xml")
    assert "using its successor azure:Standard_NC4as_T4_v3" in ran["gpuplan provision nc6 x4 --dry-run"]
    assert "would create cluster" in ran["gpuplan provision --plan plan.json --dry-run"]
    spot = ran["gpuplan provision aws:g4dn.xlarge x4 --region ap-northeast-1 --spot --ttl 4h --dry-run"]
    assert "spot at ¥" in spot and "TTL 4:00 h" in spot
    assert "would build image" in ran["gpuplan image build nc6 --dry-run"]
    launch = ran["gpuplan launch batch.yaml --dry-run"]
    assert "launch 3 items on" in launch and "max_yen ¥500" in launch and "dry run: nothing was created" in launch
    probe = ran["gpuplan probe batch.yaml --probe-budget 20 --dry-run"]
    assert "(the pick and the rivals whose yen range overlaps it)" in probe and "budget ¥20 (--probe-budget)" in probe
    assert "dry run: nothing was run" in probe
    assert "H100" in ran["gpuplan catalog --gpu h100"]
    assert "japaneast (azure): 6 rows added" in " ".join(
        ran["gpuplan catalog refresh --provider azure --region japaneast,japanwest --dry-run"].split())
    campaign = ran["gpuplan bench colorize --on aws:g5.xlarge,azure:NC4as_T4_v3 --dry-run"]
    assert "in all about ¥" in campaign and "dry run: nothing was provisioned" in campaign
    assert "aws" in ran["gpuplan check aws --region ap-northeast-1"] and "ready: aws" in \
        ran["gpuplan check aws --region ap-northeast-1"]


def test_every_line_of_the_demo_session_runs(world, cli, capfd):
    ran = _run_each([command for command, _ in example_lines(DEMO_DOC, "## A session on the demo hosts")], cli, capfd)
    assert "demo  2x baremetal:" in ran["gpuplan status demo"]
    assert "NVIDIA-SMI" in ran["gpuplan ssh demo -- nvidia-smi"] and "Tesla T4" in ran["gpuplan ssh demo -- nvidia-smi"]
    assert "3 ok of 3 items" in " ".join(ran["gpuplan run demo --items videos.txt -- echo {item}"].split())
    assert '"succeeded": 3' in ran["gpuplan jobs demo --format json"]
    assert ran["gpuplan logs demo demo-1 clip-a.mp4"].strip() == "clip-a.mp4"
    assert "job demo-2 cancelled" in ran["gpuplan cancel demo demo-2"]
    assert "job demo-3 submitted: 3 items" in ran["gpuplan run demo --resume demo-2 --detach"]
    assert "nothing of it is left" in ran["gpuplan teardown demo --yes"]
    from support.ray_env import tagged_pids

    # the owned hosts outlive the teardown; the Ray it started there does not (as in test_run_engine's
    # --down test, workers killed while they were still starting get a few seconds to be gone)
    deadline = time.monotonic() + 15
    while tagged_pids("demo-") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert tagged_pids("demo-") == []
