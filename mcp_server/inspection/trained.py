"""What trains is what was reviewed: the training process's own check of its reward code.

launch_training passes the reward-code hash the verdict pinned (LLM_FINETUNING_REWARD_CODE_SHA256) to the
training process and records it in run.json. train/train.py builds its rewards with `reviewed_reward_funcs`,
which hashes the reward code as the process imports it, before and after building the functions, and exits
before training when either hash differs from the reviewed one: a helper edited after launch_training (and put
back later) cannot train unseen. Run by hand, without the launcher, the hash comes from the verdict; with no
verdict at all the script says its rewards were not reviewed and trains (the launcher never starts such a run).

Not covered (inspection.pins says what cannot be pinned): a module a reward imports lazily, at call time,
after this check.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mcp_server.rewards import build_reward_funcs, reward_code_sha256
from mcp_server.runs import Run

REWARD_SHA_ENV = "LLM_FINETUNING_REWARD_CODE_SHA256"


class RewardCodeChanged(SystemExit):
    """The reward code this process would train with is not the code the verdict reviewed."""


def reviewed_reward_sha256(run: Run) -> str | None:
    """The hash the launcher passed, else the one the run's verdict pinned (None: neither)."""
    passed = os.environ.get(REWARD_SHA_ENV, "").strip()
    return passed or verdict_reward_sha256(run)


def verdict_reward_sha256(run: Run) -> str | None:
    """The reward-code hash the run's verdict pinned (None: no readable verdict)."""
    try:
        verdict = json.loads(run.verdict.read_text())
    except (OSError, ValueError):
        return None
    pins = verdict.get("pins") if isinstance(verdict, dict) else None
    value = pins.get("reward_code") if isinstance(pins, dict) else None
    return value if isinstance(value, str) else None


def reviewed_reward_funcs(run_dir: str | Path) -> tuple[list, str]:
    """The run's reward functions (train/rewards.json) and their code's hash; raises RewardCodeChanged (exit
    status 3, one line saying what to do) when that code is not the reviewed code."""
    run = Run(Path(run_dir))
    rewards = json.loads(run.rewards.read_text())
    expected = reviewed_reward_sha256(run)
    before = reward_code_sha256(rewards)  # imports the reward modules, then reads their source
    funcs = build_reward_funcs(rewards)
    after = reward_code_sha256(rewards)
    if expected is None:
        print(f"llm-finetuning: the reward code ({after[:12]}) has no reviewed hash to check against (no verdict, "
              "not started by launch_training): its scores were not reviewed", file=sys.stderr, flush=True)
        return funcs, after
    if not before == after == expected:
        print(f"llm-finetuning: refusing to train: the reward code ({after[:12]}) is not the code the inspection "
              f"verdict reviewed ({expected[:12]}); a reward, its parameters or a module it imports changed since. "
              "Put it back, or sample and inspect again and record a new verdict, then launch again.",
              file=sys.stderr, flush=True)
        raise RewardCodeChanged(3)
    return funcs, after
