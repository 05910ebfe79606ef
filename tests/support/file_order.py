"""The order the suite's files are handed to the pytest-xdist workers (scripts/test.sh: three
workers on two cores, a file to a worker at a time, in the collection's order as this sets it).

Files whose tests start Ray clusters on loopback hosts cost about 20 s of CPU a launch. xdist's
own order (the files with the most tests first) ran three of them at once for about 250 s of a
run, most at its end, where the one-test Ray files are, and each test there took 2-2.5x its time
alone (run 55a: a 30 s test took 74 s). Here the Ray files are spread over the run in proportion
to their time, each group longest first: on run 54b's figures, three at once for 13 s, not
246 s, and the same length of run (a list schedule of the files on three workers).

SECONDS: each file's wall time in run 54b (2026-11-29, the three workers' sum for it). Only the
order depends on it: a file not named counts 5 s, and a figure out of date costs time, not a
result."""

from __future__ import annotations

SECONDS = {
    "test_launch.py": 274, "test_run_engine.py": 241, "test_launch_unhappy.py": 232, "test_job_checkpoints.py": 136,
    "test_teardown_engine.py": 126, "test_run_containers.py": 125, "test_run_closed.py": 113, "test_chaos.py": 97,
    "test_failover_launch.py": 93, "test_jobs_reference.py": 87, "test_calibration_evidence.py": 86,
    "test_readme_examples.py": 84, "test_safety.py": 83, "test_run_env.py": 73, "test_spot_notice.py": 72,
    "test_provider_contract.py": 65, "test_run_backend_contract.py": 64, "test_launch_recover.py": 59,
    "test_demo.py": 58, "test_run_recover.py": 56, "test_docker_daemon.py": 56, "test_state_postgres.py": 52,
    "test_run_cluster.py": 52, "test_slurm_runs.py": 51, "test_baremetal_provider.py": 49, "test_probe_owned.py": 45,
    "test_dry_run.py": 39, "test_bench_local.py": 31, "test_teams.py": 29, "test_aws_provider.py": 29,
    "test_zone_failover.py": 27, "test_playbook_run.py": 26, "test_aws_cli.py": 26, "test_remote_ssh.py": 23,
    "test_probe.py": 23, "test_failover_provision.py": 21, "test_ownership.py": 20, "test_benchmarks_fail.py": 19,
    "test_pick_rule.py": 18, "test_bench_campaign.py": 18, "test_faults_and_images.py": 15,
}
RAY = {
    "test_launch.py", "test_run_engine.py", "test_launch_unhappy.py", "test_teardown_engine.py",
    "test_run_containers.py", "test_run_closed.py", "test_failover_launch.py", "test_calibration_evidence.py",
    "test_readme_examples.py", "test_run_env.py", "test_spot_notice.py", "test_run_backend_contract.py",
    "test_launch_recover.py", "test_demo.py", "test_run_recover.py", "test_docker_daemon.py", "test_run_cluster.py",
    "test_probe_owned.py",
}


def file_order(files: list[str]) -> list[str]:
    """`files` (names of test files) in the order to run them: the next is a Ray file while the
    Ray files' share of time handed out is not ahead of the others' share."""
    def seconds(f: str) -> float:
        return SECONDS.get(f, 5)

    ray = sorted((f for f in files if f in RAY), key=lambda f: (-seconds(f), f))
    rest = sorted((f for f in files if f not in RAY), key=lambda f: (-seconds(f), f))
    ray_total, rest_total = sum(map(seconds, ray)) or 1, sum(map(seconds, rest)) or 1
    ray_out = rest_out = 0.0
    out = []
    while ray or rest:
        if ray and (not rest or ray_out / ray_total <= rest_out / rest_total):
            out.append(ray.pop(0))
            ray_out += seconds(out[-1])
        else:
            out.append(rest.pop(0))
            rest_out += seconds(out[-1])
    return out
