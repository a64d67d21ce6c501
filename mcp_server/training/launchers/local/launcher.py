"""The local launcher: one detached process on this machine (one GPU or CPU), or several CPU processes with
torchrun (DDP over gloo; `accelerate launch --cpu` starts only one process without MPI).

It writes train/launch.sh (shell.py) and starts it in a new session (bash on the launch's own copy of it, outside
the workspace: launch_copy), stdout/stderr to train/logs/stdout.log, and returns at once; run.json records the
process's identity. Its state is read from that process and the run's files (process_state.py); stop asks the
trainer for a checkpoint, then signals the process group.
The accelerate launcher (accelerate.py) shares everything but the plan.
"""

from __future__ import annotations

import datetime as _dt
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psutil

from mcp_server.errors import UserInputError
from mcp_server.inspection.loader_env import LOADER_FILES_ENV, TRAINING_PATHS_ENV
from mcp_server.inspection.trained import REWARD_SHA_ENV, VERDICT_SHA_ENV
from mcp_server.training.trainer.verified_script import SCRIPT_SHA_ENV
from mcp_server.interpreter import training_env
from mcp_server.evidence import STATE_ENV, record_launch, sign_run
from mcp_server.runs import LAUNCH_ID_ENV, Run
from mcp_server.training.derived import DerivedState
from mcp_server.training.launchers.base import (
    REFUSED_EXIT,
    TRAIN_ARGS,
    LaunchPlan,
    LaunchTarget,
    Start,
    history,
    refuse_foreign_launch_files,
    trained_record,
    verdict_env,
    verdict_shell_pins,
    with_python_check,
    write_accelerate,
)
from mcp_server.training.launchers.local.shell import copy_text, render_launch_sh, vllm_server
from mcp_server.training.models import LaunchRequest, LaunchResult, StopResult
from mcp_server.training.launchers.local.process_state import process_state
from mcp_server.training.processes import launch_copies, launcher_command, run_processes, verified_launcher
from mcp_server.training.runrecord import derive_with, launch_of, sync_run_json, write_run_json
from mcp_server.training.stopping import stop_result
from mcp_server.workspace import (
    atomic_write_json,
    atomic_write_text,
    baseline_hashes,
    open_append_nofollow,
    sha256_file,
)

TERM_GRACE_S = 15  # after SIGTERM: how long the run's processes get before SIGKILL


