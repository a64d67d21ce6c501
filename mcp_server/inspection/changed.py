"""What a gate-closed message names when the reward changed since the verdict (issue 49: "the reward changed"
alone sent a person hunting): the local module files that differ from the reviewed copy and the reward specs whose
params or weight moved."""

from __future__ import annotations

import hashlib
import json

from mcp_server.errors import UserInputError
from mcp_server.inspection.trained import unkept_reward_code
from mcp_server.runs import Run


def reward_change_detail(run: Run, verdict, rewards: list) -> str | None:
    """Which reward file or spec changed since the verdict: the local modules that differ from the reviewed copy
    (inspection/reward_code/), and the names whose spec in train/rewards.json differs from the verdict's."""
    said = []
    if run.reward_code.is_dir():
        try:
            files = unkept_reward_code(run, rewards)
        except UserInputError:
            files = []
        said += [f"{name} changed" for name in files]
    reviewed = {r.get("name"): r for r in (getattr(verdict, "rewards", None) or []) if isinstance(r, dict)}
    now = {}
    for spec in rewards:
        spec = spec.model_dump() if hasattr(spec, "model_dump") else spec if isinstance(spec, dict) else {"name": spec}
        now[spec.get("name")] = spec
    if reviewed:
        for name in dict.fromkeys([*reviewed, *now]):
            old, new = reviewed.get(name), now.get(name)
            if old is None or new is None:
                said.append(f"train/rewards.json {'adds' if old is None else 'drops'} {name}")
                continue
            fields = [k for k in ("params", "weight") if old.get(k) != new.get(k)]
            if fields:
                said.append(f"train/rewards.json: {name}'s " + ", ".join(
                    f"{k} {_brief_json(old.get(k))} -> {_brief_json(new.get(k))}" for k in fields))
    return "; ".join(said) or None


def _brief_json(value) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


# The verdict's sha256 of each file of the reviewed copy (inspection/reward_code/): the trainer names the one that
# is not the verdict's when the reward-code hash differs (issue 48, round 15).
REWARD_SHAS = "reward_code_file_sha256"


def copy_shas(run: Run, files: list[str]) -> dict[str, str]:
    """relative path -> sha256 of each file of the reviewed copy, as recording the verdict left it."""
    return {relative: hashlib.sha256((run.reward_code / relative).read_bytes()).hexdigest() for relative in files}


def copy_changes(run: Run, verdict: dict | None) -> list[str]:
    """Why the reward code the trainer imported is not the reviewed code, file by file: each file of the reviewed
    copy whose bytes are not the verdict's now, and each module that ran other bytes than its file holds now
    (rewards.sources.MOVED: a module that rewrote its own file at its import)."""
    from mcp_server.rewards.sources import MOVED

    shas = (verdict or {}).get(REWARD_SHAS)
    said = []
    for relative, sha in (shas.items() if isinstance(shas, dict) else []):
        path = run.reward_code / str(relative)
        try:
            now = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"
        except OSError:
            now = "unreadable"
        if now != sha:
            said.append(f"{path}: sha256 {str(sha)[:12]} reviewed, {now[:12]} now")
    return said + list(MOVED.values())
