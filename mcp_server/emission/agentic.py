"""Emission's part of an agentic run: the record of its environment and tools (train/agentic.json), the GRPOConfig
fields the tool loop needs, and which trainer template writes train/train.py (the trainer seam)."""

from __future__ import annotations

from pathlib import Path

from mcp_server.agentic.budget import sized_reason
from mcp_server.agentic.spec import AgenticRecord, find_root
from mcp_server.config.recipe import Recipe, Setting
from mcp_server.errors import UserInputError
from mcp_server.recipe.models import GRPORecipeRequest
from mcp_server.worker import in_training
from mcp_server.worker_targets import TEMPLATE_FINDINGS, TURN_COST
from mcp_server.workspace import workspace_root

TOOL_TURNS = 4  # tool-calling turns per rollout: TRL's default is unlimited
TRAINING = Path(__file__).parents[1] / "training" / "trainer"
# The trainer seam: one template per trainer (training/trainer/), each importing its script_support.py.
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


def agentic_fields(record: AgenticRecord | None) -> Recipe:
    """GRPOConfig values (and why) an agentic run needs beyond the recipe."""
    if record is None:
        return Recipe()
    return Recipe.of({"max_tool_calling_iterations": TOOL_TURNS},
                     {"max_tool_calling_iterations": f"at most {TOOL_TURNS} tool-calling turns per rollout (TRL's "
                                                     "default has no limit): every turn and tool result shares "
                                                     "max_completion_length"}, "agentic")


def refuse_unparsed_template(record: AgenticRecord | None, model: str) -> None:
    """An agentic run on a chat template TRL cannot render or parse tool calls with is refused before anything is
    written or loaded (the tokenizer alone is read): its every tool call would fail at the trainer's start or be
    read as text. Where the tokenizer cannot be read here (no training interpreter, a hub model offline),
    validation names what it skipped."""
    if record is None:
        return
    try:
        found = in_training(TEMPLATE_FINDINGS, model, None)
    except Exception:  # noqa: BLE001 - no training interpreter, an offline hub model
        return
    errors = [f for f in found if f["severity"] == "error"]
    if errors:
        raise UserInputError("model", f"{model}: {errors[0]['message']}; {errors[0]['fix']}")


def turn_cost(record: AgenticRecord | None, model: str, rows: list[dict]) -> dict | None:
    """The costliest tool-calling turn of the run's tools (agentic.budget.turn_cost: call, result wrapper and result,
    measured with the model's tokenizer in the training interpreter, the environment reset with `rows`); None for a
    single-turn run or where it cannot be measured (validation names why)."""
    if record is None:
        return None
    try:
        return in_training(TURN_COST, record.model_dump(), model, None, rows) or None
    except Exception:  # noqa: BLE001 - no training interpreter, an offline hub model, a broken environment
        return None


def budget_length(cost: dict | None, turns, base: int) -> Setting | None:
    """max_completion_length for `turns` tool-calling turns of `cost` tokens each over `base`, the model's own text
    (the recipe's or TRL's length), with why; None for a single-turn run or one whose turns are not measured.
    Validation's rule (agentic.budget.turn_budget_findings) then says how the value holds the turns."""
    if not cost or not isinstance(turns, int) or isinstance(turns, bool) or turns < 1:
        return None
    return Setting(base + turns * cost["tokens"], sized_reason(base, turns, cost), "agentic")
