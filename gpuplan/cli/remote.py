"""`gpuplan bootstrap` (run setup playbooks on a cluster) and `gpuplan ssh` (log in to a node)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Annotated, Optional

import typer

from gpuplan.errors import NotFound, UsageError
from gpuplan.planning import fmt


def _consoles():
    from rich.console import Console

    return (Console(highlight=False, markup=False, soft_wrap=True),  # host names and steps print as written
            Console(stderr=True, highlight=False, markup=False, soft_wrap=True))


_STYLE = {"ran": "green", "skipped": "dim", "failed": "bold red", "n/a": "dim", "not-run": "dim", "dry-run": "cyan"}


def _cell(step):
    from rich.text import Text

    text = step.status
    if step.status == "ran":
        text = f"ran {fmt.duration(step.seconds)}"
    elif step.status == "failed":
        text = f"FAILED ({step.exit_code})" if step.exit_code is not None else "FAILED"
    return Text(text, _STYLE.get(step.status, ""))


def render_report(console, report) -> None:
    """A table with one row per playbook step and one column per host."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"bootstrap: {', '.join(report.playbooks)}", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, show_edge=False)
    table.add_column("step")
    for h in report.hosts:
        table.add_column(h.host)
    keys = []
    for h in report.hosts:
        for s in h.steps:
            if s.key not in keys:
                keys.append(s.key)
    cells = {(h.host, s.key): s for h in report.hosts for s in h.steps}
    for key in keys:
        table.add_row(key, *[_cell(cells[(h.host, key)]) if (h.host, key) in cells else "-" for h in report.hosts])
    table.add_row(Text("total", "bold"), *[Text(fmt.duration(h.seconds), "bold") for h in report.hosts])
    console.print(table)


