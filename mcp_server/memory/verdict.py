"""The one validation entry point: every rule of the registry (recipe.registry) on a config for a target, with what
only this floor can supply: the model's architecture (memory.planner.architecture_of) and the memory plan
(memory.planner.plan). A config that needs more memory than the GPU has, or completions longer than the model's
context, is not valid for that target.

validate_grpo_config (the MCP tool and `validate-config`, through validate_config, which parses its request),
emit_grpo_config and the launch gate (validate_file, without the memory plan: the launch plans memory itself, for
the layout it launches) answer through `validate`. Only the checks of one config change (the lever search inside
the planner, a diagnosis or resume patch) call recipe.validate.validate_values without these supplies.
"""

from __future__ import annotations

from pathlib import Path

from mcp_server.memory import planner
from mcp_server.memory.settings import RunSettings
from mcp_server.recipe.memory_rules import PlannedMemory
from mcp_server.recipe.models import ValidateRequest, ValidationResult
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.recipe.validate import read_config, read_request_values, validate_values
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
    base = values.get("max_prompt_length") or RunSettings.model_fields["prompt_length"].default
    return schema, base + schema


def planned_memory(values: dict, gpu: str, num_gpus: int, agentic: dict | None,
                   vllm_server_gpus: int | None = None) -> PlannedMemory:
    """The memory plan of the config on the target (an agentic run's prompts planned with its tool schema), or why
    it could not be planned: what the memory rule (recipe.memory_rules) reads."""
    schema, prompt_length = agentic_prompt_tokens(values, agentic)
    lengths = {"prompt_length": prompt_length} if prompt_length else {}
    try:
        plan = planner.plan(values, gpu, num_gpus, vllm_server_gpus=vllm_server_gpus, **lengths)
    except ValueError as exc:  # a UserInputError (e.g. a hub model neither cached nor in the catalog) or a value
        return PlannedMemory(None, exc, f"{num_gpus}x {gpu}", schema, prompt_length)  # the planner cannot read
    return PlannedMemory(plan, None, f"{num_gpus}x {gpu}", schema, prompt_length)


def validate(values: dict, gpu: str = "H100", num_gpus: int = 1, *, reward_specs: list | None = None,
             override_reason: str | None = None, is_moe: bool | None = None, base_dir: Path | None = None,
             agentic: dict | None = None, prompt_column: str | None = None, memory: bool = True,
             vllm_server_gpus: int | None = None) -> ValidationResult:
    """The one validation entry point: every registered rule whose needs are met, given the model's architecture
    and, with `memory` on a GPU target, the memory plan. result.not_run names the rules that could not run and
    what they lacked."""
    supply = {"architecture": lambda: planner.architecture_of(None, values)}
    if memory and str(gpu).strip().lower() != "cpu":
        supply["memory_plan"] = lambda: planned_memory(values, gpu, num_gpus, agentic, vllm_server_gpus)
    return validate_values(values, gpu, num_gpus, reward_specs=reward_specs, override_reason=override_reason,
                           is_moe=is_moe, base_dir=base_dir, agentic=agentic, prompt_column=prompt_column,
                           supply=supply, vllm_server_gpus=vllm_server_gpus)


def validate_file(config_path: str | Path, gpu: str | None = None, num_gpus: int | None = None,
                  memory: bool = True, vllm_server_gpus: int | None = None) -> ValidationResult:
    """validate for a config file, with what is recorded beside it (the run's target unless given, its rewards,
    override reason and agentic record); `vllm_server_gpus`: a launch's server GPUs (config.target)."""
    values, kwargs = read_config(config_path, None, gpu, num_gpus)
    return validate(values, **kwargs, memory=memory, vllm_server_gpus=vllm_server_gpus)


def validate_config(request: ValidateRequest) -> ValidationResult:
    """validate_grpo_config's request parsed, then validate."""
    values, kwargs = read_request_values(request)
    return validate(values, **kwargs, vllm_server_gpus=request.vllm_server_gpus)