class LocalLauncher:
    name = "local"
    checks_environment = True

    def accepts(self, target: LaunchTarget) -> bool:
        return target.request.num_nodes == 1  # one machine: one process, or CPU processes

    def plan(self, target: LaunchTarget) -> LaunchPlan:
        machine = target.machine
        notes = list(machine.notes)
        if machine.strategy == "single":
            command = [target.python, *TRAIN_ARGS, *target.extra]
        else:
            notes.append("CPU: DDP over gloo with torchrun (accelerate launch --cpu starts one process without MPI)")
            command = [target.python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                       str(machine.processes), *TRAIN_ARGS, *target.extra]
        return self._plan(target, command, notes)

    def _plan(self, target: LaunchTarget, command: list[str], notes: list[str],
              accelerate_config: dict | None = None) -> LaunchPlan:
        machine = target.machine
        server = vllm_server(target, machine.processes, machine.memory)
        script = render_launch_sh(target.run.name, target.python, command, target.cpu, server)
        return LaunchPlan(launcher=self.name, strategy=machine.strategy, num_processes=machine.processes,
                          num_nodes=1, train_command=command, script=script, accelerate_config=accelerate_config,
                          vllm=server.record() if server else None, notes=notes, memory=machine.memory)

    def check(self, plan: LaunchPlan) -> None:
        return None  # this machine's gates (environment, memory) are the launch tools'

    def write(self, run: Run, plan: LaunchPlan) -> dict[str, str]:
        """train/accelerate.yaml and train/launch.sh, with the check of the training interpreter against the one
        the verdict was recorded under (launchers.base.with_python_check) before it first runs."""
        refuse_foreign_launch_files(run, plan, run.launch_script, "written by llm-finetuning launch_training")
        written = write_accelerate(run, plan)
        python_pin, loader_pin = verdict_shell_pins(run)
        script = with_python_check(plan.script, plan.train_command[0], python_pin, REFUSED_EXIT, loader_pin)
        path = atomic_write_text_exec(run.launch_script, script)
        return {**written, "script": str(path), "script_text": script}

    def recorded(self, run: Run) -> list[Path]:
        return [run.config, run.script, run.rewards, run.request, run.launch_script, run.accelerate]

    def commit_message(self, run: Run, resumed: bool, config_sha256: str) -> str:
        return (f"llm-finetuning: {'resume' if resumed else 'launch'} {run.name} "
                f"(config {config_sha256[:12]})")

    def start(self, run: Run, plan: LaunchPlan, written: dict[str, str], start: Start) -> LaunchResult:
        """Start train/launch.sh detached and write run.json."""
        config_sha, script_sha = start.config_sha256 or sha256_file(run.config), sha256_file(run.script)
        python = plan.train_command[0]
        started_ts = time.time()
        launch_id = uuid.uuid4().hex
        pins = verdict_env(run)  # what the trainer checks against, and what this launch trains (trained_record)
        record_launch(run.dir, launch_id, trained=trained_record(run, config_sha, pins))  # outside the workspace:
        # whose records count, and what trained (evidence.record_launch)
        copy = launch_copy(run, written["script_text"], launch_id)
        proc, reward_sha = _spawn(run, python, start.resumed_from, launch_id, copy, pins)
        try:
            create_time = psutil.Process(proc.pid).create_time()
        except psutil.NoSuchProcess:
            create_time = None
        write_run_json(run, {
            "state": "starting", "pid": proc.pid,
            "pgid": proc.pid,  # new session: the launcher leads its own process group
            "create_time": create_time, "command": plan.train_command, "launcher": launcher_command(copy),
            "cwd": str(run.dir),
            "python": python,
            "started_at": _dt.datetime.fromtimestamp(started_ts, _dt.timezone.utc).isoformat(timespec="seconds"),
            "started_ts": started_ts, "config_sha256": config_sha, "launched_config": start.config_values,
            "train_script_sha256": script_sha,
            "reward_code_sha256": reward_sha, "git_commit": start.commit, "strategy": plan.strategy,
            "num_processes": plan.num_processes, "accelerate_config": written.get("accelerate_config"),
            "vllm_server": plan.vllm, "resumed_from": start.resumed_from, "resume_patch": start.patch,
            "env_verdict": start.env_verdict, "history": history(start.previous), "baselines": baseline_hashes(),
            "launch_id": launch_id})
        resumed = start.resumed_from
        return LaunchResult(
            launched=True, run_dir=str(run.dir), state="starting", pid=proc.pid, command=plan.train_command,
            config_sha256=config_sha, train_script_sha256=script_sha, git_commit=start.commit,
            log_path=str(run.stdout), accelerate_config=written.get("accelerate_config"), vllm_server=plan.vllm,
            resumed_from=resumed,
            message=f"{'resumed' if resumed else 'started'} {run.name} (pid {proc.pid}, {plan.strategy}, "
            f"{plan.num_processes} process{'es' if plan.num_processes > 1 else ''}); follow it with training_status")

    def state(self, run: Run, record: dict | None) -> DerivedState:
        """The verified process and the run's files (process_state.py)."""
        return process_state(run, record)

    def status_text(self, derived: DerivedState) -> str:
        return ""  # the process and its files say it all (pid, state, log tail)

    def stop(self, run: Run, derived: DerivedState, timeout_s: float, config: dict, note: str,
             kill: bool = False) -> StopResult:
        """Ask the run to stop at its next step end (it saves a checkpoint, then exits) and wait `timeout_s` for
        it. A run still in its step then is left stopping (it stops itself there: nothing is lost); with `kill`,
        its whole process group (vLLM server included) is terminated, then killed, and the result carries the
        loss as an error. Only a process verified to be this run's launcher, or one carrying this run's mark, is
        ever signalled."""
        record = derived.record
        pid, create_time = record.get("pid"), record.get("create_time")
        began = time.time()
        try:
            launch = launch_of(run, record)  # the launcher's signed record: run.json may be lost or rebuilt
            tag = {"launch_id": launch} if launch else {}
            atomic_write_json(run.inside(run.stop_request), sign_run(run, run.stop_request, {
                "requested_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "time": time.time(), "wait_s": timeout_s, **tag}, create=True))  # this launch's, never a later one's
            asked = True
        except (OSError, UserInputError):  # a full disk, a link: the request cannot be written; only a kill stops it
            asked = False
        graceful = asked and _wait_dead(run, pid, create_time, timeout_s)
        killed = False
        if not graceful and kill:
            _signal_run(run, pid, create_time, signal.SIGTERM)
            if not _wait_dead(run, pid, create_time, TERM_GRACE_S):
                _signal_run(run, pid, create_time, signal.SIGKILL)
                _wait_dead(run, pid, create_time, 5)
            killed = True
        waited = round(time.time() - began, 1)
        return stop_result(run, sync_run_json(run, derive_with(run, self.state)), config, graceful, killed,
                           waited, timeout_s, note, asked)

    def relaunch(self, record: dict, run_ref: str) -> LaunchRequest:
        return LaunchRequest(run=run_ref, num_processes=record.get("num_processes"),
                             strategy=record.get("strategy") or "auto", num_nodes=1, launcher="local")


def atomic_write_text_exec(path: Path, text: str) -> Path:
    written = atomic_write_text(path, text)
    written.chmod(0o755)
    return written


def launch_copy(run: Run, text: str, launch_id: str) -> Path:
    """The script bash runs: train/launch.sh's text as the launch wrote it after its gates (shell.copy_text), in a
    file of its own beside the evidence key (processes.launch_copies), outside the workspace, read back and
    checked against that text before it runs (issue 48, round 9, F1: bash reads its script as it runs, and the
    workspace's copy was rewritten in place during training). UserInputError when it cannot be written."""
    folder, body = launch_copies(), copy_text(text, str(run.dir.resolve())).encode()
    path = folder / f"{launch_id}.sh"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            same = f.read() == body
    except OSError as exc:
        raise UserInputError(STATE_ENV, f"cannot write the launch script's copy in {folder} (beside the evidence "
                                        f"key): {exc.strerror or exc}; nothing was started") from None
    if not same:
        path.unlink(missing_ok=True)
        raise UserInputError(STATE_ENV, f"the launch script's copy {path} is not what the launch wrote; nothing "
                                        "was started")
    return path


def _spawn(run: Run, python: str, resumed_from: str | None, launch_id: str,
           copy: Path, pins: dict[str, str]) -> tuple[subprocess.Popen, str | None]:
    """bash on the launch's copy of train/launch.sh (launch_copy) in a new session, in the run directory, its
    output appended to train/logs/stdout.log; returned once bash has exec'd, so the identity every later check
    verifies (pid, start time, command line, directory) is true."""
    run.logs.mkdir(parents=True, exist_ok=True)
    with open_append_nofollow(run.stdout) as log:  # the link gate refused links here; none is followed
        stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        log.write(f"==== llm-finetuning {'resume from ' + resumed_from if resumed_from else 'launch'} at {stamp}\n"
                  .encode())
        log.flush()
        # train.py imports this package: from the plugin folder when the training Python lacks it.
        env = {**training_env(python), "PYTHONUNBUFFERED": "1"}
        # What the verdict reviewed (its reward code, its own bytes, its train.py): the training process refuses
        # anything else (inspection.trained, trainer.verified_script); an inherited value is never passed on.
        for name in (REWARD_SHA_ENV, VERDICT_SHA_ENV, SCRIPT_SHA_ENV, TRAINING_PATHS_ENV, LOADER_FILES_ENV):
            env.pop(name, None)
        env.update(pins)
        env[LAUNCH_ID_ENV] = launch_id  # the trainer tags its records with it (runs.LAUNCH_ID_ENV)
        reward_sha = pins.get(REWARD_SHA_ENV)
        proc = subprocess.Popen(launcher_command(copy), cwd=run.dir, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    deadline = time.time() + 5
    while verified_launcher(run, proc.pid) is None and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    return proc, reward_sha


# ---------------------------------------------------------------- stop
def _all_gone(run: Run, pid: int | None, create_time: float | None) -> bool:
    """Neither the verified launcher nor any other process of the run (a trainer that outlived it) lives."""
    return verified_launcher(run, pid, create_time) is None and not run_processes(run, create_time)


def _wait_dead(run: Run, pid: int | None, create_time: float | None, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if _all_gone(run, pid, create_time):
            return True
        time.sleep(0.5)
    return _all_gone(run, pid, create_time)


def _signal_launcher(run: Run, pid: int, create_time: float | None, sig: int) -> None:
    """Signal the run's launcher and its process group (the trainer, its ranks, a vLLM server), only after
    verifying, right now, that `pid` is this run's launcher (start time, command line, directory)."""
    proc = verified_launcher(run, pid, create_time)
    if proc is None:
        return
    try:
        if os.getpgid(pid) == pid:  # it leads its own group (launch_training starts it in a new session)
            os.killpg(pid, sig)
        else:  # started some other way: the launcher alone
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError, psutil.Error):
        pass


def _signal_run(run: Run, pid: int | None, create_time: float | None, sig: int) -> None:
    """The verified launcher's group, then every other process still carrying this run's mark (launch.sh exports
    it; a trainer whose launcher was killed keeps it), each signalled once."""
    group = pid if verified_launcher(run, pid, create_time) is not None else None
    _signal_launcher(run, pid, create_time, sig)
    for proc in run_processes(run, create_time):
        try:
            if group is None or os.getpgid(proc.pid) != group:
                proc.send_signal(sig)
        except (psutil.Error, OSError):
            pass
