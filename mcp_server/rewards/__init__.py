"""Reward functions in TRL's signature, a registry by name, and the sandbox for model-written code.

Light at import (stdlib + pydantic): the MCP server imports `mcp_server.rewards.spec` at start-up.
Each registry reward that needs no parameter is also an attribute here, built with its defaults, usable directly as
a dotted path: `trl grpo --reward_funcs mcp_server.rewards.format_reward` (registry.default_reward).
"""

from mcp_server.rewards.registry import (
    REGISTRY, build_reward_funcs, default_reward, list_rewards, reward_code_sha256, reward_weights,
)
from mcp_server.rewards.spec import RewardSpec

__all__ = ["REGISTRY", "RewardSpec", "build_reward_funcs", "list_rewards", "reward_code_sha256", "reward_weights"]


def __getattr__(name: str):
    """`mcp_server.rewards.<reward name>`: the registry reward with its defaults (PEP 562, as `import_module` and
    `getattr` find it: TRL's CLI, a dotted reward path, `from mcp_server.rewards import format_reward`)."""
    return default_reward(name)
