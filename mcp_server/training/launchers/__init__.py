"""Launchers: one per backend, on one seam (base.py: `LaunchTarget` in, `LaunchPlan` out, then files, a start
and a stop). ORDER is the one list of them: the first that accepts a launch target launches it.

- slurm.py       a job on one or more nodes (sbatch), when asked for or for more than one node
- accelerate.py  several GPUs on this machine (`accelerate launch`: DDP, DeepSpeed ZeRO-2/3, FSDP2)
- local.py       one process on this machine (one GPU or CPU), or CPU processes with torchrun

A launch record (run.json) names its backend (`backend`; none: this machine's process), which stops it and
launches it again for resume_training (launcher_of).
"""

from __future__ import annotations

from mcp_server.errors import UserInputError
from mcp_server.training.launchers.accelerate import AccelerateLauncher
from mcp_server.training.launchers.base import Launcher, LaunchPlan, LaunchTarget, Start, read_target
from mcp_server.training.launchers.local import LocalLauncher
from mcp_server.training.launchers.slurm import SlurmLauncher

ORDER: tuple[Launcher, ...] = (SlurmLauncher(), AccelerateLauncher(), LocalLauncher())
LAUNCHERS: dict[str, Launcher] = {launcher.name: launcher for launcher in ORDER}

__all__ = ["LAUNCHERS", "ORDER", "LaunchPlan", "LaunchTarget", "Launcher", "Start", "choose", "launcher_of",
           "read_target"]


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
