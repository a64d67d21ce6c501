"""Emission: the recipe, variants and target adaptations (the launch command of a run on 1 to 8 GPUs), files TRL
accepts, and a real CPU run of train.py."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import checkout_env, cli_here, run_cli_json
from support import emit_config, module_workspace

from mcp_server.errors import UserInputError
from mcp_server.tiny import TINY_VERSION

HUB_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # a name only: nothing is downloaded
# An emission of the hub model unless `model` is given (support.emit_config: the tiny data set unless `dataset`).
emit = functools.partial(emit_config, model=HUB_MODEL)


def yaml_of(result):
    return yaml.safe_load(Path(result.config_path).read_text())


def test_overriding_the_length_or_the_warm_up_keeps_the_constant_rate(workspace):
    """max_steps or warmup_steps in overrides once dropped the recipe's constant_with_warmup, so TRL's linear decay
    to 0 ran unannounced (found on the real-model demo: its logged rate fell 5e-4, 4.5e-4, 4e-4, ...)."""
    for name, overrides in (("steps", {"max_steps": 10}), ("warm", {"warmup_steps": 0})):
        config = yaml_of(emit(run_name=name, gpu="cpu", overrides=overrides))
        assert config["lr_scheduler_type"] == "constant_with_warmup", name
    assert yaml_of(emit(run_name="own", gpu="cpu", overrides={"lr_scheduler_type": "cosine"}))[
        "lr_scheduler_type"] == "cosine"


def test_base_recipe_on_one_h100(workspace):
    result = emit(run_name="base")
    config = yaml_of(result)
    assert result.validation.valid, result.validation.findings
    assert config["loss_type"] == "dapo"  # written out although it is TRL 1.16's default (see trl-versions.md)
    assert config["use_vllm"] is True and config.get("vllm_mode", "colocate") == "colocate"
    # 0.5B full fine-tune: the published GRPO rate of the 1.5B-32B recipes (recipe.learning_rate), constant after a
    # short warm-up, for 3 epochs of the tiny task's 75 prompts
    assert config["learning_rate"] == 1e-6 and config["beta"] == 0.01 and config["seed"] == 3407
    assert config["lr_scheduler_type"] == "constant_with_warmup"
    assert config.get("warmup_steps", 0) == min(20, round(0.05 * config["max_steps"]))  # none on a 6-step run
    # 32 prompts of 8 per optimizer step (DAPO's mini-batch), the micro-batch grown into the H100's free memory
    per_device, ga = config["per_device_train_batch_size"], config["gradient_accumulation_steps"]
    assert config["num_generations"] == 8 and per_device * ga == 32 * 8 and per_device > 8
    assert config["max_steps"] == 3 * (75 // 32)  # whole generation batches: TRL's sampler drops the rest
    assert config["bf16"] is True and config["logging_steps"] == 1  # every step of a run under 100 steps
    assert "memory plan" in Path(result.config_path).read_text()
    assert result.run_dir.startswith(str(workspace / "runs")) and Path(result.run_dir).name.endswith("-base")
    for name in ("config.yaml", "train.py", "rewards.json", "request.json", "request.schema.json"):
        assert (Path(result.run_dir) / "train" / name).is_file()
    schema = json.loads(Path(result.schema_path).read_text())
    assert all("description" in p for p in schema["properties"].values())
    # The live guard's mode travels in request.json, where the progress callback reads it.
    assert json.loads((Path(result.run_dir) / "train" / "request.json").read_text())["guard"] == "warn"


def test_recipe_values_are_pinned_and_other_defaults_left_out(workspace):
    from mcp_server.recipe.trl_fields import trl_defaults
    from mcp_server.recipe.variants import BASE_RECIPE

    defaults = trl_defaults()
    config = yaml_of(emit(run_name="defaults"))
    assert set(BASE_RECIPE) <= set(config)  # even num_generations=8, today's TRL default
    # max_completion_length is written even at TRL's default, saying it is unmeasured (emission/lengths.py)
    redundant = [k for k, v in config.items() if k in defaults and defaults[k] == v
                 and k not in set(BASE_RECIPE) | {"output_dir", "model_name_or_path", "dtype", "max_completion_length"}]
    assert redundant == []


def test_several_gpus_use_vllm_server_mode(workspace):
    result = emit(num_gpus=8, run_name="multi")
    assert yaml_of(result)["vllm_mode"] == "server" and result.validation.valid
    assert result.validation.target == "8x H100"


def test_gpu_without_bf16_trains_fp16_mixed_precision_and_fits(workspace):
    # T4: fp16 autocast over float32 master weights (fp32 matmuls ~8x slower; arXiv 2510.26788: fp16 is the more
    # stable RL precision), a LoRA base in fp16, and the memory plan's levers so the run fits the 15 GiB card
    result = emit(gpu="T4", run_name="t4")
    config = yaml_of(result)
    assert config["bf16"] is False and config["fp16"] is True and config["dtype"] == "float32"
    assert result.validation.valid and any(f.code in ("memory_fits", "memory_tight")
                                           for f in result.validation.findings), result.validation.findings
    assert "2510.26788" in Path(result.config_path).read_text()
    lora = yaml_of(emit(gpu="T4", finetune="lora", run_name="t4-lora"))
    assert lora["dtype"] == "float16" and lora["fp16"] is True


@pytest.mark.parametrize("kw,expect", [
    ({"variant": "dapo"}, {"loss_type": "dapo", "epsilon_high": 0.28, "beta": 0.0, "mask_truncated_completions": True,
                           "steps_per_generation": 64}),
    ({"symptom": "entropy_collapse"}, {"loss_type": "dapo", "epsilon_high": 0.28}),
    ({"variant": "dr_grpo"}, {"loss_type": "dr_grpo", "scale_rewards": "none", "steps_per_generation": None}),
    ({"symptom": "length_bias"}, {"loss_type": "dr_grpo", "scale_rewards": "none"}),
    ({"variant": "gspo"}, {"importance_sampling_level": "sequence", "loss_type": "grpo", "epsilon": 3e-4,
                           "epsilon_high": 4e-4, "steps_per_generation": 16}),
])
def test_variants_by_name_or_symptom(workspace, kw, expect):
    result = emit(run_name="variant", **kw)
    config = yaml_of(result)
    if expect.get("steps_per_generation"):  # mini-batches per rollout x the accumulation the plan chose
        expect["steps_per_generation"] = expect["steps_per_generation"] // 4 * config["gradient_accumulation_steps"]
    assert {k: config.get(k) for k in expect} == expect
    assert result.validation.valid


def test_moe_model_gets_gspo_and_other_variants_need_a_reason(workspace, tmp_path):
    model = tmp_path / "moe"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({  # a small, complete MoE config: the emitter plans its memory
        "model_type": "qwen3_moe", "num_experts": 64, "num_experts_per_tok": 4, "hidden_size": 256,
        "intermediate_size": 512, "moe_intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000, "max_position_embeddings": 4096}))
    result = emit(model=str(model), run_name="moe")
    assert result.variant == "gspo" and yaml_of(result)["importance_sampling_level"] == "sequence"
    with pytest.raises(UserInputError, match="variant"):
        emit(model=str(model), variant="dapo", run_name="moe2")
    assert emit(model=str(model), variant="dapo", override_reason="ablation", run_name="moe3").variant == "dapo"


def test_lora_defaults(workspace):
    config = yaml_of(emit(finetune="lora", lora_r=32, run_name="lora"))
    assert config["use_peft"] is True and config["lora_r"] == 32 and config["lora_alpha"] == 64
    assert config["lora_target_modules"] == "all-linear" and config["learning_rate"] == 1e-5
    qlora = yaml_of(emit(finetune="qlora", run_name="qlora"))
    assert qlora["load_in_4bit"] is True and qlora["lora_alpha"] == 32


def test_overrides_win_and_are_validated(workspace):
    result = emit(overrides={"max_completion_length": 512, "loss_type": "foo"}, run_name="ovr")
    assert result.config["max_completion_length"] == 512  # refused: the config comes back, nothing is written
    assert not result.validation.valid and not Path(result.run_dir).exists()
    assert any(f.code == "invalid_choice" for f in result.validation.findings)


def test_config_yaml_is_accepted_by_trls_own_parser(workspace):
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser
    from trl.scripts.grpo import GRPOScriptArguments

    result = emit(model="tiny", gpu="cpu", run_name="parse")
    parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig))
    script, training, model, data = parser.parse_args_and_config(
        ["--config", result.config_path], fail_with_unknown_args=True)
    assert training.loss_type == "dapo" and model.model_name_or_path.endswith(f"tiny-qwen2-v{TINY_VERSION}")
    assert script.reward_funcs == ["mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"]
    assert data.datasets[0].path == "json"


def test_bad_input_is_a_clear_error(workspace, tmp_path):
    with pytest.raises(UserInputError, match="^model"):
        emit(model="./no/such/model")
    with pytest.raises(UserInputError, match="^dataset"):
        emit(dataset="./missing.jsonl")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "1+1"}) + "\n")
    with pytest.raises(UserInputError, match="prompt_column"):
        emit(dataset=str(data))


@pytest.fixture(scope="module")
def trained_tiny_run(tmp_path_factory, tiny_model):
    """One real 2-step CPU run of an emitted tiny config, read by the two tests after it (one training, their
    assertions): emitted through the CLI with `--report-to tensorboard`, then `python train/train.py` in its own
    process as the emitted command says. Returns the CLI's JSON result, the run directory and the finished process."""
    overrides = {"max_steps": 2, "per_device_train_batch_size": 4, "num_generations": 4,
                 "gradient_accumulation_steps": 1, "max_completion_length": 8, "logging_steps": 1,
                 "save_strategy": "no"}
    flags = [arg for key, value in overrides.items() for arg in ("--override", f"{key}={value}")]
    with module_workspace(tmp_path_factory, "recipe-emit-train"):
        proc, out = run_cli_json("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu",
                                 "--run-name", "tb", "--report-to", "tensorboard", *flags, here=True)
        assert proc.returncode == 0, proc.stderr
        run = Path(out["run_dir"])
        env = {k: v for k, v in checkout_env().items() if k != "TENSORBOARD_LOGGING_DIR"}
        train = subprocess.run([sys.executable, "train/train.py", "--config", "train/config.yaml"], cwd=run,
                               env=env, capture_output=True, text=True, timeout=600)
        yield out, run, train


