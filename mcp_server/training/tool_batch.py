"""Kept for runs emitted before the trainer package: their train/train.py (pinned by their inspection verdict)
imports this path. The code is training/trainer/tool_batch.py, which new runs import."""

from mcp_server.training.trainer.tool_batch import *  # noqa: F401,F403
