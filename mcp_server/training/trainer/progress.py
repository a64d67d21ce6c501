"""The progress callback: one JSON line per logged step in train/logs/progress.jsonl (the run-directory contract:
docs/architecture.md, "The run directory"; runs.Run names every file).

Imported by train/train.py in the training interpreter, so it may import transformers at module level.

It also carries the run's two other conversations with the outside world, both through files so they work
whichever process (or a restarted server) asks:
- train/logs/train-begin.json: max_steps, world size and pid when training starts (for status and ETA);
- train/logs/env-<node>.json (a SLURM job): what each node's trainer runs on, from inside the job;
- train/logs/train-summary.json: the Trainer's end-of-training summary (train_runtime, train_loss, ...),
  kept out of progress.jsonl because it is not a step;
- train/logs/stop-request.json, written by stop_training: at the next step end every rank agrees to stop,
  the Trainer saves a checkpoint and leaves its loop; train/logs/stopped.json records it, and write_outcome
  then records the run as "stopped" rather than "succeeded".
- a signal: SIGUSR1 (and SIGTERM inside a SLURM job, where the scheduler sends it before a preemption or a
  cancel) is a stop request too: the next step end saves a checkpoint and stops, stopped.json says `"by":
  "signal"`. SLURM's --signal=USR1@<s> before the time limit, and stop_training's USR1 to a job, arrive here.
- the live guard (guard.py): on every log, the hard-failure diagnosis rules on the recent lines;
  their findings go to train/logs/guard.json, and with `guard: stop` a hard failure stops the run at that
  step (checkpoint saved, stopped.json says `"by": "guard"`). Every rank runs it on the same logged values
  (TRL gathers them), so all ranks stop at the same step without a collective.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from mcp_server.evidence import sign_run, valid_run
from mcp_server.runs import LAUNCH_ID_ENV, Run, read_json_if_present
from mcp_server.training.trainer.digest import record_save, refuse_save_outside, refuse_save_through, sharded
from mcp_server.training.trainer.guard import LiveGuard, read_guard, run_config, run_request
from mcp_server.workspace import atomic_write_json, open_append_nofollow

# Contract keys -> the TRL/transformers log names they are read from (first match wins).
PROGRESS_KEYS: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "train_loss"),
    "lr": ("learning_rate",),
    "reward": ("reward",),
    "reward_std": ("reward_std",),
    "frac_reward_zero_std": ("frac_reward_zero_std",),
    "kl": ("kl",),
    "entropy": ("entropy",),
    "completion_mean_length": ("completions/mean_length",),
    "clipped_ratio": ("completions/clipped_ratio",),
    "grad_norm": ("grad_norm",),
}


def record(run: Run, path: Path, data: dict) -> Path:
    """One of the run's records written atomically, only inside the run directory (Run.inside: a train/logs/ that
    became a link to another run or place mid-training is refused, never written through, so no other run reads
    this one's outcome) and tagged with this launch's id (run.json `launch_id`), so a reader knows whose it is;
    signed with the key outside the workspace (evidence.py): a copy written by hand reads as absent."""
    tag = os.environ.get(LAUNCH_ID_ENV)
    return atomic_write_json(run.inside(path), sign_run(run, path, {**data, **({"launch_id": tag} if tag else {})}))


def _gpu_stats() -> tuple[float | None, float | None]:
    """Peak allocated memory (GB) and temperature (C) of the current GPU; (None, None) on CPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None, None
        mem = torch.cuda.max_memory_allocated() / 1e9
        try:
            temp = float(torch.cuda.temperature())
        except Exception:  # needs pynvml; absent is fine
            temp = None
        return round(mem, 3), temp
    except Exception:
        return None, None