@pytest.mark.slow
def test_emitted_tiny_config_trains_for_real_on_cpu(trained_tiny_run):
    result, run, proc = trained_tiny_run
    assert result["validation"]["valid"], result["validation"]["findings"]
    assert result["config"]["use_cpu"] is True and "use_vllm" not in result["config"]  # TRL's default false: no vLLM
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (run / "train/logs/progress.jsonl").read_text().splitlines()]
    steps = [x for x in lines if "train_runtime" not in x]  # the end-of-training summary is not a step
    assert [x["step"] for x in steps] == [1, 2]
    for key in ("loss", "lr", "mem_gb", "temp_c", "reward", "reward_std", "frac_reward_zero_std", "kl", "entropy",
                "completion_mean_length", "clipped_ratio", "grad_norm", "step_time"):
        assert key in lines[0]
    assert json.loads((run / "train/logs/outcome.json").read_text())["state"] == "succeeded"
    assert (run / "checkpoints" / "model.safetensors").is_file()


def test_emission_says_when_the_run_will_not_fit_and_what_fixes_it(workspace):
    from mcp_server.recipe.validate import validate_values

    result = emit(model="Qwen/Qwen2.5-1.5B-Instruct", gpu="RTX 4090", run_name="fit")
    f = next(f for f in result.validation.findings if f.code == "memory_does_not_fit")
    # float32 master weights, grads and AdamW state of 1.5B (24 GB) cannot fit a 24 GB card: the fix moves the
    # optimizer state off the GPU (ZeRO offload) or trains LoRA adapters instead
    assert f.severity == "error" and not result.validation.valid
    assert "offload_optimizer" in f.fix or "use_peft" in f.fix
    assert not Path(result.run_dir).exists()  # NOT VALID: nothing written (issue 49); the config it would have been:
    patched = {**result.config, "use_peft": True, "learning_rate": 1e-5}
    assert validate_values(patched, "RTX 4090", 1).valid
    roomy = emit(model="Qwen/Qwen2.5-1.5B-Instruct", gpu="H200", run_name="fit2")
    assert any(f.code == "memory_fits" for f in roomy.validation.findings)


