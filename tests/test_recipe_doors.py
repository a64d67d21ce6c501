"""The config tools through both doors: the CLI with --json and MCP over stdio with the SDK's client."""

from __future__ import annotations

import pytest
import asyncio
import json
from pathlib import Path

import yaml

from conftest import call_mcp, run_cli, run_cli_json


def test_cli_emit_then_validate_for_other_targets(workspace):
    proc, result = run_cli_json("emit-config", "--model", "Qwen/Qwen2.5-1.5B-Instruct", "--num-gpus", "4",
                                "--run-name", "cli", cwd=workspace)
    assert proc.returncode == 0 and result["validation"]["valid"], proc.stderr
    config = result["config_path"]
    assert yaml.safe_load(Path(config).read_text())["vllm_mode"] == "server"

    # Without the rehearsal (it trains a step in this process: the slow lane's; test_mcp_emit_and_validate_over_stdio
    # asserts that a door's validation rehearses a catalog model's miniature by default): what differs per target
    # is the rules', the miniature is the config's, the same for every target.
    proc, ok = run_cli_json("validate-config", config, "--gpu", "a100", "--num-gpus", "4", "--no-rehearse",
                            cwd=workspace)
    assert proc.returncode == 0 and ok["valid"] and ok["target"] == "4x A100"
    # On 8 GPUs the same micro-batches make a generation batch larger than the tiny task's 75 prompts: 0 steps
    proc, ok = run_cli_json("validate-config", config, "--gpu", "a100", "--num-gpus", "8", "--no-rehearse",
                            cwd=workspace)
    assert proc.returncode == 1 and ok["target"] == "8x A100"
    assert [f["code"] for f in ok["findings"] if f["severity"] == "error"] == ["dataset_smaller_than_generation_batch"]

    proc = run_cli("validate-config", config, "--gpu", "V100", "--num-gpus", "4", "--no-rehearse", cwd=workspace)
    assert proc.returncode == 1 and "NOT VALID for 4x V100" in proc.stdout
    assert "bf16_unsupported [bf16]" in proc.stdout and "fix:" in proc.stdout


def test_cli_bad_input_is_an_error_not_a_trace(workspace):
    bad_yaml = workspace / "bad.yaml"
    bad_yaml.write_text("num_generations: [8\n")
    for args in (("validate-config", str(bad_yaml)), ("validate-config", str(workspace / "missing.yaml")),
                 ("emit-config", "--model", "./nowhere"), ("emit-config", "--model", "x", "--override", "oops")):
        proc = run_cli(*args, cwd=workspace)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_mcp_emit_and_validate_over_stdio(workspace):
    async def calls(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["emit_grpo_config"].input_schema
        emitted = await client.call_tool("emit_grpo_config", {
            "model": "Qwen/Qwen2.5-0.5B-Instruct", "variant": "dapo", "run_name": "mcp"})
        bad = await client.call_tool("validate_grpo_config", {"config": {"loss_type": "foo"}, "gpu": "H1000"})
        invalid = await client.call_tool(
            "validate_grpo_config",
            {
                "config": {
                    "model_name_or_path": "Qwen/Qwen2.5-0.5B",
                    "loss_type": "foo",
                    "reward_funcs": ["accuracy_reward"],
                }
            },
        )
        broken = await client.call_tool("emit_grpo_config", {"model": "./no/such/dir"})
        after = await client.call_tool("validate_grpo_config", {
            "config_path": emitted.structured_content["config_path"], "num_gpus": 4})
        as_trl_reads = await client.call_tool("validate_grpo_config", {"config": {  # strings TRL's parser converts
            "model_name_or_path": "Qwen/Qwen2.5-0.5B", "reward_funcs": ["accuracy_reward"], "loss_type": "grpo",
            "learning_rate": "5e-7", "top_p": "0.9", "max_completion_length": "0", "use_vllm": "true"}})
        return schema, emitted, bad, invalid, broken, after, as_trl_reads

    schema, emitted, bad, invalid, broken, after, as_trl_reads = asyncio.run(
        call_mcp(calls, env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    )
    request_schema = json.dumps(schema)
    assert "description" in request_schema and "num_gpus" in request_schema
    assert not emitted.is_error and emitted.structured_content["variant"] == "dapo"
    assert emitted.structured_content["validation"]["valid"]
    assert Path(emitted.structured_content["config_path"]).is_file()
    assert "unknown_gpu" in json.dumps(bad.structured_content)
    assert invalid.structured_content["valid"] is False
    assert broken.is_error and "model" in broken.content[0].text  # names the field, server keeps serving
    # DAPO's 16 mini-batches per rollout, sized for one GPU (32 prompts), on 4 colocated GPUs: 128 prompts per
    # generation batch; the tiny task's 75 training prompts make no whole chunk, so TRL's sampler yields 0 steps
    assert after.structured_content["target"] == "4x H100" and not after.structured_content["valid"]
    assert [f["code"] for f in after.structured_content["findings"] if f["severity"] == "error"] == [
        "dataset_smaller_than_generation_batch"]
    # rehearse defaults to true at the door: a step trained on the catalog model's miniature all the same
    rehearsed = [f for f in after.structured_content["findings"] if f["code"] == "rehearsed"]
    assert rehearsed and "trained one step on a miniature" in rehearsed[0]["message"], after.structured_content
    found = {f["code"]: f for f in as_trl_reads.structured_content["findings"]}
    assert "wrong_type" not in found and "lr_out_of_range" not in found  # "5e-7" is the float TRL trains with
    assert found["out_of_range"]["field"] == "max_completion_length"  # "0" read as 0: nothing to generate
    assert found["truncated_sampling_biases_is"]["severity"] == "warning"  # "0.9" and "true": top_p=0.9 with vLLM


def test_cli_validates_yaml_as_trl_reads_it(workspace):
    # `learning_rate: 5e-7` is a string to PyYAML and a float to TRL's parser: VALID, as `trl grpo` would run it.
    config = workspace / "config.yaml"
    config.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\nlearning_rate: 5e-7\nloss_type: grpo\n"
                      "reward_funcs: [accuracy_reward]\nper_device_train_batch_size: 8\ngradient_accumulation_steps: "
                      "4\n")
    proc, result = run_cli_json("validate-config", str(config), cwd=workspace)
    assert proc.returncode == 0 and result["valid"], result
    assert not [f for f in result["findings"] if f["field"] == "learning_rate"]
