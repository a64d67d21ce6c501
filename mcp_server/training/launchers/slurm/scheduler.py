"""The SLURM scheduler, as the launcher sees it: its commands (sbatch, squeue, scontrol, sacct, scancel, sinfo)
run with a timeout and read into plain values. Nothing here decides a run's state; slurm_launcher does.

Every command is run through `_run`: no shell, no stdin, a timeout, and a missing command reads as a failed
one (rc 127), so a scheduler that is absent or hangs is an answer, never a crash of the server. Each is run by
the absolute path `command` resolves; a launch resolves them once (`commands`: the job's layout carries them), runs
that sbatch, writes that srun and scontrol into train/launch.slurm and records which ones (run.json's
slurm.commands): the job's shell never looks them up on PATH (issue 48, round 8).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from mcp_server.errors import UserInputError, one_line, short
from mcp_server.interpreter import without_scratch, without_shell_hooks

TIMEOUT_S = 30
# The job states (squeue(1)'s JOB STATE CODES) in which the job still holds, or waits for, an allocation: STOPPED
# (SIGSTOPped, its CPUs kept) and SPECIAL_EXIT (requeued and held) included. The others have ended.
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
          "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "STOPPED", "SPECIAL_EXIT")
_KEY = re.compile(r"\s(?=[A-Za-z][A-Za-z:/_]*=)")


@dataclass
class Job:
    """One job as the scheduler describes it (scontrol show job, else sacct)."""

    job_id: str
    state: str  # JobState without decoration: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    name: str = ""
    comment: str = ""
    work_dir: str = ""
    reason: str = ""
    partition: str = ""
    nodes: list[str] = field(default_factory=list)
    exit_code: int | None = None
    signal: int | None = None
    restarts: int = 0
    source: str = "scontrol"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


COMMANDS = ("sbatch", "srun", "scontrol", "squeue", "scancel", "sacct", "sinfo")


def command(name: str) -> str:
    """The scheduler's command `name` by absolute path, as PATH finds it now; the bare name when it is not here
    (run, it then reads as a missing command, rc 127; written into a script to submit elsewhere, the job's PATH)."""
    found = shutil.which(name)
    return os.path.abspath(found) if found else name


def commands() -> dict[str, str]:
    """Every command of the scheduler, resolved once for a launch (`command`)."""
    return {name: command(name) for name in COMMANDS}


def _run(args: list[str], timeout: float = TIMEOUT_S, stdin: str | None = None,
         extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    args = [args[0] if os.path.isabs(args[0]) else command(args[0]), *args[1:]]
    # sbatch hands the job this environment (--export=ALL): never this process's scratch caches (interpreter.py)
    # nor what runs code before the job's checks: the batch script's bash would source BASH_ENV (issue 48)
    env = {**without_shell_hooks(without_scratch(dict(os.environ))), **(extra_env or {})}
    try:
        if stdin is not None:
            return subprocess.run(args, capture_output=True, text=True, timeout=timeout, input=stdin, env=env)
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              env=env)
    except FileNotFoundError:
        return subprocess.CompletedProcess(args, 127, "", f"{args[0]}: command not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"{args[0]} did not answer within {timeout:.0f} s")
    except OSError as exc:
        return subprocess.CompletedProcess(args, 126, "", f"{args[0]}: {exc.strerror or exc}")


def first_error(proc: subprocess.CompletedProcess) -> str:
    """The scheduler's own words, one line: its last error line (sbatch prints the reason last)."""
    lines = [line.strip() for line in (proc.stderr or proc.stdout or "").splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or "failure" in line.lower()]
    return one_line(short((errors or lines or [f"exit code {proc.returncode}"])[-1], 300))


def available() -> bool:
    """Whether the scheduler can be asked here (scontrol on PATH)."""
    return shutil.which("scontrol") is not None


def require_scheduler() -> None:
    """UserInputError('launcher') when the SLURM client commands are not on PATH."""
    missing = [c for c in ("sbatch", "squeue", "scontrol", "scancel") if shutil.which(c) is None]
    if missing:
        raise UserInputError("launcher", f"no SLURM scheduler on PATH ({', '.join(missing)} not found): run the "
                             "server on the cluster's login node (where sbatch works), or launch with "
                             "launcher=local on one machine")


def _sinfo_partitions() -> dict[str, dict]:
    """{partition: {nodes, gres}} as sinfo sees them ({} when it cannot say)."""
    proc = _run(["sinfo", "-h", "-o", "%R|%D|%G"])
    out: dict[str, dict] = {}
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        parts = line.strip().split("|")
        if len(parts) == 3:
            out.setdefault(parts[0], {"nodes": parts[1], "gres": parts[2]})
    return out


def check_submission(script: str, sbatch: str = "sbatch") -> str | None:
    """`sbatch --test-only` on the script's text (`sbatch`: the one the launch resolved): None when the scheduler
    would take the job; else "<field>: <what to change>" in one line."""
    proc = _run([sbatch, "--test-only"], stdin=script)
    if proc.returncode == 0:
        return None
    said = first_error(proc)
    low = said.lower()
    known = _sinfo_partitions()
    listing = "; ".join(f"{p} ({v['nodes']} nodes, gres {v['gres']})" for p, v in known.items()) or "see sinfo"
    if "partition" in low:
        return f"partition: the scheduler refused it ({said}); partitions here: {listing}"
    if "account" in low or "association" in low:
        return f"account: the scheduler refused it ({said}); use an account you may charge (sacctmgr show assoc " \
               "user=$USER)"
    if "node configuration is not available" in low or "gres" in low or "node count" in low:
        return (f"num_gpus / num_nodes: the partition has no nodes with that many GPUs or not that many nodes "
                f"({said}); partitions here: {listing}")
    if "time limit" in low:
        return f"time_limit: the scheduler refused it ({said})"
    return f"launcher: sbatch --test-only refused the job ({said})"


def submit(script: str, env: dict[str, str] | None = None, sbatch: str = "sbatch") -> str:
    """`sbatch --parsable` (`sbatch`: the one the launch resolved) on the script's text, given on stdin: sbatch
    never reads the workspace's train/launch.slurm, which could be rewritten after the gates (round 9, F1); the job
    is given `env` too (`--export=ALL,...`: whatever SBATCH_EXPORT says); the job id, or UserInputError('launcher')
    with the scheduler's words."""
    exports = ",".join(["ALL", *sorted(env or {})])
    proc = _run([sbatch, "--parsable", f"--export={exports}"], stdin=script, extra_env=env)
    job_id = proc.stdout.strip().split(";")[0] if proc.returncode == 0 else ""
    if not job_id.isdigit():
        raise UserInputError("launcher", f"sbatch did not submit the job ({first_error(proc)})")
    return job_id


def _fields(line: str) -> dict[str, str]:
    return {k: v.strip() for k, v in (part.split("=", 1) for part in _KEY.split(line.strip()) if "=" in part)}


def _exit(value: str) -> tuple[int | None, int | None]:
    code, _, sig = value.partition(":")
    return (int(code) if code.isdigit() else None), (int(sig) if sig.isdigit() else None)


def hostnames(nodelist: str) -> list[str]:
    if not nodelist or nodelist in ("(null)", "None assigned"):
        return []
    proc = _run(["scontrol", "show", "hostnames", nodelist])
    return proc.stdout.split() if proc.returncode == 0 else [nodelist]


def job(job_id: str) -> Job | None:
    """The job from scontrol (recent jobs), else sacct (where accounting is on); None when neither knows it."""
    if not str(job_id).isdigit():
        return None
    proc = _run(["scontrol", "show", "job", "-o", str(job_id)])
    if proc.returncode == 0 and proc.stdout.strip():
        f = _fields(proc.stdout.splitlines()[0])
        code, sig = _exit(f.get("ExitCode", ""))
        restarts = f.get("Restarts", "0")
        return Job(job_id=f.get("JobId", str(job_id)), state=f.get("JobState", "UNKNOWN").split()[0],
                   name=f.get("JobName", ""), comment=f.get("Comment", "") if f.get("Comment") != "(null)" else "",
                   work_dir=f.get("WorkDir", ""), reason=f.get("Reason", "None"), partition=f.get("Partition", ""),
                   nodes=hostnames(f.get("NodeList", "")), exit_code=code, signal=sig,
                   restarts=int(restarts) if restarts.isdigit() else 0)
    return _sacct_job(str(job_id))


def _sacct_job(job_id: str) -> Job | None:
    proc = _run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o",
                 "JobID,JobName,State,ExitCode,NodeList,Reason,WorkDir,Comment,Partition"])
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        parts = line.split("|")
        if len(parts) >= 9 and parts[0] == job_id:
            code, sig = _exit(parts[3])
            return Job(job_id=job_id, name=parts[1], state=parts[2].split()[0].rstrip("+"), exit_code=code,
                       signal=sig, nodes=hostnames(parts[4]), reason=parts[5], work_dir=parts[6],
                       comment=parts[7], partition=parts[8], source="sacct")
    return None


def jobs_named(name: str) -> list[str]:
    """Ids of the queued or running jobs with this job name (for a run.json that names no job, or another)."""
    proc = _run(["squeue", "-h", "--name", name, "-o", "%i"])
    return [j.strip() for j in proc.stdout.split() if j.strip().isdigit()] if proc.returncode == 0 else []


def down_nodes(nodes: list[str]) -> list[str]:
    """Those of `nodes` the scheduler holds down, not responding or failed."""
    out = []
    for node in nodes:
        proc = _run(["scontrol", "show", "node", "-o", node])
        state = _fields(proc.stdout).get("State", "") if proc.returncode == 0 else ""
        if any(word in state for word in ("DOWN", "NOT_RESPONDING", "FAIL")) or state.endswith("*"):
            out.append(node)
    return out


def cancel(job_id: str, signal: str | None = None) -> str | None:
    """scancel the job (or send it `signal`: its steps only, not the batch shell); None, or the error line."""
    args = ["scancel", *([f"--signal={signal}"] if signal else []), str(job_id)]
    proc = _run(args)
    return None if proc.returncode == 0 else first_error(proc)
