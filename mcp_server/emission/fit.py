"""The emitted config fitted to its target by the memory plan: when the recipe does not fit the GPU (or leaves under
10% headroom), the plan's recommended levers are applied and each changed value says why. A set that changes the
fine-tuning mode (LoRA, QLoRA) is the person's choice, never applied: validation then says plainly it does not fit."""

from __future__ import annotations

from mcp_server.errors import UserInputError
from mcp_server.memory.models import MemoryPlan, MemoryPlanRequest
from mcp_server.memory.params import count_params
from mcp_server.memory.planner import plan_memory, resolve_architecture

NOT_APPLIED = {"lora", "qlora"}  # a change of fine-tuning mode is asked for, not applied


def plan_for(values: dict, gpu: str, num_gpus: int) -> MemoryPlan | None:
    """The memory plan of the values on the target, or None when it cannot be planned offline."""
    try:
        return plan_memory(MemoryPlanRequest(config=values, gpu=gpu, num_gpus=num_gpus, validate_levers=False))
    except UserInputError:
        return None


def fit_to_target(values: dict, why: dict, gpu: str, num_gpus: int, overridden: set[str]) -> MemoryPlan | None:
    """Apply the plan's recommended levers to `values` (in place) when the run does not fit or is tight; return the
    plan the values now have."""
    plan = plan_for(values, gpu, num_gpus)
    for _ in range(2):  # a set that only just fits may leave a cheaper lever that restores the 10% headroom
        if plan is None or plan.status == "fits" or plan.recommended is None:
            return plan
        applied = _apply(plan, values, why, num_gpus, overridden)
        if not applied:
            return plan
        plan = plan_for(values, gpu, num_gpus)
    return plan


def _apply(plan: MemoryPlan, values: dict, why: dict, num_gpus: int, overridden: set[str]) -> bool:
    chosen = plan.recommended
    if NOT_APPLIED & set(chosen.levers) or overridden & set(chosen.patch):
        return False
    described = {lever.name: lever.description for lever in plan.levers}
    before = f"{plan.peak_gib:.1f}"
    for name in chosen.levers:
        lever_patch = next((lv.patch for lv in plan.levers if lv.name == name), {})
        for key in lever_patch:
            why[key] = (f"memory plan for {num_gpus}x {plan.gpu}: {described.get(name, name)} Without the levers "
                        f"{', '.join(chosen.levers)} the planned peak is {before} GiB of {plan.capacity_gib:.1f}, with "
                        f"them {chosen.peak_gib:.1f} GiB")
    values.update(chosen.patch)
    return True


def launch_text(plan: MemoryPlan | None, run_dir) -> tuple[str, str]:
    """(the command, the config header's line) that start the run as the plan lays it out: one process runs train.py
    itself; several GPUs go through launch_training, which writes train/launch.sh (accelerate with the plan's
    sharding, and `trl vllm-serve` on its own GPUs in server mode)."""
    single = f"cd {run_dir} && python train/train.py --config train/config.yaml"
    if plan is None or plan.launch.training_processes <= 1 and plan.launch.vllm_server is None:
        return single, "python train/train.py --config train/config.yaml"
    launch = plan.launch
    layout = {"ddp": "DDP", "fsdp": "FSDP"}.get(launch.strategy, f"DeepSpeed ZeRO-{launch.zero_stage}")
    how = f"accelerate launch, {layout} over {launch.training_processes} training GPU(s)"
    if launch.vllm_server:
        server = launch.vllm_server
        how += (f", `trl vllm-serve` on {server.gpus} GPU(s) (tensor parallel {server.tensor_parallel_size}, "
                f"--gpu_memory_utilization {server.gpu_memory_utilization:g})")
    line = f"llm-finetuning launch-training {run_dir}  # {how}; it writes train/launch.sh, which also runs by hand"
    return line, f"llm-finetuning launch-training <this run>  ({how}; not `python train/train.py`: one process)"


def model_size_b(model: str) -> float | None:
    """The model's parameters in billions (local config.json, the catalog or the hub cache), None when unknown."""
    try:
        _, arch = resolve_architecture(MemoryPlanRequest(model=model, validate_levers=False), {})
    except UserInputError:
        return None
    return count_params(arch).total / 1e9
