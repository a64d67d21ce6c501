"""How a config names a reward: a registry name or a dotted import path, its parameters and weight.

Light on purpose (pydantic and yaml, no torch): the MCP door imports it at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from mcp_server.errors import UserInputError, short, validation_message
from mcp_server.inputs import Name, Request
from mcp_server.userfiles import read_json


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


def read_reward_specs(path: str | Path, field: str) -> list[RewardSpec]:
    """A rewards.json: a JSON list of reward specs {name, params, weight}, each checked like a request's."""
    specs = read_json(path, field, list)
    try:
        return [RewardSpec.model_validate(spec) for spec in specs]
    except ValidationError as exc:
        raise UserInputError(field, f"{short(path)} is not a list of reward specs {{name, params, weight}}: "
                             f"{validation_message(exc, RewardSpec)}") from None
