"""Emission plans what TRL really starts: the memory plan's levers and launch, the learning rate by size, the
columns the rewards read, report_to, the sandbox check, and DAPO's dynamic sampling. Through the
core API (emit_grpo_config, check_environment, launch_training); files only, nothing trains."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from mcp_server.errors import UserInputError
from mcp_server.memory.models import MemoryPlanRequest
from mcp_server.memory.planner import plan_memory
from mcp_server.recipe.learning_rate import LR_RANGE
from support import emit_config as emit


def config_of(result) -> dict:
    return yaml.safe_load(Path(result.config_path).read_text())


def comment_above(result, key: str) -> str:
    """The comment lines the emitted config.yaml writes above `key`."""
    lines = Path(result.config_path).read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
    above = []
    for line in reversed(lines[:at]):
        if not line.startswith("#"):
            break
        above.insert(0, line.lstrip("# "))
    return " ".join(above)


def test_qlora_on_an_a10g_keeps_a_4bit_colocated_vllm(workspace):
    # TRL 1.16 starts the colocated vLLM with quantization="bitsandbytes" when the policy has 4-bit layers: its
    # weights are NF4, about 10 GiB less than a bf16 copy for an 8B model, so vLLM stays on (asleep while training)
    result = emit(model="meta-llama/Llama-3.1-8B-Instruct", gpu="A10G", finetune="qlora", run_name="a10g")
    config = config_of(result)
    assert result.validation.valid and config["use_vllm"] is True, result.validation.findings
    # vLLM's context bounded to the run's (unset it is Llama's 131072 tokens, whose KV cache vLLM wants before it
    # starts), and its share grown from TRL's 0.3 into the memory the plan found, for a round's KV cache
    assert config["vllm_max_model_length"] == 1024 and config["vllm_gpu_memory_utilization"] > 0.3
    assert "memory plan for 1x A10G" in comment_above(result, "vllm_gpu_memory_utilization")
    plan = plan_memory(MemoryPlanRequest(config_path=result.run_dir, validate_levers=False))
    assert plan.fits and any("NF4" in note for note in plan.notes)
    qlora_vllm = plan_memory(MemoryPlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100", finetune="qlora",
                                               use_vllm=True, vllm_gpu_memory_utilization=0.5, validate_levers=False))
    weights = {c.name: c.gib for c in qlora_vllm.breakdown}["vllm_weights"]
    assert 4 < weights < 7  # NF4 linear layers + bf16 embeddings and head, not 15 GiB of bf16


def test_moe_lora_on_an_h200_keeps_vllm_in_a_right_sized_share(workspace):
    result = emit(model="Qwen/Qwen3-30B-A3B", gpu="H200", finetune="lora", run_name="moe-h200")
    config = config_of(result)
    assert config["use_vllm"] is True and config["vllm_enable_sleep_mode"] is True
    assert 0.3 < config["vllm_gpu_memory_utilization"] < 0.95 and result.validation.valid
    assert "memory plan for 1x H200" in comment_above(result, "vllm_gpu_memory_utilization")


def test_the_printed_launch_is_the_plans(workspace):
    multi = emit(model="Qwen/Qwen3-30B-A3B", gpu="H100", num_gpus=8, run_name="moe-full")
    plan = plan_memory(MemoryPlanRequest(config_path=multi.run_dir, validate_levers=False))
    assert plan.launch.strategy == "zero3" and plan.launch.training_processes == 7
    header = next(line for line in Path(multi.config_path).read_text().splitlines() if "Train with" in line)
    for text in (multi.launch_command, header):
        assert "launch-training" in text and "ZeRO-3 over 7 training GPU" in text and "vllm-serve" in text
    assert not multi.launch_command.endswith("python train/train.py --config train/config.yaml")
    single = emit(model="Qwen/Qwen2.5-7B-Instruct", finetune="lora", run_name="single")
    assert single.launch_command.endswith("python train/train.py --config train/config.yaml")


def test_learning_rate_by_size_from_one_table(workspace):
    small = emit(model="Qwen/Qwen2.5-0.5B-Instruct", run_name="lr-small")
    big = emit(model="meta-llama/Llama-3.3-70B-Instruct", gpu="B200", num_gpus=8, run_name="lr-big")
    lora = emit(model="Qwen/Qwen2.5-7B-Instruct", finetune="lora", run_name="lr-lora")
    assert config_of(small)["learning_rate"] == 1e-6 and config_of(big)["learning_rate"] == 5e-7
    assert config_of(lora)["learning_rate"] == 1e-5
    # the range the comment states is the validator's
    low, high = LR_RANGE["full"]
    assert f"{low:g} to {high:g}" in comment_above(small, "learning_rate")
    assert "DAPO 32B" in comment_above(small, "learning_rate")


def test_beta_under_lora_says_the_reference_is_the_adapter_disabled(workspace):
    result = emit(model="Qwen/Qwen2.5-7B-Instruct", finetune="lora", run_name="beta")
    said = comment_above(result, "beta")
    assert "disabling the adapter" in said and "costs a reference model" not in said


def test_the_code_reward_needs_its_tests_column_not_an_answer(workspace, tmp_path):
    data = tmp_path / "code.jsonl"
    rows = [{"prompt": f"Write f returning {i}.", "tests": f"assert f() == {i}"} for i in range(40)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = emit(model="Qwen/Qwen2.5-1.5B-Instruct", dataset=str(data), gpu="H100", num_gpus=4,
                  rewards=[{"name": "code_execution_reward"}], run_name="code")
    assert result.validation.valid, result.validation.findings
    with pytest.raises(UserInputError, match="^answer_column: column 'answer', which correctness_reward reads"):
        emit(model="Qwen/Qwen2.5-1.5B-Instruct", dataset=str(data), run_name="code2")
    (tmp_path / "bare.jsonl").write_text(json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(UserInputError, match="column 'tests', which code_execution_reward reads"):
        emit(model="Qwen/Qwen2.5-1.5B-Instruct", dataset=str(tmp_path / "bare.jsonl"),
             rewards=[{"name": "code_execution_reward"}], run_name="code3")


@pytest.mark.slow
def test_a_code_reward_run_is_blocked_where_bubblewrap_does_not_work(workspace, monkeypatch):
    from mcp_server.rewards.sandbox import check_sandbox
    from mcp_server.training.environment import check_environment
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import EnvironmentRequest, LaunchRequest

    code = emit(model="tiny", gpu="cpu", rewards=[{"name": "code_execution_reward"}], run_name="bwrap",
                dataset="tiny", answer_column=None)
    plain = emit(model="tiny", gpu="cpu", run_name="plain")
    fake_dir = Path(tempfile.mkdtemp(prefix="fake-bwrap-"))
    fake_dir.chmod(0o755)  # reachable by the unprivileged sandbox user
    try:
        fake = fake_dir / "bwrap"  # a bwrap that cannot create namespaces, as where user namespaces are off
        fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake_dir}:{Path(shutil.which('python3') or '/usr/bin/python3').parent}")
        check_sandbox.cache_clear()
        report = check_environment(EnvironmentRequest(run=code.run_dir))
        blocked = [b for b in report.blockers if "bubblewrap" in b]
        assert report.verdict == "blocked" and blocked and "user namespaces" in blocked[0]
        assert not [b for b in check_environment(EnvironmentRequest(run=plain.run_dir)).blockers if "bubblewrap" in b]
        refused = launch_training(LaunchRequest(run=code.run_dir))
        assert not refused.launched and any(r.gate == "environment" and "bubblewrap" in r.message
                                            for r in refused.refusals)
    finally:
        check_sandbox.cache_clear()
        shutil.rmtree(fake_dir, ignore_errors=True)


def test_report_to_as_chosen_and_kept_off_the_network(workspace):
    default = emit(model="Qwen/Qwen2.5-0.5B-Instruct", run_name="quiet")
    assert "report_to" not in config_of(default)  # TRL's "none": only the project's progress file
    result = emit(model="Qwen/Qwen2.5-0.5B-Instruct", report_to=["trackio", "tensorboard"], run_name="logged")
    config = config_of(result)
    assert config["report_to"] == ["trackio", "tensorboard"] and config["trackio_static_space_id"] is False
    assert "trackio_space_id" not in config and result.validation.valid  # GRPOConfig accepts it as written


def test_dapo_gets_dynamic_sampling_in_its_trainer(workspace):
    result = emit(model="Qwen/Qwen2.5-7B-Instruct", finetune="lora", variant="dapo", run_name="dapo")
    header = Path(result.config_path).read_text().split("# --- model")[0]
    assert "dynamic sampling (sec. 3.2) runs in train.py" in header and "at most 3 extra generation rounds" in header
    assert (Path(result.run_dir) / "train" / "dynamic_sampling.json").is_file()
