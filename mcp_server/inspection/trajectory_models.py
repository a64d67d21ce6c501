"""Request and result of sample_trajectories (an agentic run's rollouts through TRL's own tool loop)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from mcp_server.inputs import PathText, Request


class TrajectoryRequest(Request):
    run: PathText = Field(description="An agentic run directory (with train/agentic.json), a path or a name under "
                                      "runs/; gets inspection/trajectories.jsonl.")
    num_prompts: int = Field(default=8, ge=1, le=256, description="Prompts to draw (at random, by seed); each is "
                                                                 "rolled out num_generations times as training would.")
    seed: int = Field(default=0, description="Seed for the prompt draw, sampling and the environments.")


class TrajectoryCode(BaseModel):
    code: str = Field(description="Stable snake_case code of what was found.")
    severity: str = Field(description="error (training would learn from broken trajectories) or warning.")
    count: int = Field(description="How many trajectories (or tool calls, as the message says) show it.")
    message: str = Field(description="What it is, with the counts and examples.")


class TrajectoryResult(BaseModel):
    run_dir: str = Field(description="The run directory.")
    trajectories_path: str = Field(description="inspection/trajectories.jsonl: one JSON line per rollout.")
    num_trajectories: int = Field(description="Rollouts written (num_prompts x num_generations).")
    tool_calls: dict = Field(description="Tool calls by status: executed, failed, dropped (rolled back by the "
                                         "budget or the turn cap), unparsed (an attempt TRL did not read as a call).")
    codes: list[TrajectoryCode] = Field(description="What the review found, errors first; empty when clean.")
    trl_metrics: dict = Field(description="TRL's own tool metrics for this batch (tools/call_frequency, "
                                          "tools/failure_frequency), for comparison: they miss drops and "
                                          "unparsed calls.")
    seconds: float = Field(description="Wall time.")
    next_step: str = Field(description="What to do next.")
