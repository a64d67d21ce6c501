"""What the recipe needs to know about a model without downloading it: where it is, and whether it is MoE."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mcp_server.errors import UserInputError

# Config keys that only mixture-of-experts architectures carry (Qwen2/3-MoE, Mixtral, DeepSeek, gpt-oss, ...).
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
_MOE_NAME = re.compile(r"(moe|mixtral|-a\d+(\.\d+)?b|gpt-oss|deepseek-v[23]|deepseek-r1$|qwen3-(30|235)b)", re.I)


def resolve_model(model: str) -> str:
    """'tiny' -> the embedded model's directory; a local path must exist; anything else is a hub name."""
    if model == "tiny":
        from mcp_server.tiny import ensure_tiny_model

        return str(ensure_tiny_model())
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
    config = model_config(model)
    if config is not None:
        text_config = config.get("text_config") or config
        return any((text_config.get(k) or 0) for k in _MOE_KEYS)
    return bool(_MOE_NAME.search(model))
