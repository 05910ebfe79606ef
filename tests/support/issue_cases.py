"""Workloads and regions the issues measured their cases on, shared by the tests that check
those cases and the benchmarks that print them (benchmarks/pick_bench.py,
benchmarks/sakura_dok_comparison.py), so both plan exactly the same batch."""

# Issue 19: mixed LoRA fine-tunes timed on an A100 80GB, 40 GiB each
LORA_MIX = """name: lora-mix
unit: second
reference_gpu: A100 80GB
memory_gib: 40
jobs:
  - {name: ft5h, count: 3, hours: 5}
  - {name: ft25, count: 4, hours: 2.5}
  - {name: ft40m, count: 6, minutes: 40}
  - {name: ft9h, count: 2, hours: 9}
"""

# Issue 19: 200 jobs of 6 minutes on a T4
T4_SHORT = """name: t4-short
unit: second
reference_gpu: T4
jobs:
  - {name: j, count: 200, minutes: 6}
"""

# Issue 19 measured its cases on these regions (and owned hardware), before Sakura 高火力 DOK
# joined the catalog (issue 22)
ISSUE_19_REGIONS = ["us-east-1", "ap-northeast-1", "eastus", "westus2", "onprem", "dc"]

# Issue 22's worked comparison: four 10-minute H100 jobs
FOUR_TEN_MINUTE_H100_JOBS = """
name: ten-minutes
unit: job
seconds_per_unit: 600
reference_gpu: H100 PCIe
kind: cnn-train
memory_gib: 20
jobs:
  - {name: job, count: 4, units: 1}
colocation: {default: 1.0, source: "issue 22's comparison assumes no slowdown side by side"}
parallel: none
source: issue 22's worked comparison (four 10-minute H100 jobs)
"""
