"""`gpuplan provision --idle 30m`: each node stops itself after that long with no batch running.

The `idle-stop` playbook installs the watchdog (playbooks/idle-stop.yaml); what stopping a
machine from inside does to its bill depends on the provider, so --idle is offered only where
it ends the machine's billing. Where it is not, the line says what to use instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import UsageError

MIN_IDLE_S = 5 * 60  # a node is being set up for minutes after it starts: no batch yet is not idle
PLAYBOOK = "idle-stop"


@dataclass(frozen=True)
class IdleStop:
    command: str  # what the watchdog runs on the node
    says: str  # what that does to the machine and its bill


# Providers whose machines end their own billing with a shutdown from inside.
STOPS = {
    "aws": IdleStop("shutdown -h now", "terminates itself (launched with InstanceInitiatedShutdownBehavior=terminate):"
                    " billing ends, the cluster's security group and key pair stay until `gpuplan teardown`"),
    "sakura": IdleStop("shutdown -h now", "powers itself off: its plan stops billing, its disk keeps billing until"
                       " `gpuplan teardown`"),
}
REFUSED = {
    "azure": "Azure keeps billing a VM shut down from inside until it is deallocated, which the VM cannot do itself;"
             " use --ttl (Azure's auto-shutdown deallocates) or `gpuplan run --down`",
    "baremetal": "owned hosts are not billed by the hour and are never shut down by gpuplan; leave out --idle",
    "sakura-phy": "a 高火力 PHY server is billed by the month whether on or off; leave out --idle",
}


def check(provider: str, idle_s: int) -> IdleStop:
    """What --idle does on this provider, or bad input saying why it is not offered."""
    if provider not in STOPS:
        why = REFUSED.get(provider, f"{provider} machines are not known to stop billing when shut down from inside")
        raise UsageError(f"--idle is not offered on {provider}: {why}")
    if idle_s < MIN_IDLE_S:
        raise UsageError(f"--idle: at least {MIN_IDLE_S // 60}m (a node takes minutes to set up before any batch runs)")
    return STOPS[provider]


def params(provider: str, idle_s: int) -> dict[str, str]:
    """The idle-stop playbook's parameters for this cluster."""
    return {"idle_s": str(idle_s), "idle_stop_command": check(provider, idle_s).command}
