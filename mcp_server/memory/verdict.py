"""Validation for a target, memory included: the recipe's rules (recipe.validate) plus what only the planner knows,
the model's architecture. A config that needs more memory than the GPU has, or completions longer than the
model's context, is not valid for that target.

`validate` is the one validation entry point: validate_grpo_config (the MCP tool and `validate-config`, through
validate_config, which parses its request), emit_grpo_config and the launch gate (validate_file, without the memory
plan: the launch plans memory itself, for the layout it launches) answer through it. Only the lever checks inside
the planner, which judge one config change at a time, use recipe.validate.validate_values directly.
"""

from __future__ import annotations

from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.memory import planner
from mcp_server.memory.settings import RunSettings
from mcp_server.memory.startup import startup_findings
from mcp_server.recipe.models import Finding, ValidateRequest, ValidationResult
from mcp_server.recipe.context import finding
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.recipe.validate import SEVERITY_ORDER, read_config, read_request_values, validate_values
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


def memory_findings(values: dict, gpu: str, num_gpus: int, prompt: tuple[int, int | None] = (0, None),
                    context_reported: bool = False) -> list[Finding]:
    """The planner's verdict for the config on the target: an error when the peak exceeds the GPU (the run runs out
    of memory at its first step), a warning under 10% headroom, else an info line with the peak. `prompt`: (tokens
    of an agentic run's tool schema, the prompt length to plan with it), (0, None) for the planner's default."""
    schema, prompt_length = prompt
    lengths = {"prompt_length": prompt_length} if prompt_length else {}
    try:
        plan = planner.plan(values, gpu, num_gpus, **lengths)
    except UserInputError as exc:  # e.g. a hub model neither cached nor in the catalog
        if exc.field == "max_completion_length" and context_reported:  # completion past the context: said already
            return []
        note = f" (prompts of {prompt_length} tokens: {schema} of them the tool schema)" if schema else ""
        return [finding("memory_not_planned", exc.field or "model_name_or_path", "warning",
                        f"memory NOT planned, so this verdict assumes the run fits {num_gpus}x {gpu} unchecked: "
                        f"{exc}{note}. Nothing here knows its size: a full fine-tune in float32 with a float32 "
                        "reference and no offload may need several times the GPU's memory.",
                        "give the model's config.json (a local directory, or download it once: `hf download "
                        "<model> config.json`), or call plan_memory with the architecture numbers")]
    except ValueError as exc:  # a value the planner cannot read (the rules above name it): no plan, no crash
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


def context_findings(values: dict) -> list[Finding]:
    """max_completion_length against the model's context (max_position_embeddings), from the catalog or config.json."""
    given = GRPOView.given(values)
    length = given.max_completion_length
    if not isinstance(length, int) or isinstance(length, bool) or not given.model_name_or_path:
        return []
    try:
        model, arch = planner.architecture_of(None, values)
    except UserInputError:
        return []  # unknown offline: the memory verdict says the model was not planned
    context = arch.max_position_embeddings
    if not context or length < context:
        return []
    return [finding(
        "completion_beyond_context", "max_completion_length", "error",
        f"max_completion_length={length} is not below {model}'s {context}-token context (max_position_embeddings), "
        "which holds the prompt too: completions are cut at the context, and positions past it are ones the model "
        "never saw.", f"set max_completion_length below {context} minus the longest prompt, or use a long-context "
        "model")]


# The head sizes vLLM's CPU attention backend runs (vLLM 0.31.0, vllm/v1/attention/backends/cpu_attn.py
# get_supported_head_sizes); any other fails at the first generation: "Unsupported CPU attention configuration:
# head_dim=16".
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def cpu_vllm_findings(values: dict) -> list[Finding]:
    """use_vllm on a CPU target: the model's head size must be one vLLM's CPU attention runs."""
    given = GRPOView.given(values)
    if not given.use_vllm or not given.model_name_or_path:
        return []
    try:
        model, arch = planner.architecture_of(None, values)
    except UserInputError:
        return []
    if arch.hd in VLLM_CPU_HEAD_SIZES:
        return []
    return [finding(
        "vllm_cpu_head_size", "use_vllm", "error",
        f"{model} has attention heads of {arch.hd} dimensions; vLLM's CPU attention runs only "
        f"{', '.join(map(str, VLLM_CPU_HEAD_SIZES))} (its first generation fails: \"Unsupported CPU attention "
        f"configuration: head_dim={arch.hd}\").", "set use_vllm: false on this CPU target, or use a model whose "
        "hidden_size / num_attention_heads is one of those")]


def target_findings(values: dict, gpu: str, num_gpus: int, prompt: tuple[int, int | None] = (0, None),
                    memory: bool = True) -> list[Finding]:
    """What the architecture decides: the model's context and start-up, and the memory plan on a GPU target
    (`memory`); vLLM's head sizes on a CPU target."""
    out = context_findings(values) + startup_findings(values)
    cpu = str(gpu).strip().lower() == "cpu"
    if memory and not cpu:
        out += memory_findings(values, gpu, num_gpus, prompt, context_reported=bool(out))
    if cpu:
        out += cpu_vllm_findings(values)
    return out


def with_target(result: ValidationResult, values: dict, gpu: str, num_gpus: int,
                prompt: tuple[int, int | None] = (0, None), memory: bool = True) -> ValidationResult:
    """The recipe's validation with the target's findings added, errors first."""
    findings = result.findings + target_findings(values, gpu, num_gpus, prompt, memory)
    findings.sort(key=lambda f: SEVERITY_ORDER[f.severity])
    return result.model_copy(update={"findings": findings,
                                     "valid": not any(f.severity == "error" for f in findings)})


def validate(values: dict, gpu: str = "H100", num_gpus: int = 1, *, reward_specs: list | None = None,
             override_reason: str | None = None, is_moe: bool | None = None, base_dir: Path | None = None,
             agentic: dict | None = None, prompt_column: str | None = None, memory: bool = True
             ) -> ValidationResult:
    """The one validation entry point: the recipe's rules and TRL's checks (recipe.validate.validate_values), then
    what the architecture decides (context, start-up) and, with `memory` on a GPU target, the memory plan's verdict
    (an agentic run's prompts planned with its tool schema)."""
    result = validate_values(values, gpu, num_gpus, reward_specs=reward_specs, override_reason=override_reason,
                             is_moe=is_moe, base_dir=base_dir, agentic=agentic, prompt_column=prompt_column)
    if any(f.code == "unknown_gpu" for f in result.findings):
        return result
    prompt = agentic_prompt_tokens(values, agentic) if memory else (0, None)
    return with_target(result, values, gpu, num_gpus, prompt, memory)


def validate_file(config_path: str | Path, gpu: str | None = None, num_gpus: int | None = None,
                  memory: bool = True) -> ValidationResult:
    """validate for a config file, with what is recorded beside it (the run's target unless given, its rewards,
    override reason and agentic record)."""
    values, kwargs = read_config(config_path, None, gpu, num_gpus)
    return validate(values, **kwargs, memory=memory)


def validate_config(request: ValidateRequest) -> ValidationResult:
    """validate_grpo_config's request parsed, then validate."""
    values, kwargs = read_request_values(request)
    return validate(values, **kwargs)
