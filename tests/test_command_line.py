"""A batch's command as the shell text its items run, the same on every backend
(run/command_line.py): {item} and {out} as the item's variables, $NAME as the node's, the
rest literal; an item is never read as shell text, whatever it holds."""

from __future__ import annotations

import os
import subprocess

import pytest

from gpuplan.run import command_line
from gpuplan.run.dok import dok_batch
from gpuplan.run.slurm import slurm_runs

HOSTILE = ["a b", "$(touch PWNED)", "`touch PWNED`", "x; touch PWNED", "'\"", "*", "$HOME", "-n", "{out}", "a\\b", ""]


def _run(text: str, item: str, tmp_path, **env) -> list[str]:
    """Run `text` in sh as a node does, with printf standing in for the program: its argv."""
    out = tmp_path / "o"
    out.mkdir(exist_ok=True)
    r = subprocess.run(["sh", "-c", text], env={"PATH": os.environ["PATH"], "GPUPLAN_ITEM": item,
                                               "GPUPLAN_OUTPUT_DIR": str(out), **env},
                       cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\0")[:-1]


def test_the_readmes_batch_line_gets_the_items_output_folder_not_the_literal_text(tmp_path):
    text = command_line.exec_line(["printf", "%s\\0", "colorize.py", "{item}", "--out", "$GPUPLAN_OUTPUT_DIR"])
    assert _run(text, "clip 1.mp4", tmp_path) == ["colorize.py", "clip 1.mp4", "--out", str(tmp_path / "o")]
    # {out} and ${NAME} mean the same; a name the node does not set is empty, as in a shell
    text = command_line.exec_line(["printf", "%s\\0", "{out}/x", "${GPUPLAN_OUTPUT_DIR}/y", "$HF_HOME", "pre-${TAG}-post"])
    assert _run(text, "i", tmp_path, TAG="t1") == [f"{tmp_path}/o/x", f"{tmp_path}/o/y", "", "pre-t1-post"]


@pytest.mark.parametrize("item", HOSTILE)
def test_an_item_is_data_never_shell_text(tmp_path, item):
    """As a word of the command, in a word with other text, and inside the script of `sh -c`
    (bare, in double quotes, in single quotes)."""
    words = ["printf", "%s\\0", "{item}", "in-{item}-x", "$GPUPLAN_ITEM"]
    assert _run(command_line.exec_line(words), item, tmp_path) == [item, f"in-{item}-x", item]
    script = ["sh", "-c", "printf '%s\\0' {item} \"{item}\" '{item}'\"$1\"", "zero", "{item}"]
    got = _run(command_line.exec_line(script), item, tmp_path)
    assert got == [item, item, item + item]  # bare, in "...", in '...': one word each time, never run
    assert not (tmp_path / "PWNED").exists()


def test_a_shells_script_keeps_its_own_variables(tmp_path):
    """`$f` of a loop in `sh -c` is the script's, not the node's (nor emptied before it runs)."""
    words = ["sh", "-c", 'for f in 1 2; do printf "%s\\0" "$f-{item}"; done; printf "%s\\0" "$0"', "{out}"]
    assert _run(command_line.exec_line(words), "it", tmp_path) == ["1-it", "2-it", f"{tmp_path}/o"]
    assert command_line._is_script(["bash", "-e", "-lc", "x"], 3) and command_line._is_script(["/bin/sh", "-c", "x"], 2)
    assert not command_line._is_script(["python", "-c", "x"], 2) and not command_line._is_script(["sh", "x.sh"], 1)


def test_slurms_batch_script_runs_the_same_line(tmp_path):
    """batch.sh (bash on the nodes) execs command_line's line, with the item and its folder exported."""
    words = ["python", "colorize.py", "{item}", "--out", "$GPUPLAN_OUTPUT_DIR"]
    text = slurm_runs.script("/shared/b", words, {})
    assert text.rstrip().endswith(command_line.exec_line(words))
    assert 'export GPUPLAN_ITEM GPUPLAN_OUTPUT_DIR' in text


def test_dok_runs_the_same_line_in_its_tasks(tmp_path):
    """A 1-GPU task: `sh -c` of the same line where a shell is needed, with GPUPLAN_ITEM and
    GPUPLAN_OUTPUT_DIR (the task's artifact folder) set; else the argv as before, {item} put in."""
    from gpuplan.run.dok import dok_runs

    words = ["printf", "%s\\0", "{item}", "--out", "$GPUPLAN_OUTPUT_DIR", "{out}"]
    for item in HOSTILE:
        r = subprocess.run(dok_runs.task_command(words, item), env={"PATH": os.environ["PATH"],
                           "SAKURA_ARTIFACT_DIR": str(tmp_path)}, cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert r.stdout.split("\0")[:-1] == [item, "--out", str(tmp_path), str(tmp_path)]
    assert not (tmp_path / "PWNED").exists()
    assert dok_runs.task_command(["python", "run.py", "{item}"], "a b") == ["python", "run.py", "a b"]
    # the 8-GPU runner: each item's case sets GPUPLAN_ITEM, then execs the same line
    script = dok_batch.script([(0, "a b")], words)
    assert f"GPUPLAN_ITEM='a b'; export GPUPLAN_ITEM; {command_line.exec_line(words)} ;;" in script
