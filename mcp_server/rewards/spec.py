"""How a config names a reward: a registry name or a dotted import path, its parameters and weight.

Light on purpose (pydantic only): the MCP door imports it at start-up.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mcp_server.inputs import Name, Request


class RewardSpec(Request):
    name: Name = Field(
        description="A reward registry name (see the `reward-functions` reference: format_reward, "
        "correctness_reward, math_reward, json_schema_reward, code_execution_reward, ...) or a dotted import "
        "path to a function in TRL's reward signature (e.g. 'my_pkg.rewards.my_reward')."
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="Keyword parameters for the reward factory (registry rewards only)."
    )
    weight: float = Field(default=1.0, description="Weight of this reward in the sum (TRL `reward_weights`).")