@pytest.mark.slow
def test_report_to_tensorboard_logs_the_reward_inside_the_run(trained_tiny_run):
    """`--report-to tensorboard` through the CLI, then a real 2-step run: TRL's TensorBoardCallback writes event
    files under the run's checkpoints folder (output_dir/runs/<time>_<host>), holding the logged reward."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, run, train = trained_tiny_run
    assert yaml.safe_load((run / "train/config.yaml").read_text())["report_to"] == ["tensorboard"]
    assert train.returncode == 0, train.stderr[-3000:]
    events = list((run / "checkpoints" / "runs").glob("*/events.out.tfevents.*"))
    assert len(events) == 1, sorted(p.relative_to(run) for p in run.rglob("*tfevents*"))
    scalars = EventAccumulator(str(events[0].parent)).Reload()
    assert [e.step for e in scalars.Scalars("train/reward")] == [1, 2]


def test_report_to_on_the_cli_takes_a_name_or_a_comma_list(workspace):
    proc, out = run_cli_json("emit-config", "--model", HUB_MODEL, "--dataset", "tiny", "--run-name", "both",
                             "--report-to", "tensorboard,trackio", here=True)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(Path(out["config_path"]).read_text())["report_to"] == ["tensorboard", "trackio"]
    bad = cli_here("emit-config", "--model", HUB_MODEL, "--dataset", "tiny", "--report-to", "tensorboard,comet")
    assert bad.returncode != 0 and "--report-to" in bad.stderr and "'comet'" in bad.stderr
    assert "trackio, wandb, mlflow, tensorboard" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("num_gpus, use_vllm", [(1, True), (2, False), (4, False), (2, True)])
def test_several_gpus_start_through_launch_training_never_as_one_process(workspace, num_gpus, use_vllm):
    """2- and 4-GPU runs printed `python train/train.py` (one process on one GPU) as the way to start them (the
    suite checked 1 and 8 GPUs with a vLLM server only). A catalog model, so the memory plan (offline) lays the
    GPUs out: without vLLM every GPU trains."""
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    result = emit_grpo_config(GRPORecipeRequest(model="Qwen/Qwen2.5-1.5B-Instruct", dataset="tiny", gpu="H100",
                                                num_gpus=num_gpus, run_name=f"gpus-{num_gpus}",
                                                overrides={"use_vllm": use_vllm}))
    header = next(line for line in Path(result.config_path).read_text().splitlines() if "Train with" in line)
    if num_gpus == 1:
        assert result.launch_command.endswith("python train/train.py --config train/config.yaml"), result
        return
    for text in (result.launch_command, header):
        assert "launch-training" in text and "training GPU(s)" in text, text
    assert "&& python train/train.py" not in result.launch_command
