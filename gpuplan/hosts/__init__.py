"""Hosts over SSH: commands on many hosts at once with pinned host keys (remote.py), the keys
gpuplan makes (keys.py) and bootstrap playbooks (playbook.py)."""
