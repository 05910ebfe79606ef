"""A real Slurm cluster on this machine, for the Slurm backend's tests: Debian's slurmctld and
slurmd (slurm-wlm) with munge, one node whose GPUs are GRES of stand-in device files, and an
accounting database (slurmdbd on MariaDB) so that `sacct` answers as on a real cluster.

    from support.slurm import start_cluster
    cluster = start_cluster(tmp_path, gpus=2)   # pytest.skip()s when the packages are missing
    cluster.conf                                 # the slurm.conf path: SLURM_CONF for clients
    cluster.env                                  # {"SLURM_CONF": ...}: what a login needs
    cluster.partition                            # "gpu"
    cluster.run("squeue", "-h")                 # a client command against it (CompletedProcess)
    cluster.stop()                               # always, in a fixture's teardown

Everything lives under /run/gpuplan-test-slurm/<random>/ (munge refuses world-writable paths,
as sshd's StrictModes does), with its own munge key and socket, its own ports, its own spool
and state folders: nothing under /etc is read or changed, and two clusters never share a daemon.
The daemons run as root (SlurmUser=root), in the foreground of processes this module started;
stop() ends each by its pid. Without cgroups (a container): proctrack/linuxproc, task/none.

`accounting=False` starts no database: then `sacct` has nothing to say (accounting_storage/none)
and the job completion file (jobcomp/filetxt) is the only record of ended jobs.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from support import machine_lock

BASE = Path("/run/gpuplan-test-slurm")
NEEDED = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/sbatch", "/usr/bin/sacct")
DB_NEEDED = ("/usr/sbin/slurmdbd", "/usr/sbin/mariadbd", "/usr/bin/mariadb-install-db")
NODE = "gpunode"
PARTITION = "gpu"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing_prerequisite(accounting: bool = True) -> str | None:
    """Why a test cluster cannot start here, or None."""
    missing = [p for p in NEEDED + (DB_NEEDED if accounting else ()) if not os.path.exists(p)]
    if missing:
        return (f"{', '.join(missing)} not installed: apt-get install slurm-wlm munge"
                + (" slurmdbd mariadb-server" if accounting else "") + " (scripts/test.sh does)")
    if os.geteuid() != 0:
        return "the test Slurm cluster runs its daemons as root"
    return None


@dataclass
class SlurmCluster:
    dir: Path
    conf: Path
    gpus: int
    partition: str = PARTITION
    accounting: bool = True
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    lock: int | None = None  # machine_lock's "slurm", held from start to stop

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})

    def log(self, name: str) -> str:
        p = self.dir / f"{name}.log"
        return p.read_text(errors="replace")[-4000:] if p.exists() else f"(no {p})"

    def queue(self) -> list[str]:
        """Every job step slurmctld still holds pending or running, one line each."""
        r = self.run("squeue", "-h", "-o", "%i %T")
        return [line for line in r.stdout.splitlines() if line.strip()]

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"):
            p = self.procs.pop(name, None)
            if p is None:
                continue
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        _kill_job_leftovers(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        machine_lock.release(self.lock)
        self.lock = None


def _kill_job_leftovers(d: Path) -> None:
    """slurmstepd processes of this cluster's jobs outlive slurmd by design: end them (by pid, only
    those whose command line names this cluster's folder)."""
    me = str(d)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (proc / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "slurmstepd" in cmd and me in env:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


_SLURM_CONF = """ClusterName={cluster}
SlurmctldHost={hostname}(127.0.0.1)
MailProg=/bin/true
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={dir}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MinJobAge=600
KillWait=5
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={dir}/jobcomp.txt
{accounting}
NodeName={node} NodeAddr=127.0.0.1 NodeHostname={hostname} CPUs=4 RealMemory=1000 Gres=gpu:{gpus} State=UNKNOWN
PartitionName={partition} Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""

_ACCOUNTING = """AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={dbd_port}
AccountingStoragePass={dir}/munge/munge.socket
AccountingStorageTRES=gres/gpu"""

_SLURMDBD_CONF = """AuthType=auth/munge
AuthInfo=socket={dir}/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
LogFile={dir}/slurmdbd.log
PidFile={dir}/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StorageLoc=slurm_acct_db
StorageUser=root
StoragePort={db_port}
"""


def _wait(what: str, check, timeout: float, log: str = "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up in {timeout:.0f} s{': ' + log if log else ''}")


def start_cluster(tmp_path: Path | None = None, gpus: int = 2, accounting: bool = True) -> SlurmCluster:
    """Start munged, (MariaDB and slurmdbd,) slurmctld and slurmd; wait until the node is idle.
    The caller must call stop()."""
    missing = missing_prerequisite(accounting)
    if missing:
        import pytest

        pytest.skip(missing)
    lock = machine_lock.hold("slurm")  # one Slurm set on the machine at a time: munge and the node's name are its
    BASE.mkdir(mode=0o755, exist_ok=True)
    d = BASE / secrets.token_hex(4)
    d.mkdir(mode=0o755)
    cluster = SlurmCluster(d, d / "slurm.conf", gpus, accounting=accounting, lock=lock)
    try:
        _start(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _spawn(cluster: SlurmCluster, name: str, argv: list[str], env: dict | None = None) -> None:
    out = open(cluster.dir / f"{name}.out", "ab")  # noqa: SIM115 - the daemon's, closed with it
    cluster.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                           env={**os.environ, **cluster.env, "GPUPLAN_TEST_SLURM": str(cluster.dir),
                                                **(env or {})}, start_new_session=True)


def _alive(cluster: SlurmCluster, name: str) -> bool:
    p = cluster.procs[name]
    if p.poll() is not None:
        out = (cluster.dir / f"{name}.out").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{name} exited ({p.returncode}): {out} {cluster.log(name)}")
    return True


def _start(c: SlurmCluster) -> None:
    d = c.dir
    for sub in ("munge", "state", "spool", "dev", "db"):
        (d / sub).mkdir(mode=0o700 if sub in ("munge", "db") else 0o755)
    key = d / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(128))
    key.chmod(0o400)
    _spawn(c, "munged", ["/usr/sbin/munged", "-F", "-f", f"--socket={d}/munge/munge.socket", f"--key-file={key}",
                         f"--pid-file={d}/munge/munged.pid", f"--log-file={d}/munge/munged.log",
                         f"--seed-file={d}/munge/munged.seed"])
    _wait("munged", lambda: _alive(c, "munged") and (d / "munge" / "munge.socket").exists(), 30)
    for i in range(c.gpus):  # the GPUs: stand-in device files, one per GRES
        (d / "dev" / f"nvidia{i}").write_text("")
    accounting = ""
    if c.accounting:
        dbd_port = _free_port()
        _start_database(c, dbd_port)
        accounting = _ACCOUNTING.format(dbd_port=dbd_port, dir=d)
    c.conf.write_text(_SLURM_CONF.format(
        cluster="gpuplantest", node=NODE, hostname=socket.gethostname(), ctld_port=_free_port(),
        slurmd_port=_free_port(), dir=d, gpus=c.gpus, partition=c.partition, accounting=accounting))
    files = f"{d}/dev/nvidia[0-{c.gpus - 1}]" if c.gpus > 1 else f"{d}/dev/nvidia0"
    (d / "gres.conf").write_text(f"NodeName={NODE} Name=gpu File={files}\n")
    if c.accounting:  # the cluster must be known to the database before slurmctld registers
        r = c.run("sacctmgr", "-i", "add", "cluster", "gpuplantest")
        if r.returncode != 0 and "already" not in r.stdout + r.stderr:
            raise RuntimeError(f"sacctmgr add cluster: {r.stdout} {r.stderr} {c.log('slurmdbd')}")
    _spawn(c, "slurmctld", ["/usr/sbin/slurmctld", "-D", "-i", "-f", str(c.conf)])
    _wait("slurmctld", lambda: _alive(c, "slurmctld") and c.run("scontrol", "ping").returncode == 0
          and "UP" in c.run("scontrol", "ping").stdout, 60, c.log("slurmctld"))
    _spawn(c, "slurmd", ["/usr/sbin/slurmd", "-D", "-N", NODE, "-f", str(c.conf)])

    def idle() -> bool:
        _alive(c, "slurmd")
        r = c.run("sinfo", "-h", "-N", "-o", "%T")
        return r.returncode == 0 and r.stdout.strip().rstrip("*") in ("idle", "mixed")

    _wait("slurmd (node idle)", idle, 90, c.log("slurmd") + c.log("slurmctld"))


def _start_database(c: SlurmCluster, dbd_port: int) -> None:
    d = c.dir
    data, sock, db_port = d / "db" / "data", d / "db" / "mysqld.sock", _free_port()
    r = subprocess.run(["/usr/bin/mariadb-install-db", "--user=root", f"--datadir={data}", "--auth-root-authentication-method=normal",
                        "--skip-test-db"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"mariadb-install-db: {r.stdout[-1000:]} {r.stderr[-1000:]}")
    _spawn(c, "mariadbd", ["/usr/sbin/mariadbd", "--no-defaults", "--user=root", f"--datadir={data}", f"--socket={sock}",
                           f"--port={db_port}", "--bind-address=127.0.0.1", f"--pid-file={d}/db/mysqld.pid",
                           "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M"])

    def up() -> bool:
        _alive(c, "mariadbd")
        try:
            with socket.create_connection(("127.0.0.1", db_port), timeout=0.5):
                return True
        except OSError:
            return False

    _wait("mariadbd", up, 120)
    conf = d / "slurmdbd.conf"
    conf.write_text(_SLURMDBD_CONF.format(dir=d, dbd_port=dbd_port, db_port=db_port))
    conf.chmod(0o600)
    _spawn(c, "slurmdbd", ["/usr/sbin/slurmdbd", "-D"], env={"SLURM_CONF": str(c.conf), "SLURMDBD_CONF": str(conf)})

    def dbd_up() -> bool:
        _alive(c, "slurmdbd")
        try:
            with socket.create_connection(("127.0.0.1", dbd_port), timeout=0.5):
                return True
        except OSError:
            return False

    _wait("slurmdbd", dbd_up, 120, c.log("slurmdbd"))
