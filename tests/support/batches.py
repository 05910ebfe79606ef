"""One batch file for every infra: the launch tests run this same file on owned hosts and on
高火力 DOK, only `infra:` differing (issue 30)."""

from __future__ import annotations

from pathlib import Path

import yaml

ITEMS = ("clip-a.mp4", "clip-b.mp4", "clip-c.mp4", "clip-d.mp4")


def container_batch(folder: Path, infra: str) -> Path:
    """batch.yaml (and its videos.txt) in `folder`: each item in a container, its result in $GPUPLAN_OUTPUT_DIR.
    `params.root` keeps the loopback hosts' playbooks (docker-gpu) inside each host's fake root."""
    (folder / "videos.txt").write_text("".join(f"{i}\n" for i in ITEMS))
    path = folder / "batch.yaml"
    path.write_text(yaml.safe_dump({
        "workload": "colorize-hd", "items": "videos.txt", "infra": [infra],
        "image": "registry.example/me/colorize:1",
        "command": "sh -c 'echo in-container {item} > $GPUPLAN_OUTPUT_DIR/result.txt'",
        "params": {"root": "$GPUPLAN_FAKE_ROOT"}, "outputs": "results"}, sort_keys=False))
    return path


def planned_batch(folder: Path, extra: str = ""):
    """A colorize-hd batch of 8 videos on AWS or GCP (its file in `folder`, `extra` YAML lines
    added) and its workload, as launch plans it: the failover tests' batch."""
    from gpuplan import batchfile
    from gpuplan.run import launcher

    items = folder / "items.txt"
    items.write_text("".join(f"v{i}.mp4\n" for i in range(8)))
    path = folder / "b.yaml"
    path.write_text(f"items: {items}\nworkload: colorize-hd\ncommand: echo {{item}}\ninfra: [aws, gcp]\n{extra}")
    batch = batchfile.read(path, {})
    return batch, launcher.workload_for(batch, [f"v{i}.mp4" for i in range(8)])
