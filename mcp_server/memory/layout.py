"""The launch layout a plan assumes and launch_training uses: which sharding the trainer runs with (one process,
DDP, DeepSpeed ZeRO-2 or ZeRO-3, FSDP) and how `trl vllm-serve` is started in server mode. With strategy auto, the
least sharding that fits: DDP for LoRA (ZeRO-3 when DDP does not fit), ZeRO-2 for a full fine-tune (ZeRO-3 when
ZeRO-2 does not fit)."""

from __future__ import annotations

from mcp_server.memory.breakdown import Breakdown, compute_breakdown, layout_order, with_strategy
from mcp_server.memory.models import LaunchLayout, VllmServerLaunch
from mcp_server.memory.params import Architecture, ParamCount
from mcp_server.memory.settings import RunSettings, Target


def server_launch(settings: RunSettings, server_gpus: int) -> VllmServerLaunch | None:
    if not settings.vllm_server:
        return None
    dp = max(1, min(settings.vllm_server_data_parallel_size, server_gpus))
    return VllmServerLaunch(gpus=server_gpus, tensor_parallel_size=max(server_gpus // dp, 1), data_parallel_size=dp,
                            gpu_memory_utilization=settings.vllm_server_gpu_memory_utilization)


def choose_layout(arch: Architecture, params: ParamCount, settings: RunSettings,
                  target: Target) -> tuple[RunSettings, Breakdown, LaunchLayout]:
    """(the settings with the chosen sharding, their breakdown, the layout)."""
    server_gpus = settings.server_gpus
    training = settings.training_processes(target.num_gpus)
    order = layout_order(settings, target)
    tried: list[str] = []
    for strategy in order:
        run = with_strategy(settings, strategy) if strategy != "single" else settings
        breakdown = compute_breakdown(arch, params, run, target)
        fits = breakdown.peak <= target.capacity_gib and not breakdown.problems
        tried.append(f"{strategy} {breakdown.peak:.1f} GiB")
        if fits:
            break
    capacity = f"{target.capacity_gib:.1f} GiB"
    if fits:
        reason = (f"{strategy}: peak {breakdown.peak:.1f} of {capacity} per GPU"
                  + (f" ({'; '.join(tried[:-1])} does not fit)" if len(tried) > 1 else ""))
    else:
        why = "; ".join(breakdown.problems) or f"peak {'; '.join(tried)} of {capacity} per GPU"
        what = "it does not fit one GPU" if order == ["single"] else "no sharding fits"
        reason = f"{what} ({why}): apply the plan's levers, or use more or bigger GPUs"
    layout = LaunchLayout(strategy=strategy, training_processes=training, zero_stage=run.zero_stage if
                          strategy != "fsdp" else 0, offload_optimizer=run.offload_optimizer and run.zero_stage > 0,
                          vllm_server=server_launch(run, server_gpus), fits=fits, reason=reason)
    return run, breakdown, layout
