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

STATE_FILES = ("optimizer.pt", "scheduler.pt")


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


def resumed_state_problems(optimizer, scheduler, folder: Path, saved: dict[str, str]) -> list[str]:
    """A line per state file of `folder` whose bytes are not the ledger's (`saved`: name -> sha256) or whose loaded
    state is not those bytes' state; [] when both are what the run saved (or there is nothing to judge)."""
    import torch

    problems = []
    for name, holder in zip(STATE_FILES, (optimizer, scheduler)):
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
