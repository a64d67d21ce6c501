"""Parameter counts from architecture numbers equal sum(p.numel()) of a real transformers model of each family."""

from __future__ import annotations

import pytest

from mcp_server.errors import UserInputError
from mcp_server.memory.lm_catalog import CATALOG, closest_model_names, lookup_model
from mcp_server.memory.params import (
    FAMILIES,
    Architecture,
    architecture_from_config,
    count_params,
    lora_trainable_params,
)

# Tiny dims, the same shape of config as the catalog entries of each family (biases, GQA, tied or not, MoE).
TINY = {
    "llama": dict(hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=300, tie_word_embeddings=True),
    "mistral": dict(hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=24, vocab_size=300, tie_word_embeddings=False),
    "qwen2": dict(hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=300, tie_word_embeddings=False),
    "qwen3": dict(hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, vocab_size=300, tie_word_embeddings=True),
    "qwen3_moe": dict(hidden_size=64, intermediate_size=112, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=32, vocab_size=300, tie_word_embeddings=False,
                      num_experts=6, num_experts_per_tok=2, moe_intermediate_size=24, mlp_only_layers=[1]),
    "gemma2": dict(hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, vocab_size=300, tie_word_embeddings=True),
    "gemma3_text": dict(hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=1, head_dim=32, vocab_size=300, tie_word_embeddings=True),
    "phi3": dict(hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=300, tie_word_embeddings=False, pad_token_id=0),
    "gpt_oss": dict(hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, vocab_size=300, tie_word_embeddings=False,
                    num_local_experts=4, num_experts_per_tok=2),
}


def _build(family: str, cfg: dict):
    import transformers

    cls = {
        "llama": ("LlamaConfig", "LlamaForCausalLM"), "mistral": ("MistralConfig", "MistralForCausalLM"),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
        "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"), "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
        "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM"), "phi3": ("Phi3Config", "Phi3ForCausalLM"),
        "gpt_oss": ("GptOssConfig", "GptOssForCausalLM"),
    }[family]
    config = getattr(transformers, cls[0])(**cfg)
    return config, getattr(transformers, cls[1])(config)


def test_every_catalog_family_has_a_tiny_twin():
    assert {a.family for a in CATALOG.values()} <= set(TINY) == set(FAMILIES)


@pytest.mark.parametrize("family", sorted(TINY))
def test_count_equals_transformers_numel(family):
    config, model = _build(family, TINY[family])
    arch = architecture_from_config(config.to_dict())
    assert arch.family == family
    expected = sum(p.numel() for p in model.parameters())
    counted = count_params(arch)
    assert counted.total == expected
    linear = sum(m.weight.numel() for n, m in model.named_modules()
                 if type(m).__name__ == "Linear" and not n.endswith("lm_head"))
    assert counted.linear == linear


@pytest.mark.parametrize("family", ["qwen2", "qwen3_moe", "phi3", "gemma3_text"])
def test_lora_count_equals_peft(family):
    from peft import LoraConfig, get_peft_model

    config, model = _build(family, TINY[family])
    arch = architecture_from_config(config.to_dict())
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert lora_trainable_params(arch, 4, "all-linear") == trainable


def test_catalog_totals_match_published_sizes():
    published_billions = {  # model cards
        "Qwen/Qwen2.5-7B-Instruct": 7.61, "Qwen/Qwen3-0.6B": 0.6, "Qwen/Qwen3-30B-A3B": 30.5,
        "meta-llama/Llama-3.1-8B-Instruct": 8.03, "openai/gpt-oss-20b": 20.9, "google/gemma-3-27b-it": 27.4,
        "microsoft/phi-4": 14.7, "Qwen/Qwen2.5-72B-Instruct": 72.7,
    }
    for name, billions in published_billions.items():
        assert count_params(CATALOG[name]).total / 1e9 == pytest.approx(billions, rel=0.02), name
    moe = count_params(CATALOG["Qwen/Qwen3-30B-A3B"])
    assert moe.active / 1e9 == pytest.approx(3.3, rel=0.05)


def test_catalog_size_and_name_matching():
    assert len(CATALOG) >= 25
    assert lookup_model("qwen2.5-7b")[0] == "Qwen/Qwen2.5-7B-Instruct"
    assert lookup_model("Qwen/Qwen3-8B")[0] == "Qwen/Qwen3-8B"
    with pytest.raises(UserInputError) as err:
        lookup_model("Qwen3-9B")
    assert err.value.field == "model" and "Qwen/Qwen3-8B" in str(err.value)
    assert "meta-llama/Llama-3.1-8B-Instruct" in closest_model_names("llama-3.1-8")


def test_unknown_lora_module_names_the_known_ones():
    with pytest.raises(UserInputError) as err:
        lora_trainable_params(CATALOG["Qwen/Qwen3-8B"], 16, ["qkv"])
    assert "q_proj" in str(err.value)


def test_explicit_architecture_rejects_impossible_numbers():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Architecture(family="llama", hidden_size=0, intermediate_size=1, num_hidden_layers=1,
                     num_attention_heads=1, num_key_value_heads=1, vocab_size=10)


def test_model_catalog_reference_lists_every_model_and_gpu():
    from pathlib import Path

    from mcp_server.gpus import list_gpus

    text = (Path(__file__).resolve().parents[1] / "references" / "model-catalog.md").read_text(encoding="utf-8")
    missing = [name for name in CATALOG if f"`{name}`" not in text]
    missing += [g.name for g in list_gpus() if f"| {g.name} |" not in text]
    assert not missing, f"references/model-catalog.md lacks {missing}"