def bootstrap(
    cluster: Annotated[Optional[str], typer.Argument(help="Cluster name (see `gpuplan status`).")] = None,
    playbook: Annotated[Optional[list[str]], typer.Option("--playbook", "-p", help="Playbook name or YAML file; repeat for several, run in order (default: gpu-driver, cuda, cudnn, nccl).", metavar="PLAYBOOK")] = None,
    param: Annotated[Optional[list[str]], typer.Option("--param", help="Override a playbook parameter: NAME=VALUE, e.g. cuda_version=12.8.", metavar="NAME=VALUE")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the check and action commands of every step; touch no host.")] = False,
    accept_host_key: Annotated[Optional[list[str]], typer.Option("--accept-host-key", help="Pin a host key a node offers after you checked its SHA256 fingerprint on the machine.", metavar="SHA256:...")] = None,
    list_playbooks: Annotated[bool, typer.Option("--list", help="List the built-in playbooks and exit.")] = False,
) -> None:
    """Run setup playbooks on every node of a cluster at once; steps already done are skipped."""
    from gpuplan.hosts import playbook as pb
    from gpuplan.store.state import State

    out, err = _consoles()
    if list_playbooks:
        for name in pb.available():
            from rich.text import Text

            out.print(Text.assemble((name, "bold"), f": {pb.load(name).description}"))
        return
    if cluster is None:
        raise UsageError("name the cluster to bootstrap (`gpuplan status` lists them), or --list for the playbooks")
    params = pb.parse_params(param or [])
    state = State.open_default()
    if dry_run:
        report = pb.bootstrap_cluster(state, cluster, playbook or None, params, dry_run=True)
        out.print(f"# dry run for {', '.join(h.host for h in report.hosts)}: nothing is run")
        out.print("# every script starts with these parameters and playbooks/steps/prelude.sh:")
        for k, v in sorted(report.params.items()):
            if not k.startswith("intra_key"):
                out.print(f"{k}={v!r}", markup=False)
        for key, script in report.scripts.items():
            out.print(f"\n# {key}", style="bold", markup=False)
            out.print(script, markup=False)
        return

    def progress(message: str) -> None:
        host, _, rest = message.partition(" ")
        style = "red" if "FAILED" in rest else "dim" if "already done" in rest or "n/a" in rest else ""
        from rich.text import Text

        err.print(Text.assemble((host, "bold"), " ", (rest, style)))

    from gpuplan.cli.tables import working

    try:
        with working(err, f"bootstrapping {cluster}",  # piped: the styled lines alone
                     lambda: [n.name for n in state.nodes(cluster)]) as step:
            report = pb.bootstrap_cluster(state, cluster, playbook or None, params,
                                          progress=step if err.is_terminal else progress,
                                          accept_host_keys=accept_host_key or ())
    except pb.BootstrapFailed as exc:
        render_report(out, exc.report)
        raise
    render_report(out, report)
    seconds = report.setup_seconds()
    if seconds is not None:
        out.print(f"setup took {seconds} s on the slowest node")


def _known_hosts_file(state) -> str:
    from gpuplan import paths

    path = paths.state_dir() / "known_hosts"
    paths.write_owner_only(path, "\n".join(state.known_hosts_lines()) + "\n")
    return str(path)


def ssh_argv(state, cluster: str, node: str | None, command: list[str], user_config: bool = False
             ) -> tuple[list[str], bool]:
    """The system ssh command line for a node (the cluster's key, pinned host keys only), and
    whether it runs a command (rather than a login shell). The user's ssh config and the
    system's known hosts are left out (-F /dev/null, GlobalKnownHostsFile=/dev/null): a Host *
    block there could switch host key checking off or point at another key. `user_config`
    reads the user's config (jump hosts, proxies); the pinned key still decides."""
    row = state.cluster(cluster)
    if row is None:
        raise NotFound(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    nodes = [n for n in state.nodes(cluster) if n.public_ip or n.private_ip]
    if not nodes:
        raise UsageError(f"cluster {cluster!r} has no node with an address; `gpuplan status {cluster}` shows them")
    names = {n.name: n for n in nodes}
    if node is not None and node not in names:
        # `gpuplan ssh demo -- uptime`: click hands the first word of the command over as NODE
        command = [node, *command]
        node = None
    target = names[node] if node else nodes[0]
    key = state.ssh_key(cluster)
    if key is None:
        raise UsageError(f"cluster {cluster!r} has no SSH key in the state")
    address = target.public_ip or target.private_ip
    if state.host_key(address, target.ssh_port) is None:
        raise UsageError(f"{target.name} has no pinned host key; run `gpuplan bootstrap {cluster} --accept-host-key SHA256:...` first")
    from gpuplan.hosts import remote

    remote.rotate_injected_host_keys(state, [remote.Host(target.name, address, target.ssh_port, row.ssh_user, key[0],
                                                         None, cluster)])
    argv = ["ssh", *([] if user_config else ["-F", "/dev/null"]), "-i", str(key[0]),
            "-o", f"UserKnownHostsFile={_known_hosts_file(state)}", "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes",
            "-p", str(target.ssh_port), f"{row.ssh_user}@{address}", *command]
    return argv, bool(command)


def ssh(
    cluster: Annotated[str, typer.Argument(help="Cluster name.")],
    node: Annotated[Optional[str], typer.Argument(help="Node name (default: the first node).")] = None,
    command: Annotated[Optional[list[str]], typer.Argument(help="Command to run after `--` (default: a login shell).")] = None,
    ssh_config: Annotated[bool, typer.Option("--ssh-config", help="Also read your ~/.ssh/config (jump hosts, proxies); the pinned host key still decides.")] = False,
) -> None:
    """Log in to a node (or run one command) with the system ssh, checking the pinned host key."""
    from gpuplan.store.state import State

    argv, runs_command = ssh_argv(State.open_default(), cluster, node, list(command or []), user_config=ssh_config)
    sys.stdout.flush()
    sys.stderr.flush()
    if runs_command:  # keep our process so the exit code comes back as ours
        raise typer.Exit(subprocess.run(argv).returncode)
    os.execvp(argv[0], argv)


def register(app: typer.Typer) -> None:
    app.command("bootstrap")(bootstrap)
    app.command("ssh")(ssh)
