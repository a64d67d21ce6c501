"""Emission's part of an agentic run: the record of its environment and tools (train/agentic.json), the GRPOConfig
fields the tool loop needs, and which trainer template writes train/train.py (the trainer seam)."""

from __future__ import annotations

from pathlib import Path

from mcp_server.agentic.spec import AgenticRecord, find_root
from mcp_server.errors import UserInputError
from mcp_server.memory.settings import RunSettings
from mcp_server.recipe.models import GRPORecipeRequest
from mcp_server.recipe.grpo_fields import GRPOView
from mcp_server.userfiles import load_config_file
from mcp_server.worker import in_training
from mcp_server.worker_targets import SCHEMA_TOKENS
from mcp_server.workspace import workspace_root

TOOL_TURNS = 4  # tool-calling turns per rollout: TRL's default is unlimited
TRAINING = Path(__file__).parents[1] / "training"
# The trainer seam: one template per trainer, each importing training/script_support.py for what they share.
TRAINER_TEMPLATES = {
    "grpo": TRAINING / "train_template.py",
    "grpo_tools": TRAINING / "train_agentic_template.py",
}


def agentic_record(request: GRPORecipeRequest) -> AgenticRecord | None:
    """The environment and tools the request names, with the one directory they import from; None for a
    single-turn run."""
    if not request.environment and not request.tools:
        return None
    named = ([("environment", request.environment)] if request.environment else []) + [
        (f"tools[{i}]", path) for i, path in enumerate(request.tools)]
    candidates = [workspace_root(), Path.cwd()]
    roots = {find_root(path, candidates, field) for field, path in named}
    if len(roots) > 1:
        raise UserInputError(named[-1][0], "the environment and tools must import from one directory; found "
                                           + ", ".join(sorted(str(r) for r in roots)))
    return AgenticRecord(environment=request.environment, tools=list(request.tools), source_root=str(roots.pop()),
                         timeout_s=request.tool_timeout_s)


def trainer_name(record: AgenticRecord | None) -> str:
    return "grpo" if record is None else "grpo_tools"


def agentic_fields(record: AgenticRecord | None) -> tuple[dict, dict]:
    """GRPOConfig values (and why) an agentic run needs beyond the recipe."""
    if record is None:
        return {}, {}
    return ({"max_tool_calling_iterations": TOOL_TURNS},
            {"max_tool_calling_iterations": f"at most {TOOL_TURNS} tool-calling turns per rollout (TRL's default has "
                                            "no limit): every turn and tool result shares max_completion_length"})


def agentic_prompt_tokens(config_path: Path, agentic: dict | None) -> tuple[int, int | None]:
    """(tokens of the tool schema, the prompt length the memory plan should assume) for an agentic run; (0, None):
    not agentic, or the schema cannot be rendered here (validation names why)."""
    if not agentic:
        return 0, None
    config = load_config_file(str(config_path))
    try:
        given = GRPOView.given(config)
        schema = in_training(SCHEMA_TOKENS, agentic, given.model_name_or_path, given.model_revision)
    except Exception:  # noqa: BLE001 - no training interpreter, an offline hub model, a broken template
        return 0, None
    base = config.get("max_prompt_length") or RunSettings.model_fields["prompt_length"].default
    return schema, base + schema
