"""The recipe's knobs act when the emitted config runs: clips bite off-policy, Dr.GRPO's advantages differ from
the base's, a full fine-tune's weights move, model kwargs reach from_pretrained; and every emitted value th
differs from TRL's default says why.

Training outcomes are built by construction, never left to luck: a reward that differs inside every group by
construction (so every step has advantages), a learning rate large enough that the policy must move between
mini-batches where a clip is to be seen, and same-seed runs whose only difference is the knob under test.
"""

from __future__ import annotations

import importlib.util
import os
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from mcp_server.errors import UserInputError
from support import emit_config as emit
from mcp_server.recipe.precision import BF16_SWALLOW_LR, bf16_half_ulp, bf16_weights_allowed
from mcp_server.recipe.validate import validate_values

# Rewards 0..3 inside every group of 4 (groups are contiguous in TRL's batch): every group has a spread.
SPREAD_REWARD = (
    "def spread_reward(completions, **kwargs):\n    return [float(i % 4) for i in range(len(completions))]\n"
)
TINY_RUN = {"per_device_train_batch_size": 4, "num_generations": 4, "gradient_accumulation_steps": 1,
            "max_completion_length": 8, "logging_steps": 1, "report_to": "none", "save_strategy": "no"}


@pytest.fixture()
def spread(workspace, monkeypatch):
    (workspace / "spread_rewards.py").write_text(SPREAD_REWARD)
    monkeypatch.syspath_prepend(str(workspace))
    return "spread_rewards.spread_reward"


@pytest.fixture(autouse=True)
def _restore_cwd(monkeypatch):
    monkeypatch.chdir(os.getcwd())  # trainer_for moves into the run directory; this moves back after the test


def edited(result, **fields):
    """A valid emission whose train/config.yaml is then edited by hand to `fields`, as a person would: the recipe
    refuses those values (a NOT VALID emission writes nothing, issue 49), and what they do when trained anyway is
    what these tests measure."""
    assert result.validation.valid, result.validation
    path = Path(result.config_path)
    config = yaml.safe_load(path.read_text())
    config.update(fields)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return result


