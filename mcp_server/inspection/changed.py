"""What a gate-closed message names when the reward changed since the verdict (issue 49: "the reward changed"
alone sent a person hunting): the local module files that differ from the reviewed copy and the reward specs whose
params or weight moved."""

from __future__ import annotations

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

