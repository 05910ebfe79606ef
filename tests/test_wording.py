"""What a person reads: help that names what it means, tables that pipe, words that agree with
their numbers, commands that say what they did, and errors that name the field (issue 24)."""

from __future__ import annotations

import json
import re
import sys

import pytest

from gpuplan.cli import tables
from gpuplan.planning import workloads

COMMANDS = [["estimate"], ["catalog"], ["catalog", "refresh"], ["check"], ["provision"], ["status"], ["teardown"],
            ["image", "build"], ["image", "list"], ["image", "delete"], ["bootstrap"], ["ssh"], ["bench"], ["run"]]


def _help(cli, *words: str, columns: str = "160") -> str:
    import os

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = columns
    try:
        r = cli(*words, "--help")
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    assert r.code == 0, r.err
    return r.out


# --- help -----------------------------------------------------------------------------------------

def test_estimate_help_names_the_plot_extra_whole(cli):
    text = " ".join(_help(cli, "estimate").split())
    assert "needs gpuplan[plot]" in text


@pytest.mark.parametrize("words", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_help_shows_no_python_types(cli, words):
    text = _help(cli, *words)
    for python_type in ("<bool>", "<str>", "<int>", "<list[str]>", "<path>", "<list"):
        assert python_type not in text, f"gpuplan {' '.join(words)} --help shows {python_type}"


def test_help_lists_the_choices_of_objective_and_format(cli):
    text = _help(cli, "estimate")
    assert re.search(r"--objective\s+balanced\|cost\|time", text) and re.search(r"--format\s+table\|json\|csv", text)
    assert re.search(r"--deadline\s+DURATION", text) and re.search(r"--quota\s+PROVIDER=VCPUS", text)
    assert re.search(r"--all\s{3,}List every candidate plan", text)  # a flag shows no value


def test_a_help_sentence_is_not_broken_inside(cli):
    # provision's docstring wraps after "yen" in the source; the help joins the paragraph
    text = _help(cli, "provision", columns="200")
    assert "(shows machines, yen per hour, the quota check and the TTL)" in text


@pytest.mark.parametrize("typed, offered", [("--objective", ["balanced", "cost", "time"]), ("--format", ["table", "json", "csv"]),
                                            ("--release", ["when-done", "at-end"])])
def test_completion_offers_the_choices(typed, offered):
    import os
    import subprocess

    env = {**os.environ, "_GPUPLAN_COMPLETE": "complete_bash", "COMP_WORDS": f"gpuplan estimate {typed} ",
           "COMP_CWORD": "3"}
    r = subprocess.run([sys.executable, "-m", "gpuplan"], capture_output=True, text=True, env=env, timeout=60)
    assert r.stdout.split() == offered


def test_bootstrap_list_needs_no_cluster(cli):
    r = cli("bootstrap", "--list")
    assert r.code == 0 and "cuda:" in r.out and "gpu-driver:" in r.out
    r = cli("bootstrap")
    assert r.code == 2 and "name the cluster to bootstrap" in r.err


# --- tables ---------------------------------------------------------------------------------------

def test_piped_catalog_is_one_line_per_offer(cli):
    r = cli("catalog")
    assert r.code == 0
    rows = [line for line in r.out.splitlines() if line.startswith("azure:Standard_NC80adis_H100_v5")]
    assert len(rows) == 1 and "H100 NVL x2" in rows[0] and "¥2,208" in rows[0] and "eastus" in rows[0]
    data = json.loads(cli("catalog", "--format", "json").out)
    offer_lines = [line for line in r.out.splitlines() if re.match(r"^[a-z-]+:\S", line)]
    assert len(offer_lines) == len(data["offers"])  # no row wrapped onto a second line
    assert not any(line != line.rstrip() for line in r.out.splitlines())


def test_estimate_and_catalog_pipe_in_the_same_style(cli):
    est = cli("estimate", "--videos", "4", "--as-of", "2017-08").out.splitlines()
    cat = cli("catalog", "--as-of", "2017-08").out.splitlines()
    for lines in (est, cat):  # a title, the header, a rule of dashes under every column
        assert re.fullmatch(r"[- ]+", lines[2]) and lines[2].split() == ["-" * len(w) for w in lines[2].split()]
    assert cat[1].split()[:3] == ["instance", "region", "GPU"]


def test_the_table_module_pipes_plain_text():
    cols = [tables.Column("measure"), tables.Column("n", right=True)]
    text = tables.plain(cols, [["co-location [slowdown]", "2"], [("packed", "red"), "10"]], title="t")
    assert text == "t\nmeasure                  n\n----------------------  --\nco-location [slowdown]   2\npacked                  10\n"


def test_estimate_fits_160_columns_on_a_terminal(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    from rich.console import Console

    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    r = cli("estimate", "--videos", "4")
    assert r.code == 0
    widest = max(len(re.sub(r"\x1b\[[0-9;]*m", "", line)) for line in r.out.splitlines())
    assert widest <= 160, widest


# --- words and numbers ----------------------------------------------------------------------------

def test_one_job_is_one_job(cli):
    r = cli("estimate", "--videos", "1", "--as-of", "2017-08")
    assert "colorize-hd (1 job)," in r.out and "1 jobs" not in r.out


def test_streams_are_counted_as_streams(cli, tmp_path):
    f = tmp_path / "cams.yaml"
    f.write_text("name: cams\nunit: frame\nseconds_per_unit: 0.01\nreference_gpu: T4\n"
                 "streams: {count: 32, fps: 30, hours: 1}\n")
    r = cli("estimate", "--workload", str(f))
    assert "cams (32 streams)," in r.out and "32 jobs" not in r.out
    assert "workload cams: 32 streams, 0.01 s per frame on T4" in r.out


def test_a_workload_timed_in_seconds_reads_as_time_not_a_rate(cli, tmp_path):
    # (yolo-fhd is counted in frames since issue 23: a file timed in seconds shows the wording)
    f = tmp_path / "clips.yaml"
    f.write_text("name: clips\nreference_gpu: T4\njobs:\n  - {count: 8, minutes: 40}\n")
    r = cli("estimate", "--workload", str(f))
    assert "workload clips: 8 jobs, lengths in seconds of work alone on T4" in r.out
    assert "1 s per second" not in r.out
    r = cli("estimate", "--workload", "yolo-fhd")
    assert "workload yolo-fhd: 8 jobs, 0.147591 s per frame on GTX 1080" in r.out


def test_long_batches_read_in_one_unit_per_column_and_keep_their_minutes(cli, tmp_path):
    f = tmp_path / "long.yaml"
    f.write_text("name: long\nreference_gpu: T4\njobs:\n  - {count: 2, hours: 60}\n  - {count: 1, minutes: 30}\n")
    r = cli("estimate", "--workload", str(f), "--provider", "aws", "--all")  # the slow T4 plans: --all (issue 19)
    lines = r.out.splitlines()
    head = lines[1]
    wall_end = head.index("wall") + len("wall")
    rows = [line for line in lines[3:] if re.search(r"\byes\b", line)]
    walls = [line[:wall_end].split()[-1] for line in rows]
    assert walls and all(w == "h" or w.endswith("h") for w in walls)
    # issue 42: a column in days (issue 19's rule) wrote the p5 plans' 3:55 h as "0 d 4 h" under the
    # pick's line's own h:mm; a column with a figure under two days now stays in h:mm throughout,
    # 60 h of work alone on a T4 too ("60:30 h", where it read "2 d 13 h")
    assert not any(re.search(r"\d+ d \d+ h", row) for row in rows)
    assert re.search(r"3x g4dn.xlarge +aws us-east-1 +image +60:30 h +120:55 h", r.out)
    assert re.search(r"2x p5.4xlarge +aws us-east-1 +image +4:05 h +7:37 h", r.out)
    assert re.search(r"range: .* wall \d+:\d\d–\d+:\d\d h\n", r.out)  # the range line: one unit too


def test_save_says_where_the_plan_went(cli, tmp_path):
    r = cli("estimate", "--videos", "2", "--as-of", "2017-08", "--save", str(tmp_path / "p.json"))
    assert r.code == 0 and f"plan saved to {tmp_path / 'p.json'}" in r.err


def test_teardown_images_with_none_says_so(cli):
    r = cli("teardown", "--images", "--yes")
    assert r.code == 0 and "no images in the state; nothing to delete" in r.out


def test_hints_name_no_retired_size(cli):
    for words in (["status"], ["image", "list"]):
        r = cli(*words)
        assert r.code == 0 and "nc6" not in r.out.lower() and "NC4as_T4_v3" in r.out


def test_as_of_past_the_catalog_is_noted(cli):
    r = cli("estimate", "--videos", "2", "--as-of", "2030-01")
    assert r.code == 0
    assert "note: --as-of 2030-01 is past the newest catalog snapshot, 2026-11" in r.err
    assert "past the newest" not in cli("estimate", "--videos", "2", "--as-of", "2026-11").err
    # issue 42: 2017-12 is not past the newest snapshot (2026-11): it has none of its own, and 2017-08 is used
    r = cli("estimate", "--videos", "2", "--as-of", "2017-12")
    assert ("note: --as-of 2017-12 has no snapshot of its own: the last one before it, 2017-08, is used (the newest is"
            " 2026-11)") in r.err and "past the newest" not in r.err


def test_the_catalog_is_dated_by_its_newest_source(cli):
    first = cli("catalog").out.splitlines()[0]
    assert first == "gpuplan catalog 2026-11 (newest source 2026-11-09)"  # not the snapshot's label date 2026-11-30


def test_workload_names_in_both_spellings():
    assert workloads.builtin_name("colorize") == "colorize-hd" and workloads.builtin_name("VGG_CIFAR10") == "vgg-cifar10"
    assert workloads.bench_job("colorize-hd") == "colorize" and workloads.bench_job("yolo-fhd") == "detect_streams"
    assert workloads.bench_job("vgg-cifar") == "vgg_cifar" and workloads.builtin_name("nothing") is None


def test_estimate_takes_the_bench_spelling(cli):
    assert cli("estimate", "--workload", "colorize", "--as-of", "2017-08").out.startswith(
        "gpuplan estimate: colorize-hd (1 job)")


def test_bench_takes_the_estimate_spelling(cli):
    r = cli("bench", "yolo-fhd", "--local", "--max-pack", "0")  # refused before anything runs
    assert r.code == 2 and "--max-pack" in r.err
    r = cli("bench", "nothing", "--local")
    assert r.code == 2 and "choose one of colorize, detect_streams, resnet50, vgg_cifar" in r.err


def test_seconds_per_unit_is_optional_when_jobs_give_their_time(cli, tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("name: mine\nreference_gpu: T4\njobs:\n  - {count: 3, minutes: 30}\n")
    r = cli("estimate", "--workload", str(f))
    assert r.code == 0 and "Recommended:" in r.out
    f.write_text("name: mine\nunit: epoch\nreference_gpu: T4\njobs:\n  - {count: 3, units: 30}\n")
    r = cli("estimate", "--workload", str(f))
    assert r.code == 2 and "field 'seconds_per_unit' is missing: jobs counted in units" in r.err


def test_reference_gpu_is_read_forgivingly_and_blamed_by_name(cli, tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("name: mine\nreference_gpu: t4\njobs:\n  - {count: 3, minutes: 30}\n")
    r = cli("estimate", "--workload", str(f))
    assert r.code == 0 and "alone on T4" in r.out
    f.write_text("name: mine\nreference_gpu: Voodoo 5\njobs:\n  - {count: 3, minutes: 30}\n")
    r = cli("estimate", "--workload", str(f))
    assert r.code == 2 and r.err.startswith("gpuplan: error: workload mine: reference_gpu 'Voodoo 5' is not a GPU")
    assert "gtx1080ti" not in r.err  # not an unrelated machine


def test_a_new_offer_without_memory_takes_its_gpus(cli, tmp_path, gpuplan_home):
    (gpuplan_home / "config").mkdir(parents=True)
    (gpuplan_home / "config" / "prices.yaml").write_text(
        "offers:\n  - {provider: aws, name: newbox, region: us-east-1, gpu: T4, gpu_count: 1, price: 0.5, currency: USD}\n")
    data = json.loads(cli("catalog", "--provider", "aws", "--format", "json").out)
    box = next(o for o in data["offers"] if o["name"] == "newbox")
    assert box["gpu_memory_gib"] == "16"
    (gpuplan_home / "config" / "prices.yaml").write_text(
        "offers:\n  - {provider: aws, name: newbox, region: us-east-1, gpu: Voodoo, gpu_count: 1, price: 0.5, currency: USD}\n")
    r = cli("catalog")
    assert r.code == 2 and "a new offer needs gpu_memory_gib" in r.err


def test_debug_keeps_the_exit_code(cli):
    r = cli("--debug", "estimate", "--videos", "0")
    assert r.code == 2 and "Traceback" in r.err and "bad --videos 0" in r.err


def test_install_hints_keep_their_extra(cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)
    r = cli("check", "aws")
    assert r.code == 2 and "pip install 'gpuplan[aws]'" in r.out


def test_image_list_pipes_one_line_per_image(cli):
    from gpuplan.store.state import State

    State.open_default().add_image("t4-[base]", "aws", "us-east-1", "g4dn.xlarge", "gpu-driver,cuda,cudnn,nccl")
    r = cli("image", "list")
    lines = r.out.splitlines()
    assert r.code == 0 and lines[0].split()[:3] == ["name", "provider", "region"]
    assert lines[2].startswith("t4-[base]  aws") and "gpu-driver,cuda,cudnn,nccl" in lines[2]  # markup-safe, whole


@pytest.mark.parametrize("columns", ["80", "100", "160"])
def test_catalog_fits_the_terminal(cli, monkeypatch, columns):
    from rich.console import Console

    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    r = cli("catalog", "--all")
    assert r.code == 0
    table = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in r.out.splitlines()]
    table = table[:next(i for i, line in enumerate(table) if line.startswith(("[1]", "sources,")))]
    assert max(len(line) for line in table) <= int(columns)
    assert any("Standard_NC80adis_H100_v5" in line for line in table)


@pytest.mark.parametrize("words", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_help_leaves_room_for_its_sentences_at_80_columns(cli, words):
    """A flag declares no --no- twin (its column squeezed the descriptions to a few words a line)."""
    text = _help(cli, *words, columns="80")
    assert not re.search(r"--no-(spot|keep-on-failure)", text)
    lengths = [len(line.strip("│ ").split("  ")[-1]) for line in text.splitlines() if line.startswith("│ --")]
    assert len(lengths) < 2 or max(lengths) >= 30  # the description column is wider than 30 characters
