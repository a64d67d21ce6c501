"""Topic "memory": the memory plan's verdict for the target. memory.verdict.validate supplies the plan (needs
"memory_plan": a GPU target, when the caller asks; the launch gate does not, as the launch plans memory itself for
the layout it launches)."""

from __future__ import annotations

from typing import Any, NamedTuple

from mcp_server.config import FIELD
from mcp_server.errors import UserInputError
from mcp_server.recipe.context import Context, Rule, finding
from mcp_server.recipe.models import Finding


class PlannedMemory(NamedTuple):
    """What memory.verdict supplies as ctx.memory_plan."""

    plan: Any  # memory.models.MemoryPlan, None when it could not be planned
    # Why not: a UserInputError (e.g. a hub model neither cached nor in the catalog), or a ValueError (a value the
    # planner cannot read).
    error: Exception | None
    target: str  # the target as asked, e.g. "1x H100"
    schema: int = 0  # tokens of an agentic run's tool schema in every prompt (0: not agentic, or not measured)
    prompt_length: int | None = None  # the prompt length planned with it (None: the planner's default)


def rule_memory_fits(ctx: Context) -> list[Finding]:
    """An error when the peak exceeds the GPU (the run runs out of memory at its first step), a warning under 10%
    headroom, else an info line with the peak."""
    plan, exc, target, schema, prompt_length = ctx.memory_plan
    if isinstance(exc, UserInputError):
        said = any(f.code == "completion_beyond_context" for f in ctx.findings)
        if exc.field == FIELD.max_completion_length and said:  # the completion past the context: said already
            return []
        note = f" (prompts of {prompt_length} tokens: {schema} of them the tool schema)" if schema else ""
        return [finding("memory_not_planned", exc.field or "model_name_or_path", "warning",
                        f"memory NOT planned, so this verdict assumes the run fits {target} unchecked: "
                        f"{exc}{note}. Nothing here knows its size: a full fine-tune in float32 with a float32 "
                        "reference and no offload may need several times the GPU's memory.",
                        "give the model's config.json (a local directory, or download it once: `hf download "
                        "<model> config.json`), or call plan_memory with the architecture numbers")]
    if exc is not None:  # a value the planner cannot read (the rules above name it): no plan, no crash
        first = str(exc).splitlines()[0]
        return [finding("memory_not_planned", None, "info", f"memory not planned: {first}",
                        "fix the fields the errors above name, then validate again")]
    summary = f"planned peak {plan.peak_gib:.1f} GiB per GPU of {plan.capacity_gib:.1f} GiB on the {plan.gpu}"
    assumed = next((n for n in plan.notes if n.startswith("architecture assumed from")), None)
    if assumed:
        summary += f" ({assumed})"
    if schema:
        summary += f" (prompts of {prompt_length} tokens: {schema} of them the tool schema)"
    if plan.launch.training_processes > 1:  # the sharding launch_training will use
        summary += f" ({plan.launch.strategy} over {plan.launch.training_processes} training GPUs)"
    if plan.status == "fits":
        return [finding("memory_fits", None, "info", summary + f" ({plan.headroom_gib:.1f} GiB headroom).")]
    fix = "see plan_memory for the levers"
    if plan.recommended:
        fix = (f"apply {', '.join(plan.recommended.levers)} (peak {plan.recommended.peak_gib:.1f} GiB): "
               f"set {plan.recommended.patch}")
    elif plan.status == "does_not_fit":
        fix = "no combination of levers fits: this GPU is too small for the model; use a bigger GPU or more of them"
    if plan.status == "does_not_fit":
        problems = f" ({'; '.join(plan.notes[:1])})" if plan.notes and not plan.fits else ""
        return [finding("memory_does_not_fit", None, "error",
                        summary + f"; it does not fit{problems}: the run runs out of memory at its first step.", fix)]
    return [finding("memory_tight", None, "warning", summary + "; under 10% headroom.", fix)]


RULES = (Rule(rule_memory_fits, needs=("memory_plan",)),)
