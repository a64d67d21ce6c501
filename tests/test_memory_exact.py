"""Issue 25, "Tests that let a break through": figures of the memory plan and the launcher that a mutation changed
without any test noticing. Each is checked against its arithmetic, not against another output of the same code
(the plan and the launch files agree with each other even when both are wrong)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcp_server.emission.emit import emit_grpo_config
from mcp_server.memory.models import MemoryPlanRequest
from mcp_server.memory.planner import plan_memory
from mcp_server.recipe.models import GRPORecipeRequest
from mcp_server.runs import Run
from mcp_server.training.launch import build_launch_plan, write_plan_files
from mcp_server.training.models import LaunchRequest

GIB = 1024**3


def test_eight_bit_adamw_keeps_two_bytes_of_state_per_trained_parameter():
    """bitsandbytes' 8-bit Adam holds two 1-byte states per parameter: halving that moved only a lever ranking."""
    base = dict(model="Qwen/Qwen2.5-0.5B-Instruct", gpu="H100", dtype="bfloat16", finetune="full",
                validate_levers=False)
    single = plan_memory(MemoryPlanRequest(**base, optim="adamw_8bit"))
    state = {c.name: c.gib for c in single.breakdown}["optimizer_state"]
    assert state == pytest.approx(single.params.total * 2 / GIB, rel=0.01)
    # Under ZeRO-2: the fp32 master copy (4 bytes) joins the 2 bytes of state, sharded over the training GPUs.
    zero2 = plan_memory(MemoryPlanRequest(**base, optim="adamw_8bit", num_gpus=4, strategy="zero2"))
    state = {c.name: c.gib for c in zero2.breakdown}["optimizer_state"]
    assert zero2.launch.zero_stage == 2 and zero2.training_gpus >= 2
    assert state == pytest.approx(zero2.params.total * 6 / zero2.training_gpus / GIB, rel=0.01)
    # Beside 32-bit AdamW (8 bytes a parameter in fp32 weights): a quarter.
    adamw = plan_memory(MemoryPlanRequest(**{**base, "dtype": "float32"}, optim="adamw_torch"))
    assert {c.name: c.gib for c in adamw.breakdown}["optimizer_state"] == pytest.approx(
        adamw.params.total * 8 / GIB, rel=0.01)


def test_a_vllm_server_on_two_gpus_is_tensor_parallel_over_both(workspace):
    """`trl vllm-serve` on its own GPUs shards the weights over them (tensor parallel = its GPUs, data parallel 1):
    swapped, the plan and launch.sh still agreed with each other, both wrong."""
    plan = plan_memory(MemoryPlanRequest(model="Qwen/Qwen2.5-7B-Instruct", gpu="H100", num_gpus=8, use_vllm=True,
                                         vllm_mode="server", vllm_server_gpus=2, dtype="bfloat16",
                                         validate_levers=False))
    server = plan.launch.vllm_server
    assert (server.gpus, server.tensor_parallel_size, server.data_parallel_size) == (2, 2, 1)
    assert plan.server.weights_gib == pytest.approx(plan.params.total * 2 / 2 / GIB, rel=0.01)  # half each

    emitted = emit_grpo_config(GRPORecipeRequest(model="Qwen/Qwen2.5-7B-Instruct", dataset="tiny", gpu="H100",
                                                 num_gpus=8, run_name="tp2",
                                                 overrides={"use_vllm": True, "vllm_mode": "server"}))
    run_dir = Path(emitted.run_dir)
    launch = build_launch_plan(Run(run_dir), LaunchRequest(run=str(run_dir), vllm_server_gpus=2))
    script = Path(write_plan_files(Run(run_dir), launch)["script"]).read_text()
    serve = next(line for line in script.splitlines() if "vllm_serve --model" in line)
    assert "--tensor_parallel_size 2 " in serve and "--data_parallel_size 1 " in serve, serve
    assert len(re.search(r"CUDA_VISIBLE_DEVICES=([\d,]+) ", serve).group(1).split(",")) == 2