def _all_ranks_agree(flag: bool, device) -> bool:
    """True on every rank when any rank saw the stop request: ranks must leave the loop at the same step,
    or the ones still training wait forever in the next collective."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    import torch

    tensor = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item() > 0)


class ProgressCallback(TrainerCallback):
    """Appends a progress line on every `on_log` of the main process; a line is flushed when written,
    so nothing logged is lost when the training process dies. Honours stop requests at step ends."""

    def __init__(self, run_dir: str | Path, guard: str | None = None, spec=None):
        """`spec`: the run as the trainer read it once (recipe.runspec.RunSpec, inspection.trainer_read): the
        guard's mode, request and config come from it; without one the callback reads the request here and the
        config when training begins, each once."""
        self.run = Run(Path(run_dir))  # the emitted train.py's door: it passes the run directory's path
        self.spec = spec
        self.request = spec.request if spec is not None else (run_request(self.run) if guard is None else None)
        self.guard_mode = guard or self.request.guard
        self.guard: LiveGuard | None = None
        self.path = self.run.progress
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._stop_file = str(self.run.stop_request)
        self._last_time: float | None = None
        self._last_step = 0
        self._signalled: str | None = None
        self.stopped_early = False  # every rank: a stop asked (or the guard's) left the loop before max_steps
        self.trainer = None  # train_and_save's: its optimizer and schedule, which transformers' on_save omits
        self._catch_signals()

    def _catch_signals(self) -> None:
        """SIGUSR1 (and SIGTERM in a SLURM job) become a stop request at the next step end (checkpoint saved)."""
        wanted = [signal.SIGUSR1] if hasattr(signal, "SIGUSR1") else []
        if os.environ.get("SLURM_JOB_ID"):
            wanted.append(signal.SIGTERM)
        for sig in wanted:
            try:
                signal.signal(sig, self._on_signal)
            except (ValueError, OSError):  # not the main thread: the stop-request file still works
                pass

    def _on_signal(self, signum, frame) -> None:
        self._signalled = signal.Signals(signum).name

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_time = time.time()
        self._last_step = state.global_step
        if self.guard_mode != "off":  # the rules read the resolved GRPOConfig (beta, lr, vLLM settings) over
            # the run's config.yaml (which also holds the model's fields: use_peft, model_name_or_path)
            resolved = {k: v for k, v in args.to_dict().items() if isinstance(v, (int, float, str, bool, type(None)))}
            config = self.spec.values if self.spec is not None else run_config(self.run)
            self.guard = LiveGuard(self.run, self.guard_mode, {**config, **resolved},
                                   self.request if self.request is not None else run_request(self.run))
            if state.global_step > 0:  # a resume: the guard judges the run, from its earlier logged lines
                self.guard.resume(state.global_step)
        node = os.environ.get("SLURMD_NODENAME")
        if node and args.local_process_index == 0:  # a SLURM job: each node says what it runs on
            write_node_env(self.run, node)
        if state.is_world_process_zero:
            record(
                self.run, self.run.train_begin,
                {"max_steps": state.max_steps, "global_step": state.global_step, "world_size": args.world_size,
                 "pid": os.getpid(), "time": self._last_time, "output_dir": args.output_dir,
                 "learning_rate": _base_rate(kwargs.get("lr_scheduler"))},
            )

    def on_step_end(self, args, state, control, **kwargs):
        # One stat() per step; an all-reduce of one number only when running distributed.
        asked = os.path.exists(self._stop_file)
        if _all_ranks_agree(asked or self._signalled is not None, args.device):
            control.should_save = True
            control.should_training_stop = True
            self.stopped_early = True
            if state.is_world_process_zero:
                by = {} if asked or self._signalled is None else {"by": "signal", "signal": self._signalled}
                record(self.run, self.run.stopped, {"step": state.global_step, "time": time.time(), **by})
        self._refuse_saving_outside(args, state)  # before this step's log (TRL's completions) and save
        return control

    def _refuse_saving_outside(self, args, state) -> None:
        """Before each save (it follows the step's end and its log): output_dir, and the checkpoint folder this
        step would save into, still resolve inside the run (digest.refuse_save_outside; round 12, D1). Relative
        to the current directory, as the Trainer saves (the run directory, where the launch starts it)."""
        out = getattr(args, "output_dir", None)  # a Trainer's arguments always name it
        if out is not None:
            refuse_save_outside(self.run, Path(out))
            refuse_save_outside(self.run, Path(out) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            # and no entry there a save writes through: TRL's card in output_dir, the checkpoint's files (round 20)
            refuse_save_through(self.run, Path(out), recursive=False)
            refuse_save_through(self.run, Path(out) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")

    def on_save(self, args, state, control, **kwargs):
        """After the Trainer's last file of checkpoint-N: the digest of what it saved, recorded in the run's ledger
        (digest.record_save), which makes the checkpoint complete and lets a resume check it loads what the run
        wrote: the weights, optimizer, scheduler, trainer state, config and tokenizer files as read back equal to the
        trainer's in memory."""
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            if folder.is_dir():  # its files compared with what they were saved from (round 18)
                held = {} if sharded(args) else {"model": kwargs.get("model"), "state": state, **{
                    name: kwargs.get(name) or getattr(self.trainer, name, None)
                    for name in ("optimizer", "lr_scheduler")}, "tokenizer": kwargs.get("processing_class")}
                record_save(self.run, folder, state.global_step, **held)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:
            return self._write_log(state, logs)
        line = self._write_log(state, logs)
        if self.guard is not None:
            self._guard(state, control, line or {"step": state.global_step, **logs})
        self._refuse_saving_outside(args, state)  # a save the guard asked for follows
        return control

    def on_train_end(self, args, state, control, **kwargs):
        """The guard's last look, once the summary is written: a run that trained 0 steps, or whose every logged
        update after the run's first log had no signal (however few: a 2-step run), is a hard failure. No save
        follows now: the checkpoint is the one the loop left at this step, if any."""
        if self.guard is not None:
            folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            self._guard(state, control, {"step": state.global_step}, saved=folder.is_dir())
        return control

    def _guard(self, state, control, line: dict, saved: bool | None = None) -> None:
        decision = self.guard.check(line, write=state.is_world_process_zero)
        if decision:
            control.should_training_stop = True
            control.should_save = decision["save"]
            self.stopped_early = True
            if state.is_world_process_zero:
                kept = decision["save"] if saved is None else decision["save"] and saved
                record(self.run, self.run.stopped, {"step": state.global_step, "time": time.time(), "by": "guard",
                                                     "code": decision["code"], "checkpoint_saved": kept})

    def _write_log(self, state, logs) -> dict | None:
        """The progress line (rank 0 writes it); None on other ranks and for the end-of-training summary."""
        if not state.is_world_process_zero or not logs:
            return None
        if "train_runtime" in logs:  # the end-of-training summary is not a step: it gets its own file
            record(self.run, self.run.train_summary, {"step": state.global_step, **logs})
            return
        now = time.time()
        steps = max(state.global_step - self._last_step, 1)
        step_time = (now - self._last_time) / steps if self._last_time else None
        self._last_time, self._last_step = now, state.global_step
        mem_gb, temp_c = _gpu_stats()
        line = {"step": state.global_step, "epoch": state.epoch, "time": round(now, 3)}
        for key, sources in PROGRESS_KEYS.items():
            line[key] = next((logs[s] for s in sources if s in logs), None)
        line.update(mem_gb=mem_gb, temp_c=temp_c, step_time=round(step_time, 4) if step_time else None)
        for key, value in logs.items():  # every other metric under its TRL name
            line.setdefault(key, value)
        tag = os.environ.get(LAUNCH_ID_ENV)
        line = sign_run(self.run, self.path, {**line, **({"launch_id": tag} if tag else {})}, default=float)
        # a link planted here, or train/logs become one, is refused: never written through
        with open_append_nofollow(self.run.inside(self.path)) as handle:
            handle.write((json.dumps(line) + "\n").encode("utf-8"))
            handle.flush()
        return line


def write_node_env(run: Run, node: str) -> Path:
    """train/logs/env-<node>.json: the packages, GPUs and CUDA this node's trainer sees (check_environment's probe,
    from inside the job), its host and CPUs."""
    import socket

    from mcp_server.training.environment import probe_interpreter

    report = {"node": node, "host": socket.gethostname(), "job_id": os.environ.get("SLURM_JOB_ID"),
              "cpu_count": os.cpu_count(), "time": time.time(), **probe_interpreter()}
    return record(run, run.node_env(node), report)


def write_outcome(run_dir: str | Path, state: str, **info) -> Path:
    """Record how training ended (train/logs/outcome.json), written atomically. A run that left its loop
    because stop_training or the guard asked is recorded as "stopped", whatever train.py says; one that took no
    optimizer step, or that the guard stopped because its signal was lost, as "failed": never "succeeded". With
    `guard: warn` a lost signal leaves the state but is named in `warnings` (the emitted train.py's door: it passes
    the run directory's path)."""
    run = Run(Path(run_dir))
    if state == "succeeded":
        failure, warnings = _silent_failure(run, info.get("global_step"))
        if failure:
            state, info = "failed", {**info, "error": failure}
        elif _own(run, run.stopped) is not None:  # the trainer's stop of this launch, never a file written by hand
            state = "stopped"
        if warnings:
            info = {**info, "warnings": warnings}
    return record(run, run.outcome, {"state": state, "time": time.time(), **info})


def _base_rate(scheduler) -> float | None:
    """The rate the schedule runs from (its first group's base_lrs): after a resume, what resumed_settings put
    back, so training_status and diagnose_run can hold it to the config's learning_rate (issue 49)."""
    rates = getattr(scheduler, "base_lrs", None)
    return float(rates[0]) if isinstance(rates, list) and rates else None


def _own(run: Run, path: Path) -> dict | None:
    """The record at `path` as this launch's trainer wrote it (record: signed there, tagged with this launch's
    id), None otherwise: what decides the outcome is never a file written by hand or left by another launch."""
    try:
        value = read_json_if_present(path)
    except Exception:
        return None
    tag = os.environ.get(LAUNCH_ID_ENV)
    if not isinstance(value, dict) or not valid_run(run, path, value):
        return None
    return value if tag is None or value.get("launch_id") == tag else None


def _silent_failure(run: Run, global_step) -> tuple[str | None, list[str]]:
    """(why a run that ended normally did not succeed, warnings): 0 steps trained, or a lost signal the guard
    stopped on (with `guard: warn`, a lost signal in its last findings is a warning)."""
    begin = _own(run, run.train_begin)
    if isinstance(begin, dict) and isinstance(global_step, int) and global_step <= begin.get("global_step", -1):
        return f"trained 0 steps (ended at step {global_step}, where it began): see train/logs/guard.json", []
    guard = read_guard(run, os.environ.get(LAUNCH_ID_ENV)) or {}
    stopped = guard.get("stopped") if isinstance(guard.get("stopped"), dict) else {}
    if stopped.get("code") == "signal_lost":
        return f"signal_lost at step {stopped.get('step')}: the run learned nothing (train/logs/guard.json)", []
    lost = [f for f in guard.get("findings") or [] if isinstance(f, dict) and f.get("code") == "signal_lost"
            and f.get("severity") == "error"]
    return None, [f"signal_lost: {lost[0].get('explanation', '')}"] if lost else []
