"""What a model reference means, and loading one (docs/architecture.md, "Floors").

A reference is 'tiny' (the embedded offline model), a local directory saved with save_pretrained (a LoRA adapter
directory too, for loading), or a hub name (org/name). What can be known without downloading (its config.json,
whether it is a mixture of experts) is read from the directory or the local HF cache, never the network.
torch, transformers and peft are imported inside the functions that load: the server's light environment has
none of them (README, "Two Pythons").
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.tiny import ensure_tiny_model

TINY = "tiny"
# Config keys that only mixture-of-experts architectures carry (Qwen2/3-MoE, Mixtral, DeepSeek, gpt-oss, ...).
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
_MOE_NAME = re.compile(r"(moe|mixtral|-a\d+(\.\d+)?b|gpt-oss|deepseek-v[23]|deepseek-r1$|qwen3-(30|235)b)", re.I)
SMALL_MODEL_PARAMS = 50_000_000


# ---------------------------------------------------------------- what a name means
def expand_tiny(model: str) -> str:
    """'tiny' -> the embedded model's directory (written on first use); anything else unchanged."""
    return str(ensure_tiny_model()) if model == TINY else model


def resolve_model(model: str) -> str:
    """'tiny' -> the embedded model's directory; a local path must exist; anything else is a hub name."""
    if model == TINY:
        return expand_tiny(model)
    path = Path(model).expanduser()
    looks_local = model.startswith((".", "/", "~")) or path.exists()
    if looks_local:
        if not (path / "config.json").is_file():
            raise UserInputError(
                "model", f"'{model}' is not a model directory (no config.json there). Give a local directory "
                "saved with save_pretrained, a hub name such as 'Qwen/Qwen2.5-1.5B-Instruct', or 'tiny'."
            )
        return str(path.resolve())
    if not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", model):
        raise UserInputError("model", f"'{model}' is neither an existing local directory nor a hub name (org/name).")
    return model


def resolve_loadable(model: str) -> str:
    """resolve_model, for a model loaded here: a hub name only when the hub can be reached."""
    ref = resolve_model(model)
    if not Path(ref).is_dir() and os.environ.get("HF_HUB_OFFLINE") == "1":
        raise UserInputError(
            "model", f"'{model}' is not a local model directory (and hub names need network); give a path or 'tiny'"
        )
    return ref


# ---------------------------------------------------------------- what can be known offline
def cached_config_path(model: str) -> str | None:
    """config.json of a hub model downloaded before, from the local HF cache (never the network)."""
    if model.startswith((".", "/", "~")):  # a path, not a repo id
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
    except Exception:  # no huggingface_hub, an invalid repo id, an unreadable cache: not cached
        return None
    return cached if isinstance(cached, str) else None


def model_config(model: str) -> dict | None:
    """The model's config.json: from a local directory, else from the local HF cache (never the network)."""
    path = Path(model)
    if (path / "config.json").is_file():
        return json.loads((path / "config.json").read_text())
    cached = cached_config_path(model)
    return json.loads(Path(cached).read_text()) if cached else None


def is_moe(model: str) -> bool:
    """Whether the model is a mixture of experts: from its config when known, else from its name."""
    config = model_config(model)
    if config is not None:
        text_config = config.get("text_config") or config
        return any((text_config.get(k) or 0) for k in _MOE_KEYS)
    return bool(_MOE_NAME.search(model))


# ---------------------------------------------------------------- loading (training interpreter only)
def load_model(model_ref: str | Path):
    """(model, tokenizer) in eval mode for a hub name, a full save or a LoRA adapter directory (merged in memory).
    A full model loads in bf16 on a GPU that has it, else float32."""
    path = Path(str(model_ref))
    if path.is_dir() and (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        from peft import AutoPeftModelForCausalLM
        from transformers import AutoTokenizer

        model = AutoPeftModelForCausalLM.from_pretrained(path).merge_and_unload().eval()
        return model, AutoTokenizer.from_pretrained(path)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_ref)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_ref, dtype=dtype).to(device).eval()
    return model, tokenizer


def eos_ids(tokenizer, generation_config) -> set[int]:
    """Every token id that ends a completion: the generation config's and the tokenizer's."""
    ids = generation_config.eos_token_id if generation_config is not None else None
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return set(ids)


@contextlib.contextmanager
def small_model_threads(model):
    """One CPU thread for a small model: its matmuls are too small to split, extra threads only add sync
    cost, and on a busy machine OpenMP spin-waiting makes generation 10-20x slower than one thread."""
    import torch

    before = torch.get_num_threads()
    if model.device.type == "cpu" and model.num_parameters() < SMALL_MODEL_PARAMS:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def release_gpu() -> None:
    """The server lives on after sampling or evaluation: give the GPU memory back (call after `del model`)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
