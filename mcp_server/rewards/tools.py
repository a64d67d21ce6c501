"""The rewards' tool: `list_rewards` and its readable catalog."""

from __future__ import annotations

import json

from mcp_server.rewards.models import RewardCatalog
from mcp_server.rewards.registry import list_rewards
from mcp_server.toolspec import READS, Command, ToolSpec


def human_rewards(catalog: RewardCatalog) -> str:
    lines = []
    for info in catalog.rewards:
        lines.append(f"{info.name}" + (f"   (dotted path: {info.dotted_path})" if info.dotted_path else ""))
        lines.append(f"  {info.description}")
        for p in info.params:
            default = "required" if p.required else f"default {json.dumps(p.default)}"
            lines.append(f"    {p.name} ({p.type}, {default}): {p.description}")
        lines.append("")
    lines.append(catalog.user_rewards)
    return "\n".join(lines)


TOOLS = [
    ToolSpec(
        "list_rewards", list_rewards, RewardCatalog, effects=READS,
        description="""The reward registry: each reward's name, what it scores, the data set columns it reads and its
    parameters with defaults. Name rewards in a recipe as {name, params, weight}; a dotted import path
    names your own reward function.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command("List the reward registry: names, what each scores, parameters.", human_rewards),
    ),
]
