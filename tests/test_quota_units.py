"""Each quota tier counts a provision's need in its own unit (issue 42: GCP's GPU tier said
"8 GPUs needed" for two 1-GPU machines of 4 vCPUs, the vCPUs' figure)."""

from __future__ import annotations

from gpuplan.fleet.provider import QuotaUsage


def test_a_tier_counts_machines_in_its_own_unit():
    gpus = QuotaUsage("NVIDIA_L4_GPUS", "nvidia-l4 GPUs in asia-northeast1", 8, 0, "GPUs")
    vcpus = QuotaUsage("G2_CPUS", "vCPUs (G2_CPUS) in asia-northeast1", 24, 0, "vCPUs")
    pairs = QuotaUsage("NVIDIA_L4_GPUS", "counted in machines of 2", 4, 0, "machines of 2 GPUs")
    servers = QuotaUsage("servers", "サーバ数", 5, 2, "servers")
    assert gpus.wanted(2, 4) == 2  # two g2-standard-4: 2 L4s
    assert vcpus.wanted(2, 4) == 8  # and 8 vCPUs
    assert pairs.wanted(3, 24) == 3  # three g2-standard-24: 3 machines of 2 GPUs (6 GPUs)
    assert servers.wanted(3, 0) == 3
