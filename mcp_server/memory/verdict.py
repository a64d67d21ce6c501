"""The one validation entry point: every rule of the registry (recipe.registry) on a config for a target, with what
only this floor can supply: the model's architecture (memory.planner.architecture_of) and the memory plan
(memory.planner.plan). A config that needs more memory than the GPU has, or completions longer than the model's
context, is not valid for that target.

validate_grpo_config (the MCP tool and `validate-config`, through validate_config, which parses its request),
emit_grpo_config and the launch gate (without the memory plan: the launch plans memory itself, for the layout it
launches) answer through `validate`, each with the run as one value (recipe.runspec.RunSpec). Only the checks of
one config change (the lever search inside the planner, a diagnosis or resume patch) call recipe.validate without
these supplies.
"""

from __future__ import annotations

import functools

from mcp_server.memory import planner
from mcp_server.memory.settings import DEFAULTS as SETTING_DEFAULTS
from mcp_server.recipe.memory_rules import PlannedMemory
from mcp_server.recipe.context import finding
from mcp_server.recipe.models import ValidateRequest, ValidationResult
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.recipe import rehearsal
from mcp_server.recipe.runspec import RunSpec
from mcp_server.recipe.validate import request_spec, validate_spec
from mcp_server.interpreter import user_code_allowed
from mcp_server.worker import in_training
from mcp_server.worker_targets import SCHEMA_TOKENS


def agentic_prompt_tokens(values: dict, agentic: dict | None) -> tuple[int, int | None]:
    """(tokens of the tool schema, the prompt length the memory plan should assume) for an agentic run (the chat
    template renders the tools' schema into every prompt: agentic.checks.schema_tokens, measured with the model's
    tokenizer); (0, None): not agentic, or the schema cannot be rendered here (validation names why)."""
    if not agentic:
        return 0, None
    try:
        given = GRPOView.given(values)
        schema = in_training(SCHEMA_TOKENS, agentic, given.model_name_or_path, given.model_revision)
    except Exception:  # noqa: BLE001 - no training interpreter, an offline hub model, a broken template
        return 0, None
    base = values.get("max_prompt_length") or SETTING_DEFAULTS["prompt_length"]
    return schema, base + schema


def planned_memory(spec: RunSpec) -> PlannedMemory:
    """The memory plan of the run on its target (an agentic run's prompts planned with its tool schema), or why
    it could not be planned: what the memory rule (recipe.memory_rules) reads."""
    values, target = spec.fields, spec.target
    schema, prompt_length = agentic_prompt_tokens(values, spec.agentic)
    lengths = {"prompt_length": prompt_length} if prompt_length else {}
    where = f"{target.num_gpus}x {target.gpu}"
    try:
        plan = planner.plan(spec, **lengths)
    except ValueError as exc:  # a UserInputError (e.g. a hub model neither cached nor in the catalog) or a value
        return PlannedMemory(None, exc, where, schema, prompt_length)  # the planner cannot read
    return PlannedMemory(plan, None, where, schema, prompt_length)


def validate(spec: RunSpec, memory: bool = True, rehearse: bool = False) -> ValidationResult:
    """The one validation entry point: every registered rule whose needs are met, given the model's architecture,
    with `memory` on a GPU target the memory plan, and with `rehearse` the run trained one step on a miniature
    (recipe.rehearsal). result.not_run names the rules that could not run and what they lacked."""
    architecture = functools.cache(lambda: planner.architecture_of(None, spec.fields))  # read once, for both
    supply = {"architecture": architecture}
    if memory and not spec.target.cpu:
        supply["memory_plan"] = lambda: planned_memory(spec)
    if rehearse and user_code_allowed():  # the rehearsal trains a step with the run's rewards: user code
        supply["rehearsal"] = lambda: rehearsal.rehearse(spec, _or_none(architecture))
    result = validate_spec(spec, supply)
    if rehearse and not user_code_allowed():
        result.findings.append(finding(
            "rehearsal_not_run", None, "info", "the one-step rehearsal did not run: the read-only mode runs no user "
            "code (it would train a step with the run's rewards)", "validate without the read-only mode to rehearse"))
    return result


def _or_none(architecture):
    try:
        return architecture()
    except ValueError:  # no model, or one neither on disk nor in the catalog: the rehearsal says it cannot build it
        return None


def validate_config(request: ValidateRequest) -> ValidationResult:
    """validate_grpo_config's request: the run it names (recipe.validate.request_spec), validated (and rehearsed
    unless the request says not to)."""
    return validate(request_spec(request), rehearse=request.rehearse)
