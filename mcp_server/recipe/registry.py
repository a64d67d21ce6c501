"""The validation rules' one registry: every topic's rules, in the order they report.

A topic is a module with its RULES (recipe.context.Rule: the check and what it needs, recipe.context.NEEDS), the way
axolotl groups its config validators by topic (utils/schemas/validation.py: one mixin per topic, composed into one
config model). Registering a rule is one line in its topic's RULES; a new topic is one row here. `run` is the only
place rules are run, findings sorted and `valid` decided; memory.verdict.validate, the one entry point, supplies
what it can (the architecture, the memory plan) and every rule whose needs are met runs.
"""

from __future__ import annotations

from mcp_server.recipe import (architecture_rules, dynamic_sampling, field_rules, keep_rules, memory_rules,
                               rehearsal_rules, reward_rules, rules, run_rules, startup_rules, trl_rules)
from mcp_server.recipe.context import Context, Rule
from mcp_server.recipe.models import Finding, ValidationResult

# The order the rules report in (within a severity: findings are sorted errors first, stably).
TOPICS: tuple[tuple[str, tuple[Rule, ...]], ...] = (
    ("fields", field_rules.RULES),  # each value against TRL's fields
    ("run", rules.RULES),  # the run as a whole: batches, hardware, learning rate, precision, MoE, combinations
    ("rewards", reward_rules.RULES),
    ("start-up and effect", run_rules.RULES),  # what TRL accepts that crashes at start or trains without effect
    ("dynamic sampling", dynamic_sampling.RULES),  # what the trainer's dynamic sampling cannot honour
    ("start-up rehearsal", startup_rules.RULES),  # what GRPOTrainer.__init__ and vLLM refuse, from the config
    ("saving and logging", keep_rules.RULES),
    ("TRL's own checks", trl_rules.RULES),  # the agentic tool loop, then a real GRPOConfig
    ("architecture", architecture_rules.RULES),  # the model's context, start-up, vLLM's CPU head sizes
    ("rehearsal", rehearsal_rules.RULES),  # the run trained one step on a miniature; what only the target shows
    ("memory", memory_rules.RULES),  # the memory plan's verdict
)
REGISTRY: tuple[Rule, ...] = tuple(rule for _, topic in TOPICS for rule in topic)
_names = [rule.name for rule in REGISTRY]
if len(set(_names)) != len(_names):  # a rule registered twice would report twice
    raise ValueError(f"rules registered twice: {sorted({n for n in _names if _names.count(n) > 1})}")

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def run(ctx: Context) -> tuple[list[Finding], dict[str, list[str]]]:
    """(every finding, in registry order; {rule: the needs it lacked} for each rule that did not run). Each rule
    sees what the rules before it found (ctx.findings)."""
    not_run: dict[str, list[str]] = {}
    for rule in REGISTRY:
        lacking = ctx.lacking(rule.needs)
        if lacking:
            not_run[rule.name] = lacking
            continue
        ctx.findings.extend(rule.check(ctx))
    return ctx.findings, not_run


def result(findings: list[Finding], trl_version: str | None, target: str,
           not_run: dict[str, list[str]] | None = None) -> ValidationResult:
    """The validation's answer: findings errors first (stable within a severity), valid when none is an error."""
    ordered = sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])
    answer = ValidationResult(valid=not any(f.severity == "error" for f in ordered), findings=ordered,
                              trl_version=trl_version, target=target)
    answer.not_run.update(not_run or {})
    return answer
