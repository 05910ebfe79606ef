"""Measuring jobs: `gpuplan bench` (bench.py), `bench --on` offers (campaign.py) and
`gpuplan probe` of a batch's own job (probe.py)."""
