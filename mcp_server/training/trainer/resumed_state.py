"""What a resume loaded besides the weights is what the run saved: the optimizer's moments and the schedule's step.

transformers' Trainer loads optimizer.pt and scheduler.pt (`_load_optimizer_and_scheduler`, before on_train_begin)
from the checkpoint confirm_resume_checkpoint hashed a moment earlier: a file renamed over either between the two
and put back after would resume from a state the run never wrote (the weights have had this check since round 10,
F2: script_support.ResumedWeights). Here each file is read once, its bytes hashed against the run's signed ledger,
and the state loaded from those bytes compared with what the optimizer and the scheduler hold now: the optimizer's
per-parameter state (its moments; the param groups' hyperparameters are the launch's own, resumed_settings.py) and
the scheduler's step. A DeepSpeed or FSDP optimizer restores through its own files and is not judged here.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt")  # the scaler: fp16's GradScaler, loaded too


def _same(saved, live) -> bool:
    """Nested state equal, a tensor as the optimizer casts it on load (its dtype and device)."""
    import torch

    if isinstance(saved, torch.Tensor) or isinstance(live, torch.Tensor):
        return (isinstance(saved, torch.Tensor) and isinstance(live, torch.Tensor) and saved.shape == live.shape
                and torch.equal(saved.to(dtype=live.dtype), live.detach().cpu()))
    if isinstance(saved, dict) and isinstance(live, dict):
        return saved.keys() == live.keys() and all(_same(saved[k], live[k]) for k in saved)
    if isinstance(saved, (list, tuple)) and isinstance(live, (list, tuple)):
        return len(saved) == len(live) and all(_same(a, b) for a, b in zip(saved, live))
    return saved == live


def _held(name: str, saved: dict, live: dict) -> tuple[object, object]:
    """The part of a file's state the resume keeps from it: the optimizer's state, the scheduler's step."""
    if name == "optimizer.pt":
        return saved.get("state"), live.get("state")
    if name == "scaler.pt":
        return saved, live
    return saved.get("last_epoch"), live.get("last_epoch")


def _read_state(name: str, holder, folder: Path) -> tuple[str, int, bool] | None:
    """(sha256, bytes, whether the state loaded from those same bytes is the part `holder` keeps) of one state file,
    read once; None when there is nothing to judge (no holder, no file)."""
    import torch

    path = Path(folder) / name
    if holder is None or not path.is_file():
        return None
    data = path.read_bytes()
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    same = isinstance(state, dict) and _same(*_held(name, state, holder.state_dict()))
    return hashlib.sha256(data).hexdigest(), len(data), same


def saved_state_read(optimizer, scheduler, folder: Path) -> tuple[dict[str, tuple[str, int]], list[str]]:
    """At a save (digest.record_save): ({state file: (sha256, bytes) of the read}, a line per file whose state is
    not the optimizer's or scheduler's in memory); the ledger then signs those sha256 (round 18)."""
    read, problems = {}, []
    for name, holder in zip(STATE_FILES, (optimizer, scheduler)):
        try:
            found = _read_state(name, holder, folder)
        except Exception as exc:  # noqa: BLE001 - not a state torch can load: not the one in memory
            problems.append(f"{name}: unreadable as the saved state ({type(exc).__name__})")
            continue
        if found is not None:
            read[name] = found[:2]
            if not found[2]:
                problems.append(f"{name}: not the state in memory")
    return read, problems


def resumed_state_problems(optimizer, scheduler, folder: Path, saved: dict[str, str], scaler=None) -> list[str]:
    """A line per state file of `folder` whose bytes are not the ledger's (`saved`: name -> sha256) or whose loaded
    state is not those bytes' state; [] when both are what the run saved (or there is nothing to judge)."""
    import torch

    problems = []
    for name, holder in zip(STATE_FILES, (optimizer, scheduler, scaler)):
        path = Path(folder) / name
        if holder is None or not path.is_file():
            continue
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != saved.get(name):
            problems.append(f"{name} is not the file saved" if name in saved else f"{name} is no file it saved")
            continue
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or not _same(*_held(name, state, holder.state_dict())):
            problems.append(f"{name}: the state loaded is not the state saved (the file was replaced during the "
                            "load)")
    return problems


