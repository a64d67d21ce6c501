"""Topic "TRL's own checks": what the installed TRL decides in the training interpreter. The tool loop's
requirements for an agentic run (agentic.checks, read from the tokenizer before any model loads), whether its
max_completion_length holds its tool-calling turns (agentic.budget, measured with the tokenizer), and a real
GRPOConfig built as if on the target, once no rule before it found an error (its message would repeat theirs)."""

from __future__ import annotations

from mcp_server.dataset import reset_rows
from mcp_server.recipe.context import Context, Rule, finding
from mcp_server.recipe.models import Finding
from mcp_server.recipe.trl_fields import grpo_config_error
from mcp_server.worker import in_training
from mcp_server.worker_targets import CHECK_AGENTIC, TURN_BUDGET


def rule_agentic_tool_loop(ctx: Context) -> list[Finding]:
    """TRL's tool-loop requirements for the run's tools and environment (agentic.json), from the tokenizer."""
    if not ctx.agentic:
        return []
    return [Finding(**f) for f in in_training(CHECK_AGENTIC, ctx.agentic, ctx.values)]


def rule_agentic_turn_budget(ctx: Context) -> list[Finding]:
    """An agentic run's budget against its turns (agentic.budget.turn_budget_findings): how the config's
    max_completion_length holds max_tool_calling_iterations turns of its costliest tool, measured with the model's
    tokenizer, the environment reset with the data set's first row (`agentic_completion_budget`, info), or how few
    of them it holds (`agentic_budget_below_turns`, a warning)."""
    if not ctx.agentic:
        return []
    rows = reset_rows(ctx.values, ctx.base_dir, ctx.prompt_column)
    return [Finding(**f) for f in in_training(TURN_BUDGET, ctx.agentic, ctx.values, rows)]


def rule_grpo_config(ctx: Context) -> list[Finding]:
    """TRL's GRPOConfig built from the config's GRPOConfig fields, transformers' device queries answering for the
    target GPU; without a training interpreter, a warning that TRL's checks did not run and how to get them."""
    skipped = ctx.trl_missing
    if skipped is not None:
        field = getattr(skipped, "field", None)
        return [finding(
            "trl_checks_skipped", field, "warning",
            "TRL's own checks did not run (unknown or renamed fields, choices, GRPOConfig's validation): "
            + str(skipped).removeprefix(f"{field}: "),
            # a training interpreter whose TRL does not import names its own fix (mcp_server.worker)
            "fix the training environment as said above (check_environment names it too), then validate again"
            if field == "environment" else
            "run prepare_environment, or set LLM_FINETUNING_PYTHON to your training environment's Python, "
            "then validate again")]
    if any(f.severity == "error" for f in ctx.findings):
        return []
    grpo_keys = {k for k, meta in ctx.trl["fields"].items() if meta["owner"] == "GRPOConfig"}
    capability = None if ctx.gpu is None else ctx.gpu.compute_capability  # TRL's checks answer for the target
    error = grpo_config_error({k: v for k, v in ctx.values.items() if k in grpo_keys}, ctx.training_processes,
                              capability)
    if not error:
        return []
    return [finding("trl_rejected", None, "error", f"TRL's GRPOConfig rejects this config: {error}",
                    "change the fields the message names")]


RULES = (Rule(rule_agentic_tool_loop, needs=("trl", "tokenizer")),
         Rule(rule_agentic_turn_budget, needs=("trl", "tokenizer")), Rule(rule_grpo_config))
