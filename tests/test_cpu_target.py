"""A CPU target as a new user meets it (issue 31): `emit-config --gpu cpu` is float32 throughout and has no vLLM
fields, LoRA and full alike, and validate_grpo_config names each incoherent field of a hand-written CPU config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import run_cli_json

from mcp_server.recipe.models import ValidateRequest
from mcp_server.recipe.validate import validate_recipe_rules


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_cpu_emission_is_float32_with_no_vllm_fields(workspace, finetune):
    proc, out = run_cli_json("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu",
                             "--finetune", finetune, "--run-name", f"cpu-{finetune}", here=True)
    assert proc.returncode == 0, proc.stderr
    text = (Path(out["run_dir"]) / "train" / "config.yaml").read_text()
    config = yaml.safe_load(text)
    assert config["dtype"] == "float32" and config["bf16"] is False and not config.get("fp16")
    assert not [k for k in config if k == "use_vllm" or k.startswith("vllm_")], config
    assert "# CPU target: float32 throughout (the base too" in text  # the dtype's reason is the CPU's
    assert not [f for f in out["validation"]["findings"] if f["code"] in ("cpu_half_precision_weights",
                                                                          "vllm_fields_on_cpu")]


def _hand_written(tmp_path, **values) -> Path:
    train = tmp_path / "train"
    train.mkdir()
    base = {"model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "use_peft": True, "learning_rate": 1e-5,
            "bf16": False, "use_cpu": True, "loss_type": "dapo",
            "reward_funcs": ["mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"]}
    (train / "config.yaml").write_text(yaml.safe_dump({**base, **values}))
    (train / "request.json").write_text(json.dumps({"gpu": "cpu", "num_gpus": 1}))
    return train / "config.yaml"


def test_a_hand_written_cpu_config_with_fp16_weights_and_a_vllm_layout_is_reported(tmp_path):
    path = _hand_written(tmp_path, dtype="float16", use_vllm=False, vllm_mode="colocate",
                         vllm_gpu_memory_utilization=0.3)
    findings = {f.code: f for f in validate_recipe_rules(ValidateRequest(config_path=str(path))).findings}
    assert findings["cpu_half_precision_weights"].field == "dtype"
    assert "dtype: float32" in findings["cpu_half_precision_weights"].fix
    vllm = findings["vllm_fields_on_cpu"]
    assert vllm.field in ("vllm_mode", "vllm_gpu_memory_utilization")
    assert "vllm_mode" in vllm.message and "vllm_gpu_memory_utilization" in vllm.message


def test_a_coherent_cpu_config_and_gpu_targets_are_not_reported(tmp_path):
    path = _hand_written(tmp_path, dtype="float32")
    codes = {f.code for f in validate_recipe_rules(ValidateRequest(config_path=str(path))).findings}
    assert not codes & {"cpu_half_precision_weights", "vllm_fields_on_cpu"}
    on_gpu = validate_recipe_rules(ValidateRequest(config_path=str(path), gpu="T4"))
    # a LoRA fp16 base on a T4 is right
    assert not {f.code for f in on_gpu.findings} & {"cpu_half_precision_weights", "vllm_fields_on_cpu"}
