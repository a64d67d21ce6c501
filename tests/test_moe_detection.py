"""Mixture-of-experts detection from the config's expert fields (every architecture the installed transformers
knows), its name fallback when no config is readable offline, and LoRA targets that leave the routers alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from mcp_server.model_ref import EXPERT_COUNT_KEYS, is_moe, moe_expert_count
from mcp_server.recipe.validate import validate_values
from mcp_server.recipe.variants import BASE_RECIPE

# Expert fields of transformers' configs that are not the number of routed experts (top-k per token, shared
# experts, sizes, layouts, capacities, switches). A new field in a later transformers fails the test below until
# it is read as a count (model_ref.EXPERT_COUNT_KEYS) or listed here.
NOT_A_ROUTED_EXPERT_COUNT = {
    "num_experts_per_tok", "num_experts_per_token", "top_k_experts", "moe_k", "moe_topk",
    "n_shared_experts", "num_shared_experts", "moe_num_shared_experts", "zero_expert_num",
    "shared_expert_intermediate_size", "shared_experts_intermediate_size", "moe_shared_expert_intermediate_size",
    "expert_ffn_hidden_size", "share_expert_dim", "share_expert_dims", "expert_capacity", "expert_layer_offset",
    "expert_layer_period", "expert_selection_fn", "moe_normalize_expert_weights", "moe_shared_expert_overlap",
    "second_expert_policy", "shared_expert_combination_strategy", "shared_expert_sink", "use_expert_bias",
    # transformers 5.25's bailing_hybrid: per-layer SwiGLU clipping limits (its count is num_experts, read above)
    "expert_swiglu_limit_list", "share_expert_swiglu_limit_list",
}


def transformers_expert_fields() -> dict[str, set[str]]:
    """Every config field (declared, assigned or attribute-mapped) whose name mentions experts, with its models,
    read from the installed transformers' configuration sources (instantiating 800+ configs takes a minute)."""
    import transformers

    declared = re.compile(
        r"^\s+(\w*expert\w*)\s*:\s*[^=\n]+=|self\.(\w*expert\w*)\s*=|\"(\w*expert\w*)\"\s*:\s*\"", re.M
    )
    fields: dict[str, set[str]] = {}
    for path in (Path(transformers.__file__).parent / "models").glob("*/configuration_*.py"):
        for match in declared.finditer(path.read_text()):
            fields.setdefault(next(g for g in match.groups() if g), set()).add(path.parent.name)
    return fields


def test_every_expert_field_transformers_knows_is_read_or_classified():
    fields = transformers_expert_fields()
    assert len(fields) > 20 and {"num_local_experts", "n_routed_experts", "moe_num_experts"} <= set(fields)
    unclassified = {n: sorted(m)[:3] for n, m in fields.items()
                    if n not in EXPERT_COUNT_KEYS and n not in NOT_A_ROUTED_EXPERT_COUNT}
    assert not unclassified, f"expert fields neither read as a count nor classified: {unclassified}"
    assert set(EXPERT_COUNT_KEYS) <= set(fields)  # no key read that transformers never writes


MOE_TYPES = ["llama4", "glm4_moe", "deepseek_v3", "granitemoe", "granitemoehybrid", "mixtral", "qwen3_moe", "gpt_oss",
             "olmoe", "dbrx", "jamba", "phimoe", "ernie4_5_moe", "aria", "minimax", "qwen2_moe"]
DENSE_TYPES = ["llama", "qwen2", "qwen3", "mistral", "phi3", "gemma3_text", "gemma4_text", "granite", "glm4"]


def test_default_configs_of_moe_and_dense_architectures():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    for model_type in MOE_TYPES + DENSE_TYPES:
        config = CONFIG_MAPPING[model_type]().to_dict()
        assert (moe_expert_count(config) > 0) is (model_type in MOE_TYPES), (model_type, config.get("text_config"))


