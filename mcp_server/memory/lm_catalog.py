"""The language-model catalog: popular open models and their architecture numbers (from each model's config.json).

Names match case-insensitively, with or without the organisation prefix and an -Instruct/-it suffix, so
'Qwen/Qwen2.5-7B-Instruct', 'qwen2.5-7b' and 'Qwen2.5-7B' are the same entry. Unknown names get the closest ones.
"""

from __future__ import annotations

import re

from mcp_server.errors import UserInputError, closest_names, did_you_mean
from mcp_server.memory.params import Architecture

# Vision tower + projector of Gemma 3 4B/12B/27B (SigLIP so400m, ~417M), loaded with the multimodal checkpoints.
_GEMMA3_VISION = 416_866_032


def _a(family, h, i, layers, heads, kv, vocab, tied, head_dim=None, **kw) -> Architecture:
    return Architecture(family=family, hidden_size=h, intermediate_size=i, num_hidden_layers=layers,
                        num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                        tie_word_embeddings=tied, head_dim=head_dim, **kw)


# hub id -> architecture
CATALOG: dict[str, Architecture] = {
    # Qwen2 / Qwen2.5 (q/k/v bias)
    "Qwen/Qwen2-7B-Instruct": _a("qwen2", 3584, 18944, 28, 28, 4, 152064, False),
    "Qwen/Qwen2.5-0.5B-Instruct": _a("qwen2", 896, 4864, 24, 14, 2, 151936, True),
    "Qwen/Qwen2.5-1.5B-Instruct": _a("qwen2", 1536, 8960, 28, 12, 2, 151936, True),
    "Qwen/Qwen2.5-3B-Instruct": _a("qwen2", 2048, 11008, 36, 16, 2, 151936, True),
    "Qwen/Qwen2.5-7B-Instruct": _a("qwen2", 3584, 18944, 28, 28, 4, 152064, False),
    "Qwen/Qwen2.5-14B-Instruct": _a("qwen2", 5120, 13824, 48, 40, 8, 152064, False),
    "Qwen/Qwen2.5-32B-Instruct": _a("qwen2", 5120, 27648, 64, 40, 8, 152064, False),
    "Qwen/Qwen2.5-72B-Instruct": _a("qwen2", 8192, 29568, 80, 64, 8, 152064, False),
    "Qwen/Qwen2.5-Math-1.5B": _a("qwen2", 1536, 8960, 28, 12, 2, 151936, True),
    "Qwen/Qwen2.5-Math-7B": _a("qwen2", 3584, 18944, 28, 28, 4, 152064, False),
    # Qwen3 (q/k norms, head_dim 128)
    "Qwen/Qwen3-0.6B": _a("qwen3", 1024, 3072, 28, 16, 8, 151936, True, 128),
    "Qwen/Qwen3-1.7B": _a("qwen3", 2048, 6144, 28, 16, 8, 151936, True, 128),
    "Qwen/Qwen3-4B": _a("qwen3", 2560, 9728, 36, 32, 8, 151936, True, 128),
    "Qwen/Qwen3-8B": _a("qwen3", 4096, 12288, 36, 32, 8, 151936, False, 128),
    "Qwen/Qwen3-14B": _a("qwen3", 5120, 17408, 40, 40, 8, 151936, False, 128),
    "Qwen/Qwen3-32B": _a("qwen3", 5120, 25600, 64, 64, 8, 151936, False, 128),
    "Qwen/Qwen3-30B-A3B": _a("qwen3_moe", 2048, 6144, 48, 32, 4, 151936, False, 128,
                             num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768),
    "Qwen/Qwen3-235B-A22B": _a("qwen3_moe", 4096, 12288, 94, 64, 4, 151936, False, 128,
                               num_experts=128, num_experts_per_tok=8, moe_intermediate_size=1536),
    # Llama 3.x
    "meta-llama/Llama-3.2-1B-Instruct": _a("llama", 2048, 8192, 16, 32, 8, 128256, True, 64),
    "meta-llama/Llama-3.2-3B-Instruct": _a("llama", 3072, 8192, 28, 24, 8, 128256, True, 128),
    "meta-llama/Llama-3.1-8B-Instruct": _a("llama", 4096, 14336, 32, 32, 8, 128256, False),
    "meta-llama/Llama-3.1-70B-Instruct": _a("llama", 8192, 28672, 80, 64, 8, 128256, False),
    "meta-llama/Llama-3.3-70B-Instruct": _a("llama", 8192, 28672, 80, 64, 8, 128256, False),
    # Gemma 2 / 3 (tied embeddings, four norms per layer)
    "google/gemma-2-2b-it": _a("gemma2", 2304, 9216, 26, 8, 4, 256000, True, 256),
    "google/gemma-2-9b-it": _a("gemma2", 3584, 14336, 42, 16, 8, 256000, True, 256),
    "google/gemma-2-27b-it": _a("gemma2", 4608, 36864, 46, 32, 16, 256000, True, 128),
    "google/gemma-3-1b-it": _a("gemma3_text", 1152, 6912, 26, 4, 1, 262144, True, 256),
    "google/gemma-3-4b-it": _a("gemma3_text", 2560, 10240, 34, 8, 4, 262208, True, 256,
                               extra_params=_GEMMA3_VISION + 1152 * 2560),
    "google/gemma-3-12b-it": _a("gemma3_text", 3840, 15360, 48, 16, 8, 262208, True, 256,
                                extra_params=_GEMMA3_VISION + 1152 * 3840),
    "google/gemma-3-27b-it": _a("gemma3_text", 5376, 21504, 62, 32, 16, 262208, True, 128,
                                extra_params=_GEMMA3_VISION + 1152 * 5376),
    # Mistral
    "mistralai/Mistral-7B-Instruct-v0.3": _a("mistral", 4096, 14336, 32, 32, 8, 32768, False),
    "mistralai/Mistral-Nemo-Instruct-2407": _a("mistral", 5120, 14336, 40, 32, 8, 131072, False, 128),
    "mistralai/Mistral-Small-24B-Instruct-2501": _a("mistral", 5120, 32768, 40, 32, 8, 131072, False, 128),
    # Phi (fused qkv_proj and gate_up_proj)
    "microsoft/Phi-3.5-mini-instruct": _a("phi3", 3072, 8192, 32, 32, 32, 32064, False),
    "microsoft/Phi-4-mini-instruct": _a("phi3", 3072, 8192, 32, 24, 8, 200064, True),
    "microsoft/phi-4": _a("phi3", 5120, 17920, 40, 40, 10, 100352, False),
    # gpt-oss (MoE, biases everywhere, attention sinks)
    "openai/gpt-oss-20b": _a("gpt_oss", 2880, 2880, 24, 64, 8, 201088, False, 64,
                             num_experts=32, num_experts_per_tok=4, moe_intermediate_size=2880),
    "openai/gpt-oss-120b": _a("gpt_oss", 2880, 2880, 36, 64, 8, 201088, False, 64,
                              num_experts=128, num_experts_per_tok=4, moe_intermediate_size=2880),
    # DeepSeek-R1 distills (Qwen2.5 / Llama 3 architectures)
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": _a("qwen2", 1536, 8960, 28, 12, 2, 151936, False),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": _a("qwen2", 3584, 18944, 28, 28, 4, 152064, False),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": _a("qwen2", 5120, 13824, 48, 40, 8, 152064, False),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": _a("qwen2", 5120, 27648, 64, 40, 8, 152064, False),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": _a("llama", 4096, 14336, 32, 32, 8, 128256, False),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": _a("llama", 8192, 28672, 80, 64, 8, 128256, False),
}


