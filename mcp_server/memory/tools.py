"""The memory planner's tools: `plan_memory` and its readable plan, and `validate_grpo_config` (validation for a
target includes the memory plan: memory.verdict)."""

from __future__ import annotations

from mcp_server.memory.models import MemoryPlan, MemoryPlanRequest
from mcp_server.recipe.models import ValidateRequest, ValidationResult
from mcp_server.recipe.tools import human_validation
from mcp_server.toolspec import READS, Command, Flag, ToolSpec


# The core is imported on the first call, not with the registry: the doors start without the cores' imports.
def plan_memory(request: MemoryPlanRequest) -> MemoryPlan:
    from mcp_server.memory.planner import plan_memory

    return plan_memory(request)


def validate_config(request: ValidateRequest) -> ValidationResult:
    from mcp_server.memory.verdict import validate_config

    return validate_config(request)


def _human_launch(plan: MemoryPlan) -> str:
    launch = plan.launch
    server = launch.vllm_server
    return (f"  launch: {launch.strategy}, {launch.training_processes} training process(es)"
            + (f"; trl vllm-serve on {server.gpus} GPU(s) (--tensor_parallel_size {server.tensor_parallel_size} "
               f"--data_parallel_size {server.data_parallel_size} --gpu_memory_utilization "
               f"{server.gpu_memory_utilization:g})" if server else "")
            + f" - {launch.reason}")


def _human_levers(plan: MemoryPlan) -> list[str]:
    lines = ["  levers (GiB saved alone):"] if plan.levers else []
    for lv in plan.levers:
        check = "" if lv.validation is None or lv.validation.valid is None else (
            "  (validates)" if lv.validation.valid else f"  (INVALID: {'; '.join(lv.validation.errors)})")
        lines.append(f"    {lv.name:<24} -{lv.saves_gib:6.1f}  {lv.patch}{check}")
    if plan.recommended:
        r = plan.recommended
        lines.append(f"  smallest set that fits: {', '.join(r.levers)} -> {r.peak_gib:.1f} GiB; set {r.patch}")
    return lines


def human_plan(plan: MemoryPlan) -> str:
    head = {"fits": "FITS", "tight": "FITS (TIGHT)", "does_not_fit": "DOES NOT FIT"}[plan.status]
    lines = [
        f"{head}: {plan.model} on {plan.num_gpus}x {plan.gpu} ({plan.capacity_gib:.1f} GiB each)",
        f"  {plan.params.total/1e9:.2f}B params, {plan.trainable_params/1e6:.1f}M trained; "
        f"peak {plan.peak_gib:.1f} GiB in {plan.peak_phase}, headroom {plan.headroom_gib:+.1f} GiB",
        f"  peak as torch.cuda.max_memory_allocated {plan.peak_allocated_gib:.1f} GiB, max_memory_reserved "
        f"{plan.peak_reserved_gib:.1f} GiB, nvidia-smi {plan.peak_nvidia_smi_gib:.1f} GiB",
    ]
    lines += [f"    {c.name:<20} {c.gib:8.2f} GiB  {c.note}" for c in plan.breakdown]
    lines.append(_human_launch(plan))
    if plan.server:
        lines.append(f"  vLLM server: {plan.server.gpus} GPU(s), weights {plan.server.weights_gib} GiB, "
                     f"KV {plan.server.kv_cache_gib} GiB")
    lines += _human_levers(plan)
    lines.append(f"  anchor ({plan.anchor.size_class}): {plan.anchor.statement}")
    if plan.anchor.consistent is not None:
        lines.append(
            f"    planner: {plan.anchor.planner_check} [{'agrees' if plan.anchor.consistent else 'DISAGREES'}]"
        )
    sp = plan.speed
    lines.append(f"  speed ({sp.engine}, {sp.bandwidth_gbs:.0f} GB/s): {sp.rollout_tokens_per_s:.0f} tok/s rollout, "
                 f"{sp.step_s:.0f} s/step; {sp.verdict}")
    lines += [f"  note: {n}" for n in plan.notes]
    lines += [f"  assumed: {a}" for a in plan.assumptions]
    return "\n".join(lines)


TOOLS = [
    ToolSpec(
        "plan_memory", plan_memory, MemoryPlan, request=MemoryPlanRequest, effects=READS,
        description="""Will this GRPO run fit? Per-GPU GiB breakdown (weights, gradients, optimizer state, reference model,
    activations, logits, vLLM weights and KV cache, overhead), the peak and headroom; when it does not fit,
    the levers ranked by GiB saved and the smallest set that fits, each as a validated config change; the
    size-class anchor as a cross-check; rollout speed from the GPU's memory bandwidth. Give a model (catalog
    name, local path) or a train/config.yaml from emit_grpo_config, and the GPU type and count.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command(
            "Will a GRPO run fit the GPU? Breakdown, levers, launch layout, anchor, rollout speed. Exit 0 when it "
            "fits, 1 when not.", human_plan, lambda r: r.fits,
            whole_request="The whole MemoryPlanRequest as JSON (inline or @file.json); flags override it.",
            hide=("architecture", "config", "lora_target_modules", "lora_dropout", "steps_per_generation",
                  "vllm_tensor_parallel_size", "vllm_server_gpus", "fsdp", "fused_logits", "attn_implementation"),
            flags={
                "config_path": Flag("--config", metavar="CONFIG_PATH"),
                "validate_levers": Flag("--no-validate", "Skip validating each lever's config change.", invert=True),
            },
        ),
    ),
]


# Listed where the recipe's tools are (mcp_server/tools.py), under the name it always had.
VALIDATION_TOOLS = [
    ToolSpec(
        "validate_grpo_config", validate_config, ValidationResult, request=ValidateRequest, effects=READS,
        description="""Validate a GRPO config (a YAML path or a dict of fields) against the installed TRL and the target
    GPU type and count, the model's context and the memory plan included: what crashes at start-up, runs out of memory or
    trains without effect. Returns findings {code, field, severity, message, fix}; valid only with no errors.""",  # noqa: E501 (the text MCP clients list)
        cli=Command(
            "Validate a GRPO config YAML for the installed TRL and a target GPU (memory plan included).",
            human_validation, lambda r: r.valid, name="validate-config", hide=("config",),
            flags={"config_path": Flag("path"),
                   "rehearse": Flag("--no-rehearse", "Skip the one-step rehearsal on a miniature: the rules alone.",
                                    invert=True)},
        ),
    ),
]
