"""The Slurm backend: a batch as one Slurm job array on a cluster of slurm.yaml (slurm_runs.py)."""
