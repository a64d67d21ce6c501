"""Reward functions in TRL's signature, a registry by name, and the sandbox for model-written code.

Light at import (stdlib + pydantic): the MCP server imports `mcp_server.rewards.spec` at start-up.
The module-level rewards below are the default-parameter versions, usable directly as dotted paths:
`trl grpo --reward_funcs mcp_server.rewards.format_reward`.
"""

from mcp_server.rewards.basic import correctness_reward, format_reward
from mcp_server.rewards.code import code_execution_reward
from mcp_server.rewards.json_schema import json_schema_reward
from mcp_server.rewards.math_equivalence import math_reward
from mcp_server.rewards.registry import REGISTRY, build_reward_funcs, list_rewards, reward_code_sha256, reward_weights
from mcp_server.rewards.spec import RewardSpec

__all__ = [
    "REGISTRY",
    "RewardSpec",
    "build_reward_funcs",
    "code_execution_reward",
    "correctness_reward",
    "format_reward",
    "json_schema_reward",
    "list_rewards",
    "math_reward",
    "reward_code_sha256",
    "reward_weights",
]
