"""Pydantic results of the rewards door (`list_rewards`). Light: the MCP server imports it at start-up."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class RewardParam(BaseModel):
    name: str = Field(description="Parameter name, as written in a RewardSpec's `params`.")
    type: str = Field(description="Accepted type, e.g. 'str', 'list[str]', 'float', 'dict | list[dict]'.")
    default: Any = Field(
        default=None, description="Value used when the parameter is left out (null: required or none)."
    )
    required: bool = Field(default=False, description="True when the reward cannot be built without it.")
    description: str = Field(description="What the parameter does.")


class RewardInfo(BaseModel):
    name: str = Field(description="Registry name to put in RewardSpec.name (train/rewards.json).")
    description: str = Field(description="What the reward scores and the values it returns.")
    columns: list[str] = Field(
        default_factory=list, description="Data set columns the reward reads by default (renameable via params)."
    )
    params: list[RewardParam] = Field(default_factory=list, description="Parameters accepted in RewardSpec.params.")
    dotted_path: str | None = Field(
        default=None,
        description="Import path of the default-parameter function, usable directly as "
        "`trl grpo --reward_funcs <path>`; null when the reward needs parameters.",
    )
    example: dict = Field(description="A RewardSpec dict using this reward.")
    role: str = Field(
        default="shape", description="task: whether the task was done (the review's success rate counts it); format: "
        "the output's form (a success needs it too); shape: anything else (length, penalties).")
    scores: str | None = Field(
        default=None, description="The scores it gives before its weight, 'LOW to HIGH' (a parameter's name: its "
        "value); null when they depend on the samples or on a wrapped reward.")


class RewardCatalog(BaseModel):
    rewards: list[RewardInfo] = Field(description="Every reward in the registry.")
    user_rewards: str = Field(
        description="How to use your own reward: a dotted import path as RewardSpec.name, as `trl grpo` accepts."
    )
