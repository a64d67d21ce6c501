"""The accelerate backend: several GPUs on this machine through `accelerate launch` (launcher.py). Only its plan is
its own: it writes, starts, reads and stops its run as the local backend does (it subclasses LocalLauncher)."""

from mcp_server.training.launchers.accelerate.launcher import AccelerateLauncher

LAUNCHER = AccelerateLauncher()
