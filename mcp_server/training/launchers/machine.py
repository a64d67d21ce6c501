"""The layout of a launch on one machine: how many training processes, which strategy (single, ddp, DeepSpeed
ZeRO, FSDP) and the memory plan it follows. The local and accelerate launchers plan from it; the SLURM launcher
plans its own per node."""

from __future__ import annotations

from dataclasses import dataclass

from mcp_server.errors import UserInputError
from mcp_server.evidence import signed_samples_meta
from mcp_server.memory import planner
from mcp_server.memory.models import LaunchLayout, MemoryPlan
from mcp_server.recipe.recorded import RecordedRequest
from mcp_server.recipe.runspec import RunSpec
from mcp_server.runs import Run
from mcp_server.training.models import LaunchRequest

SHARDINGS = ("ddp", "zero2", "zero3", "fsdp")  # the strategies TRL ships an accelerate config for


@dataclass(frozen=True)
class MachineLayout:
    processes: int
    strategy: str  # single | ddp | zero2 | zero3 | fsdp
    memory: LaunchLayout | None  # the memory plan's layout (None: not planned)
    notes: tuple[str, ...] = ()


def plan_launch_memory(run: Run, spec: RunSpec, request: LaunchRequest,
                       num_gpus: int | None = None) -> tuple[MemoryPlan | None, str | None]:
    """The run's memory plan for this launch (its target: the GPUs, nodes and vLLM server GPUs config.target.Target
    decides, or `num_gpus` where the launch chose its processes; and its strategy), or (None, why not).
    Prompts are planned at the longest one the inspection measured (samples.meta.json as the sampler signed it,
    evidence.signed_samples_meta: a record edited by hand plans nothing; the launch gate needs an inspection), else
    at the planner's default."""
    meta, _ = signed_samples_meta(run)
    lengths = meta.get("lengths") if isinstance(meta, dict) and isinstance(meta.get("lengths"), dict) else {}
    prompt = lengths.get("prompt_tokens_max") if isinstance(lengths.get("prompt_tokens_max"), int) else None
    try:
        plan = planner.plan(spec, num_gpus=num_gpus, prompt_length=prompt or None,
                            strategy=request.strategy if request.strategy not in ("auto", "single") else None)
    except UserInputError as exc:  # e.g. a hub model neither cached nor in the catalog
        return None, f"memory not planned ({exc}): the launcher's default layout is used"
    return plan, None


def _choose_strategy(request: LaunchRequest, run_request: RecordedRequest, processes: int, cpu: bool,
                     layout: LaunchLayout | None) -> str:
    if request.strategy != "auto":
        return request.strategy
    if processes == 1:
        return "single"
    if layout is not None and layout.strategy in SHARDINGS:
        return layout.strategy  # the sharding the memory plan found to fit
    if cpu or run_request.finetune in ("lora", "qlora"):
        return "ddp"  # adapters are small: plain data parallel; DeepSpeed and 4-bit bases do not mix well
    return "zero2"


def machine_layout(target) -> MachineLayout:
    """Processes, strategy and memory plan of `target` (a launchers.base.LaunchTarget) on one machine."""
    request, cpu, vllm_gpus = target.request, target.cpu, target.vllm_gpus
    if request.num_processes is not None:  # the launch's choice: planned on those GPUs and the server's
        processes, planned_gpus = request.num_processes, request.num_processes + vllm_gpus
    else:  # config.target: the one decision of the world and the GPUs it holds
        processes, planned_gpus = target.target.world(target.server_mode), target.target.gpus_used(target.server_mode)
    memory, memory_note = (None, None) if cpu else plan_launch_memory(target.run, target.spec, request, planned_gpus)
    layout = memory.launch if memory else None
    if target.server_mode and processes + vllm_gpus > target.num_gpus:
        raise UserInputError(
            "vllm_server_gpus",
            f"{processes} training processes + {vllm_gpus} vLLM GPUs exceed the run's {target.num_gpus} GPUs: give "
            "the server fewer GPUs, or use vllm_mode: colocate",
        )
    strategy = "single" if processes == 1 else _choose_strategy(request, target.run_request, processes, cpu, layout)
    notes = [memory_note] if memory_note else []
    if layout is not None:
        notes.append(f"memory plan: {layout.reason}")
    return MachineLayout(processes=1 if strategy == "single" else processes, strategy=strategy, memory=layout,
                         notes=tuple(notes))