def trainer_for(result, argv_extra=()):
    """The emitted train/train.py, imported, builds the trainer from the emitted config (nothing mocked), from
    the run directory as launch.sh does (the config's paths are relative to it)."""
    os.chdir(result.run_dir)
    path = Path(result.train_script_path)
    spec = importlib.util.spec_from_file_location(f"train_{path.parent.parent.name.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_trainer(["--config", result.config_path, *argv_extra])


def train_logs(result):
    trainer = trainer_for(result)
    trainer.train()
    return [h for h in trainer.state.log_history if "train_runtime" not in h]


# ---------------------------------------------------------------- the off-policy structure lets the clip act
@pytest.mark.slow
def test_clips_act_only_where_the_variant_goes_off_policy(workspace, tiny_model, spread):
    # lr 5e-2: by construction the policy moves far between mini-batches of one generation batch.
    common = dict(model="tiny", gpu="cpu", rewards=[{"name": spread}])
    overrides = {**TINY_RUN, "max_steps": 2}
    base = edited(emit(run_name="clip-base", overrides=overrides, **common), learning_rate=5e-2)
    assert "steps_per_generation" not in base.config  # on-policy: one generation batch per optimizer step
    for log in train_logs(base):  # the ratio is exactly 1 (old log-probs are the current ones, detached)
        assert log["clip_ratio/region_mean"] == 0.0
    for variant, mini_batches in (("dapo", 16), ("gspo", 4)):
        # 8-token completions are nearly all truncated, and DAPO would mask them all: the clip is under test here
        masked = {"mask_truncated_completions": False} if variant == "dapo" else {}
        result = edited(emit(run_name=f"clip-{variant}", variant=variant, overrides={**overrides, **masked},
                             **common), learning_rate=5e-2)
        assert result.config["steps_per_generation"] == mini_batches * overrides["gradient_accumulation_steps"]
        logs = train_logs(result)
        # step 2 trains on a mini-batch sampled before the last update: the clip bites there
        clips = [log["clip_ratio/region_mean"] for log in logs]
        print(f"{variant}: clip_ratio/region_mean per step {clips}")
        assert max(clips[1:]) > 0, (variant, clips)


def test_off_policy_structure_follows_gradient_accumulation(workspace):
    for ga, expect in ((4, 64), (2, 32)):
        config = emit(model="Qwen/Qwen2.5-0.5B-Instruct", variant="dapo", run_name=f"spg{ga}",
                      overrides={"gradient_accumulation_steps": ga}).config
        assert config["steps_per_generation"] == expect
    own = emit(model="Qwen/Qwen2.5-0.5B-Instruct", variant="gspo", run_name="own",
               overrides={"num_iterations": 2}).config
    assert "steps_per_generation" not in own and own["num_iterations"] == 2  # the person's own structure wins


def test_dapo_adds_soft_overlong_punishment_and_offers_the_papers_group_size(workspace):
    result = emit(model="Qwen/Qwen2.5-0.5B-Instruct", variant="dapo", run_name="dapo")
    rewards = json.loads((Path(result.run_dir) / "train" / "rewards.json").read_text())
    length = result.config["max_completion_length"]
    assert rewards[-1] == {"name": "soft_overlong_punishment", "weight": 1.0,
                           "params": {"max_completion_len": length, "soft_punish_cache": round(length * 0.2)}}
    assert result.validation.valid, result.validation.findings
    paper = emit(model="Qwen/Qwen2.5-0.5B-Instruct", variant="dapo", run_name="dapo16",
                 overrides={"num_generations": 16})
    assert paper.validation.valid and paper.config["num_generations"] == 16


def test_soft_overlong_punishment_is_trls(workspace):
    from mcp_server.rewards import build_reward_funcs

    (func,) = build_reward_funcs([{"name": "soft_overlong_punishment",
                                   "params": {"max_completion_len": 100, "soft_punish_cache": 20}}])
    assert func(completions=["a"] * 3, completion_ids=[[1] * 80, [1] * 90, [1] * 101]) == [0.0, -0.5, -1.0]
    with pytest.raises(UserInputError, match="soft_punish_cache"):
        build_reward_funcs(
            [{"name": "soft_overlong_punishment", "params": {"max_completion_len": 10, "soft_punish_cache": 20}}]
        )


# ---------------------------------------------------------------- Dr.GRPO differs from the base where it acts
@pytest.mark.slow
def test_dr_grpo_advantages_keep_the_reward_scale_and_the_base_normalises_it(workspace, tiny_model, spread):
    """Same seed, same completions; only the reward's scale differs (x1 vs x100). The base divides advantages by
    the group std, so its gradient is unchanged; Dr.GRPO does not, so its gradient is 100x (the loss is linear
    in the advantages on-policy)."""
    norms = {}
    for variant in ("grpo", "dr_grpo"):
        for weight in (1.0, 100.0):
            result = emit(model="tiny", gpu="cpu", variant=variant, run_name=f"{variant}-{int(weight)}",
                          rewards=[{"name": spread, "weight": weight}], overrides={**TINY_RUN, "max_steps": 1})
            norms[variant, weight] = train_logs(result)[0]["grad_norm"]
    print(f"grad_norm at reward x1 / x100: {norms}")
    assert norms["grpo", 1.0] > 0
    assert math.isclose(norms["grpo", 100.0] / norms["grpo", 1.0], 1.0, rel_tol=1e-3)
    assert math.isclose(norms["dr_grpo", 100.0] / norms["dr_grpo", 1.0], 100.0, rel_tol=1e-3)


# ---------------------------------------------------------------- full fine-tunes keep fp32 master weights
@pytest.mark.slow
def test_full_finetune_weights_move_at_the_recipes_rate_and_pure_bf16_ones_do_not(workspace, tiny_model, spread):
    """The emitted full fine-tune (float32 weights, bf16 autocast) against the same run with bf16 weights, at
    the recipe's 1e-6 for 2 AdamW steps. AdamW moves each weight by about the learning rate; bf16 rounds away
    any update under half an ulp (6.1e-5 at |w| = 0.02), so only the few weights near zero can move."""
    h100 = emit(model="tiny", gpu="H100", run_name="ft-h100")
    assert h100.config["dtype"] == "float32" and h100.config["bf16"] is True
    fractions = {}
    for dtype in ("float32", "bfloat16"):
        result = edited(emit(model="tiny", gpu="cpu", run_name=f"ft-{dtype}", rewards=[{"name": spread}],
                             overrides={**TINY_RUN, "max_steps": 2, "bf16": True}), dtype=dtype)
        assert result.config["learning_rate"] == 1e-6
        trainer = trainer_for(result)
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        trainer.train()
        after = dict(trainer.model.named_parameters())
        changed = sum(int((after[n].detach() != w).sum()) for n, w in before.items())
        fractions[dtype] = changed / sum(w.numel() for w in before.values())
        assert str(trainer.model.dtype) == f"torch.{dtype}"
    print(f"fraction of weights changed after 2 AdamW steps at lr 1e-6: {fractions}")
    assert fractions["float32"] > 0.5 and fractions["bfloat16"] < 0.05, fractions


def test_bf16_rounding_threshold_is_half_an_ulp():
    import torch

    assert BF16_SWALLOW_LR == 2.0 ** -14
    w = torch.tensor(0.02, dtype=torch.bfloat16)
    half = bf16_half_ulp(0.02)
    assert w + torch.tensor(half * 0.99, dtype=torch.bfloat16) == w  # below half an ulp: rounded away
    assert w + torch.tensor(half * 1.01, dtype=torch.bfloat16) != w


def test_validator_rejects_pure_bf16_full_finetune_at_rl_rates():
    config = {"model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "reward_funcs": ["accuracy_reward"],
              "learning_rate": 5e-7, "bf16": True, "dtype": "bfloat16"}
    result = validate_values(config, "H100", 1)
    finding = next(f for f in result.findings if f.code == "full_finetune_low_precision_weights")
    assert not result.valid and finding.field == "dtype" and "dtype: float32" in finding.fix
    assert "rounded away" in finding.message
    assert bf16_weights_allowed({"deepspeed": "zero3.json"})  # ZeRO keeps float32 master weights itself
    for ok in ({"dtype": "float32"}, {"use_peft": True, "learning_rate": 1e-5},
               {"model_init_kwargs": {"dtype": "float32"}, "dtype": None}):
        codes = {f.code for f in validate_values({**config, **ok}, "H100", 1).findings}
        assert "full_finetune_low_precision_weights" not in codes, ok


# ---------------------------------------------------------------- model kwargs reach from_pretrained
@pytest.mark.slow
def test_model_kwargs_reach_from_pretrained(workspace, tiny_model):
    result = emit(model="tiny", gpu="cpu", run_name="kwargs",
                  overrides={"attn_implementation": "eager", "model_revision": "main"})
    trainer = trainer_for(result)
    assert trainer.model.config._attn_implementation == "eager"  # the CPU default would be sdpa
    assert trainer.args.model_init_kwargs["revision"] == "main"
    assert str(trainer.model.dtype) == "torch.float32"


# ---------------------------------------------------------------- thinking models
def test_hybrid_thinking_models_get_the_switch_and_a_length_for_the_mode(workspace, tiny_model, tmp_path):
    off = emit(model="Qwen/Qwen3-8B", run_name="think-off", finetune="lora").config
    assert off["chat_template_kwargs"] == {"enable_thinking": False} and off["max_completion_length"] == 1024
    on = emit(model="Qwen/Qwen3-8B", run_name="think-on", finetune="lora", thinking=True).config
    assert on["chat_template_kwargs"] == {"enable_thinking": True} and on["max_completion_length"] == 8192
    assert "chat_template_kwargs" not in emit(model="Qwen/Qwen3-4B-Instruct-2507", run_name="single").config
    local = tmp_path / "hybrid"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({  # complete: the emitter plans a GPU target's memory
        "model_type": "qwen3", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000,
        "max_position_embeddings": 40960}))
    (local / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": "{% if enable_thinking is defined and enable_thinking is false %}"
                "<think></think>{% endif %}"
            }
        )
    )
    assert emit(model=str(local), run_name="local").config["chat_template_kwargs"] == {"enable_thinking": False}
    with pytest.raises(UserInputError, match="^thinking"):
        emit(model="tiny", gpu="cpu", thinking=True, run_name="nothink")