# What transformers keeps from trainer_state.json at a resume (TrainerState.load_from_json in _init_training_state,
# and train()'s own read of train_batch_size); the step intervals are the arguments' (resumed_settings.py),
# max_steps, num_train_epochs and the process flags are set fresh.
KEPT_STATE = ("epoch", "global_step", "train_batch_size", "num_input_tokens_seen", "total_flos", "log_history",
              "best_metric", "best_global_step", "best_model_checkpoint", "stateful_callbacks")


def _text(value) -> str:
    import json

    return json.dumps(value, sort_keys=True, default=str)


def trainer_state_problems(state, trainer, folder: Path, saved: dict[str, str]) -> list[str]:
    """A line when trainer_state.json's bytes, read once here, are not the ledger's, or when the TrainerState the
    Trainer loaded from it by path (twice, after confirm_resume_checkpoint hashed it) is not the state in those bytes
    (round 20, b03: a file with global_step max_steps - 1 renamed in for the reads and put back after resumed one
    step and read "succeeded"), naming the fields that differ; [] when they hold."""
    import json

    path = Path(folder) / "trainer_state.json"
    if state is None or not path.is_file():
        return [] if state is None else ["trainer_state.json is missing"]
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != saved.get("trainer_state.json"):
        return ["trainer_state.json is not the file saved" if "trainer_state.json" in saved
                else "trainer_state.json is no file it saved"]
    held = json.loads(data)
    differ = [key for key in KEPT_STATE if key in held and _text(held[key]) != _text(getattr(state, key, None))
              and not (key == "best_model_checkpoint" and getattr(state, key, None) is None)]
    size = getattr(trainer, "_train_batch_size", None)  # train()'s read: the batch size auto_find_batch_size keeps
    if getattr(getattr(trainer, "args", None), "auto_find_batch_size", False) and held.get("train_batch_size") \
            not in (None, size):
        differ.append("the train batch size")
    return [f"trainer_state.json: the state loaded is not the state saved ({', '.join(differ)}: the file was "
            "replaced during the load)"] if differ else []


def held_rng_states(folder: Path, saved: dict[str, str]) -> tuple[dict[str, dict], list[str]]:
    """({rng_state*.pth name: the RNG state in its bytes}, a line per file not the ledger's): each read once, before
    transformers' _load_rng_state reads it by path in the first epoch (rng_matches judges what that load set)."""
    import torch

    held, problems = {}, []
    for path in sorted(Path(folder).glob("rng_state*.pth")):
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != saved.get(path.name):
            problems.append(f"{path.name} is not the file saved" if path.name in saved
                            else f"{path.name} is no file it saved")
            continue
        from transformers.trainer_pt_utils import safe_globals

        with safe_globals():  # NumPy's state, as transformers allows it for this file
            held[path.name] = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    return held, problems


def rng_matches(held: dict) -> bool:
    """Whether the process's RNG states (Python's, NumPy's, torch's CPU one, CUDA's when there is one) are those of
    `held` (an rng_state file's state): what transformers' _load_rng_state set from the file it read by path."""
    import random

    import numpy as np
    import torch

    live_np = np.random.get_state()
    same = _same(held.get("python"), random.getstate()) and len(held.get("numpy") or ()) == len(live_np) and all(
        np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b for a, b in zip(held["numpy"], live_np))
    same = same and isinstance(held.get("cpu"), torch.Tensor) and torch.equal(held["cpu"], torch.random.get_rng_state())
    if same and "cuda" in held and torch.cuda.is_available():
        cuda = held["cuda"]
        live = torch.cuda.get_rng_state_all() if isinstance(cuda, (list, tuple)) else torch.cuda.get_rng_state()
        same = _same(cuda, live)
    return bool(same)
