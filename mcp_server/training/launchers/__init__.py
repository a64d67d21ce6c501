"""Launchers: one per backend, each in its own folder, on one seam (base.py: `LaunchTarget` in, `LaunchPlan` out,
then files, a start, a state and a stop). BACKENDS is the one list of them, in the order they are asked: the first
that accepts a launch target launches it.

- slurm/       a job on one or more nodes (sbatch), when asked for or for more than one node
- accelerate/  several GPUs on this machine (`accelerate launch`: DDP, DeepSpeed ZeRO-2/3, FSDP2)
- local/       one process on this machine (one GPU or CPU), or CPU processes with torchrun

Each folder's __init__.py exports its launcher as LAUNCHER (named as its folder). Adding a backend is its folder
and its name here (docs/development.md, "Adding a launcher backend"). Shared by backends: base.py (the seam's
types, TRL's accelerate configs) and machine.py (processes, strategy and memory plan on one machine).

A launch record (run.json) names its backend (`backend`; none: this machine's process), which reads its state,
stops it and launches it again for resume_training (launcher_of).
"""

from __future__ import annotations

from importlib import import_module

from mcp_server.errors import UserInputError
from mcp_server.training.launchers.base import Launcher, LaunchPlan, LaunchTarget, Start, read_target

BACKENDS = ("slurm", "accelerate", "local")  # the registration: one folder name per backend, in the order asked

ORDER: tuple[Launcher, ...] = tuple(import_module(f"{__name__}.{name}").LAUNCHER for name in BACKENDS)
LAUNCHERS: dict[str, Launcher] = {launcher.name: launcher for launcher in ORDER}

__all__ = ["BACKENDS", "LAUNCHERS", "ORDER", "LaunchPlan", "LaunchTarget", "Launcher", "Start", "choose",
           "launcher_of", "read_target"]


def choose(target: LaunchTarget) -> Launcher:
    """The first launcher in ORDER that accepts `target`."""
    for launcher in ORDER:
        if launcher.accepts(target):
            return launcher
    raise UserInputError("launcher", "launcher=local runs on one machine: num_nodes 1, or launcher slurm")


def launcher_of(record: dict | None) -> Launcher:
    """The launcher that started the run whose launch record (run.json) this is: its `backend`, else this
    machine's process (local and accelerate runs are started, read and stopped alike)."""
    return LAUNCHERS.get((record or {}).get("backend") or "local", LAUNCHERS["local"])