# ---------------------------------------------------------------- configs an RL expert signs
EXPERT_CONFIGS = {
    "7B LoRA 1x H100": dict(model="Qwen/Qwen2.5-7B-Instruct", finetune="lora"),
    "1.5B full 4x H100": dict(model="Qwen/Qwen2.5-1.5B-Instruct", num_gpus=4),
    "MoE 8x H100": dict(model="Qwen/Qwen3-30B-A3B", num_gpus=8, finetune="lora"),
    "DAPO": dict(model="Qwen/Qwen2.5-1.5B-Instruct", variant="dapo"),
    "GSPO": dict(model="Qwen/Qwen2.5-1.5B-Instruct", variant="gspo"),
    "T4": dict(model="Qwen/Qwen2.5-0.5B-Instruct", gpu="T4", finetune="lora"),
}


def uncommented_values(text: str, defaults: dict) -> list[str]:
    """Top-level keys whose value differs from TRL's default and whose line has no comment right above it."""
    lines = text.splitlines()
    config = yaml.safe_load(text)
    out = []
    for i, line in enumerate(lines):
        match = re.match(r"^([A-Za-z_]\w*):", line)
        if not match:
            continue
        key = match.group(1)
        if key in defaults and defaults[key] == config[key]:
            continue
        above = lines[i - 1] if i else ""
        if not above.startswith("#") or above.startswith("# ---"):
            out.append(key)
    return out


@pytest.mark.parametrize("name", list(EXPERT_CONFIGS))
def test_every_value_that_differs_from_trls_default_says_why(workspace, name):
    from mcp_server.recipe.trl_fields import trl_defaults

    result = emit(run_name=re.sub(r"\W+", "-", name.lower()), **EXPERT_CONFIGS[name])
    text = Path(result.config_path).read_text()
    assert uncommented_values(text, trl_defaults()) == []
    config = yaml.safe_load(text)
    full = not config.get("use_peft")
    # full fine-tunes keep float32 master weights; a LoRA base is bf16, or fp16 on a GPU without bf16 (T4)
    assert config["dtype"] == ("float32" if full else "bfloat16" if config["bf16"] else "float16")
    assert not [f for f in result.validation.findings if f.severity == "error"], result.validation.findings
