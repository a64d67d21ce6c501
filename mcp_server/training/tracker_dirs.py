"""Kept for runs emitted before the trainer package: their train/train.py (pinned by their inspection verdict)
imports this path. The code is training/trainer/tracker_dirs.py, which new runs import."""

from mcp_server.training.trainer.tracker_dirs import *  # noqa: F401,F403
