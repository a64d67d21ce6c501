"""Memory and speed per node of a SLURM GPU job (issue 24): launch_training without submitting writes the memory
plan per node at the top of train/launch.slurm, and its numbers are plan_memory's for the same run and GPUs.
No cluster is needed: the script is written, not submitted (tests/test_slurm.py submits CPU jobs to a real one)."""

from __future__ import annotations

import pytest
import json
import re
import subprocess
from pathlib import Path

from conftest import ANY_TEXT_REWARDS
from support import TINY_OVERRIDES, pass_inspection

pytestmark = pytest.mark.slow  # every test here starts a process or trains (the lanes: conftest.py)

NODES, GPUS_PER_NODE = 3, 8  # 2 training nodes x 8 H100 and a node of 8 for `trl vllm-serve`
ROW = re.compile(r"^#   node (\d+): (train|vllm-server), (\d+) GPU\(s\), planned peak ([\d.]+) of ([\d.]+) GiB per "
                 r"GPU, (?:([\d.]+) rollout tokens/s|rollouts from the vLLM server node)$")


def test_a_gpu_slurm_script_carries_the_memory_plan_per_node(workspace, tiny_model, monkeypatch):
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.memory.models import MemoryPlanRequest
    from mcp_server.memory.planner import plan_memory
    from mcp_server.recipe.models import GRPORecipeRequest
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    emitted = emit_grpo_config(GRPORecipeRequest(
        model="tiny", dataset="tiny", gpu="H100", num_gpus=NODES * GPUS_PER_NODE, finetune="lora",
        run_name="plan-per-node", rewards=ANY_TEXT_REWARDS, overrides=TINY_OVERRIDES))
    assert emitted.validation.valid, emitted.validation
    run_dir = Path(emitted.run_dir)
    pass_inspection(run_dir)

    result = launch_training(LaunchRequest(run=str(run_dir), num_nodes=NODES, launcher="slurm", submit=False))
    assert not result.launched and result.slurm_script and not result.refusals, result.message
    script = Path(result.slurm_script).read_text()
    assert subprocess.run(["bash", "-n", result.slurm_script]).returncode == 0
    rows = [ROW.match(line) for line in script.splitlines() if line.startswith("#   node ")]
    assert len(rows) == NODES and all(rows), script[:600]
    # the comment block sits above the #SBATCH lines (sbatch reads those up to the first command)
    assert script.index("# Memory plan (plan_memory") < script.index("#SBATCH --nodes=3")

    # the same run on the same GPUs, its prompts at the longest one the inspection measured (as the launch plans)
    prompt = json.loads((run_dir / "inspection" / "samples.meta.json").read_text())["lengths"]["prompt_tokens_max"]
    plan = plan_memory(MemoryPlanRequest(config_path=str(run_dir), num_gpus=NODES * GPUS_PER_NODE, prompt_length=prompt,
                                         vllm_server_gpus=GPUS_PER_NODE, validate_levers=False))
    assert f"on {plan.gpu}, {plan.status})" in script
    assert plan.server is not None and plan.training_gpus == (NODES - 1) * GPUS_PER_NODE
    for index, row in enumerate(rows):
        assert int(row[1]) == index and int(row[3]) == GPUS_PER_NODE
        assert float(row[5]) == round(plan.capacity_gib, 2)
    train, server = rows[:-1], rows[-1]
    assert all(r[2] == "train" and float(r[4]) == round(plan.peak_gib, 2) and r[6] is None for r in train)
    assert server[2] == "vllm-server"
    assert float(server[4]) == round(plan.server.weights_gib + plan.server.kv_cache_gib, 2)
    assert float(server[6]) == round(plan.speed.rollout_tokens_per_s, 1) > 0
