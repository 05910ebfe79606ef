"""The 高火力 DOK backend: a batch as DOK container tasks (dok_runs.py; dok_batch.py for the 8-GPU task)."""
