"""A real SLURM cluster on this one machine for the tests: munged, slurmctld and two slurmd (nodes n1, n2, both
on localhost with their own ports, started with `slurmd -N`), each node declaring 2 GPUs through gres with
placeholder device files (sbatch --test-only accepts or refuses a GPU layout; CPU jobs ask for no GPU).

Everything (config, state, spool, logs, munge key and socket) lives in one temporary folder; clients and jobs
find it through SLURM_CONF. Debian's slurm-wlm and munge provide the daemons (`make sysdeps` installs them).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
NODES = ("n1", "n2")


def missing_binaries() -> list[str]:
    return [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _read(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def _ppid(pid: int) -> int:
    stat_line = _read(pid, "stat").decode(errors="replace")
    fields = stat_line.rsplit(")", 1)[-1].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


def _pid(path: Path, timeout: float = 10) -> int:
    """The pid a daemon writes once it has forked (a moment after its start command returns)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit():
            return int(text)
        time.sleep(0.05)
    raise RuntimeError(f"{path} was not written within {timeout:.0f} s")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@dataclass
class Cluster:
    root: Path
    conf: Path
    start_s: float = 0.0
    pids: dict[str, int] = field(default_factory=dict)

    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(args), capture_output=True, text=True, env=self.env(), timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)}: rc {proc.returncode}: {proc.stderr or proc.stdout}")
        return proc

    def log(self, name: str) -> str:
        path = self.root / "log" / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else f"({path} absent)"

    def start_node(self, node: str) -> None:
        (self.root / f"slurmd-{node}.pid").unlink(missing_ok=True)  # a killed slurmd leaves its pid behind
        subprocess.run([_binary("slurmd"), "-f", str(self.conf), "-N", node], env=self.env(), check=True,
                       timeout=30)
        self.pids[f"slurmd-{node}"] = _pid(self.root / f"slurmd-{node}.pid")

    def kill_node(self, node: str) -> None:
        """A node crash: its slurmd, the step daemons of its job steps and their processes, all SIGKILLed."""
        os.kill(self.pids.pop(f"slurmd-{node}"), signal.SIGKILL)
        victims = set()
        for pid in _pids():
            if f"SLURMD_NODENAME={node}".encode() in _read(pid, "environ").split(b"\0"):
                victims.add(pid)
                parent = pid
                while parent > 1 and _read(parent, "comm").strip() != b"slurmstepd":
                    parent = _ppid(parent)
                if parent > 1:
                    victims.add(parent)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def node_state(self, node: str) -> str:
        return self.run("sinfo", "-h", "-n", node, "-o", "%t", check=False).stdout.strip()

    def wait_idle(self, nodes=NODES, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split("\n")
            states = dict(line.split() for line in out if len(line.split()) == 2)
            if all(states.get(n) == "idle" for n in nodes):
                return
            time.sleep(0.3)
        raise RuntimeError(f"nodes not idle within {timeout:.0f} s: {states}; slurmctld log:\n{self.log('slurmctld')}")

    def stop(self) -> None:
        jobs = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
        if jobs:
            self.run("scancel", *jobs, check=False)
            time.sleep(1)
        for sig in (signal.SIGTERM, signal.SIGKILL):  # what SIGTERM leaves after 5 s is killed
            for pid in self.pids.values():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.time() + 5
            while time.time() < deadline and any(Path(f"/proc/{pid}").exists() for pid in self.pids.values()):
                time.sleep(0.1)
        self.pids.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def _write_config(root: Path, ports: list[int]) -> Path:
    ctld, n1, n2 = ports
    (root / "gpu").mkdir()
    for i in range(2):  # placeholder GPUs: character devices like /dev/null, counted by the scheduler, never opened
        os.mknod(root / "gpu" / f"gpu{i}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (root / "gres.conf").write_text("".join(f"NodeName={n} Name=gpu File={root}/gpu/gpu[0-1]\n" for n in NODES))
    nodes = "".join(f"NodeName={n} NodeHostname=localhost Port={p} CPUs=2 RealMemory=2000 Gres=gpu:2 State=UNKNOWN\n"
                    for n, p in zip(NODES, (n1, n2)))
    conf = root / "slurm.conf"
    conf.write_text(f"""ClusterName=llmft
SlurmctldHost=localhost
SlurmctldPort={ctld}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmdTimeout=5
MessageTimeout=5
MinJobAge=3600
KillWait=5
MpiDefault=none
SwitchType=switch/none
{nodes}PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP
""")
    return conf


def start_cluster(root: Path) -> Cluster:
    """Start munged, slurmctld and slurmd n1, n2 under `root`; RuntimeError with the daemons' logs when they do
    not come up."""
    started = time.time()
    for sub in ("state", "spool", "log", "munge"):
        (root / sub).mkdir(parents=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    munge = root / "munge"
    subprocess.run([_binary("munged"), f"--key-file={key}", f"--socket={munge}/munge.socket",
                    f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
                    f"--seed-file={munge}/seed", "--force"], check=True, timeout=30, capture_output=True)
    cluster = Cluster(root=root, conf=_write_config(root, _free_ports(3)))
    cluster.pids["munged"] = _pid(munge / "munged.pid")
    try:
        subprocess.run([_binary("slurmctld"), "-f", str(cluster.conf)], env=cluster.env(), check=True, timeout=30)
        cluster.pids["slurmctld"] = _pid(root / "slurmctld.pid")
        for node in NODES:
            cluster.start_node(node)
        cluster.wait_idle()
    except (subprocess.SubprocessError, OSError, RuntimeError) as exc:
        cluster.stop()
        raise RuntimeError(f"the test cluster did not start: {exc}\nslurmctld: {cluster.log('slurmctld')}\n"
                           f"slurmd-n1: {cluster.log('slurmd-n1')}") from None
    cluster.start_s = time.time() - started
    return cluster