# config.json as the hub ships them (the expert fields that matter; Kimi-K2 is custom code on DeepSeek-V3's layout).
NAMED = {
    "Llama-4-Scout-17B-16E-Instruct": {"model_type": "llama4", "text_config": {"model_type": "llama4_text",
                                       "num_local_experts": 16, "num_experts_per_tok": 1}},
    "GLM-4.5-Air": {"model_type": "glm4_moe", "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8},
    "Kimi-K2-Instruct": {"model_type": "kimi_k2", "n_routed_experts": 384, "n_shared_experts": 1,
                         "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}},
    "granite-3.1-3b-a800m-instruct": {"model_type": "granitemoe", "num_local_experts": 40, "num_experts_per_tok": 8},
    "dbrx-instruct": {"model_type": "dbrx", "ffn_config": {"moe_num_experts": 16, "moe_top_k": 4}},
    "Qwen2.5-7B-Instruct": {"model_type": "qwen2", "intermediate_size": 18944},
    "gemma-4-dense": {"model_type": "gemma4", "text_config": {"enable_moe_block": False, "num_experts": None}},
    "hunyuan-dense-layout": {"model_type": "hunyuan_v1_moe", "num_experts": 1},
}


@pytest.mark.parametrize("name", NAMED)
def test_moe_from_a_local_config_through_validation(tmp_path, name):
    model = tmp_path / name
    model.mkdir()
    (model / "config.json").write_text(json.dumps(NAMED[name]))
    expected = moe_expert_count(NAMED[name]) > 0
    assert is_moe(str(model)) is expected
    values = dict(BASE_RECIPE, model_name_or_path=str(model), reward_funcs=["accuracy_reward"])
    codes = {f.code for f in validate_values(values).findings}
    assert ("moe_without_gspo" in codes) is expected


@pytest.mark.parametrize("name,expected", [
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", True), ("meta-llama/Llama-4-Maverick-17B-128E", True),
    ("zai-org/GLM-4.5-Air", True), ("moonshotai/Kimi-K2-Instruct", True), ("Qwen/Qwen3-30B-A3B", True),
    ("ibm-granite/granite-3.1-3b-a800m-instruct", True), ("openai/gpt-oss-20b", True),
    ("deepseek-ai/DeepSeek-V3", True), ("mistralai/Mixtral-8x7B-v0.1", True),
    ("Qwen/Qwen2.5-7B-Instruct", False), ("meta-llama/Llama-3.1-8B-Instruct", False), ("zai-org/GLM-4-9B-0414", False),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", False), ("ibm-granite/granite-3.3-8b-instruct", False),
    ("google/gemma-3-4b-it", False),
])
def test_hub_names_never_downloaded(tmp_path, monkeypatch, name, expected):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # nothing cached: only the name is known
    assert is_moe(name) is expected


# ---------------------------------------------------------------- LoRA targets without the routers
SMALL = dict(hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=128, head_dim=8)
TINY_MOE = {
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "llama4_text": dict(num_local_experts=4, num_experts_per_tok=1, intermediate_size_mlp=64),
    "glm4_moe": dict(n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1),
}


def lora_adapted(model_dir: Path, targets) -> set[str]:
    """Names of the modules and parameters PEFT gives a LoRA adapter on the real (tiny) model."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=targets))
    return {re.sub(r"\.(base_layer\.)?lora_A.*|\.layers\.\d+", "", n) for n, _ in peft_model.named_parameters()
            if "lora_A" in n}


@pytest.mark.parametrize("model_type", TINY_MOE)
def test_emitted_lora_targets_leave_the_router_alone(workspace, tmp_path, model_type):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    model_dir = tmp_path / model_type
    CONFIG_MAPPING[model_type](**SMALL, **TINY_MOE[model_type]).save_pretrained(model_dir)
    result = emit_grpo_config(GRPORecipeRequest(model=str(model_dir), finetune="lora", run_name=model_type))
    targets = yaml.safe_load(Path(result.config_path).read_text())["lora_target_modules"]
    assert isinstance(targets, list) and "gate" not in targets and "router" not in targets, targets
    assert "moe_lora_router" not in {f.code for f in result.validation.findings}

    everything, emitted = lora_adapted(model_dir, "all-linear"), lora_adapted(model_dir, targets)
    routers = {n for n in everything if n.endswith((".gate", ".router"))}
    assert routers, everything  # 'all-linear' adapts the router on this architecture ...
    assert not {n for n in emitted if n.endswith((".gate", ".router"))}  # ... the emitted targets do not
    assert emitted == everything - routers  # and adapt everything else 'all-linear' does


def test_all_linear_on_a_moe_config_is_flagged(tmp_path):
    model = tmp_path / "moe"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(NAMED["GLM-4.5-Air"]))
    values = dict(BASE_RECIPE, model_name_or_path=str(model), reward_funcs=["accuracy_reward"], use_peft=True,
                  learning_rate=1e-5, importance_sampling_level="sequence")
    for targets, flagged in (("all-linear", True), (["q_proj", "mlp.gate"], True), (["q_proj", "gate_proj"], False)):
        findings = {f.code: f for f in validate_values(dict(values, lora_target_modules=targets)).findings}
        assert ("moe_lora_router" in findings) is flagged, targets