# Context length (max_position_embeddings of each config.json), by hub-id prefix; the first match wins.
_CONTEXT = [
    ("Qwen/Qwen2.5-Math", 4096), ("Qwen/Qwen2", 32768), ("Qwen/Qwen3", 40960), ("meta-llama/", 131072),
    ("google/gemma-2", 8192), ("google/gemma-3-1b", 32768), ("google/gemma-3", 131072),
    ("mistralai/Mistral-7B", 32768), ("mistralai/Mistral-Nemo", 1024000), ("mistralai/Mistral-Small", 32768),
    ("microsoft/phi-4", 16384), ("microsoft/", 131072), ("openai/", 131072), ("deepseek-ai/", 131072),
]
for _hub_id, _arch in CATALOG.items():
    _arch.max_position_embeddings = next(n for prefix, n in _CONTEXT if _hub_id.startswith(prefix))


def _key(name: str) -> str:
    name = name.strip().lower().split("/")[-1]
    name = re.sub(r"-(instruct|it|chat|base)(-\d+)?$", "", name)
    return re.sub(r"[^a-z0-9.]", "", name)


_BY_KEY: dict[str, str] = {}
for _hub_id in CATALOG:
    _BY_KEY.setdefault(_key(_hub_id), _hub_id)


def closest_model_names(name: str, n: int = 3) -> list[str]:
    return closest_names(_key(name), _BY_KEY, n=n, cutoff=0.5)


def find_model(name: str) -> tuple[str, Architecture] | None:
    """(hub id, architecture) for a catalog name, or None."""
    hub_id = _BY_KEY.get(_key(name))
    if hub_id is None:
        return None
    return hub_id, CATALOG[hub_id].model_copy(deep=True)


_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)b(?![a-z0-9])")


def find_family(name: str) -> tuple[str, Architecture] | None:
    """(hub id, architecture) of the catalog model of the same family and size when `name` is not in the catalog:
    'Qwen/Qwen2.5-Coder-1.5B-Instruct' -> Qwen/Qwen2.5-1.5B-Instruct (a fine-tune or a domain variant keeps its
    base's config numbers). The family is the catalog name before its size ('qwen2.5-'), matched at the start of
    the name; the first catalog entry wins, so a plain model comes before its -Math variant. None without a size."""
    base = name.strip().lower().split("/")[-1]
    size = _SIZE.search(base)
    if size is None:
        return None
    for hub_id, arch in CATALOG.items():
        entry = hub_id.lower().split("/")[-1]
        entry_size = _SIZE.search(entry)
        if entry_size and entry_size[1] == size[1] and base.startswith(entry[:entry_size.start()]):
            return hub_id, arch.model_copy(deep=True)
    return None


def lookup_model(name: str, field: str = "model") -> tuple[str, Architecture]:
    found = find_model(name)
    if found is None:
        hint = did_you_mean(closest_model_names(name))
        raise UserInputError(
            field,
            f"'{name}' is neither a local model directory / config.json nor a catalog model.{hint} "
            "Pass a local path, a catalog name (see references/model-catalog.md), or the architecture numbers.",
        )
    return found
