"""What the model was built from is what was reviewed: its config and generation config as loaded, against the
verified bytes (round 10, G1; issue 48).

A tensor-by-tensor comparison (loaded_weights) cannot see a `config.json` renamed over the model folder while the
model loads and put back after: `hidden_act`, `rms_norm_eps`, `rope_theta` or another architecture class change
what trains with the same tensors, and `generation_config.json` the tokens that end a completion. So
`loaded_weights.loaded_weight_problems`, from the same one read of the folder whose pin it checks, writes the
non-weight files into a private folder (verified_copy's rule) and this module loads the config and generation
config from there and compares them with each loaded model's, field by field. Fields the load itself sets are
left out (IGNORED: the dtype it loaded in, `use_cache` TRL turns off with gradient checkpointing, the path it was
loaded from, the transformers version, the attention implementation chosen). From a subfolder, the generation config
may be the subfolder's or the top's (transformers 5 reads the top's when there is one): either verified copy passes.
"""

from __future__ import annotations

import json
from pathlib import Path

IGNORED = frozenset({"use_cache", "dtype", "torch_dtype", "_name_or_path", "transformers_version",
                     "_attn_implementation", "_attn_implementation_autoset", "attn_implementation"})


def _differ(loaded: dict, verified: dict) -> list[str]:
    keys = sorted((set(loaded) | set(verified)) - IGNORED)
    return [k for k in keys if json.dumps(loaded.get(k), sort_keys=True, default=str) !=
            json.dumps(verified.get(k), sort_keys=True, default=str)]


def loaded_config_problems(models: list, private: str | Path, loads: dict | None) -> list[str]:
    """Why a loaded model's class, config or generation config is not the one `private` (the verified copy of its
    folder's non-weight files) holds; empty: each is."""
    from transformers import AutoConfig, GenerationConfig

    sub = str((loads or {}).get("subfolder") or "").strip("/")
    folder = Path(private) / sub if sub else Path(private)
    if not (folder / "config.json").is_file():
        return []  # nothing of it was read from the folder (a model built otherwise): the weights still compare
    verified = AutoConfig.from_pretrained(folder)
    # the generation config a load reads: the subfolder's, or the top's (GenerationConfig.from_pretrained joins the
    # subfolder before an absolute path, which leaves the path): either is verified bytes; what loaded is one of them
    generations = [GenerationConfig.from_pretrained(place) for place in dict.fromkeys((folder, Path(private)))
                   if (place / "generation_config.json").is_file()]
    problems = []
    for model in models:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        names = getattr(verified, "architectures", None) or []
        if names and type(base).__name__ not in names:
            problems.append(f"config.json: the model loaded as {type(base).__name__}, the verified config names "
                            f"{', '.join(names)}")
        differ = _differ(base.config.to_dict(), verified.to_dict())
        if differ:
            problems.append(f"config.json: the loaded config's {', '.join(differ[:6])} differ from the verified "
                            "file's (swapped while it loaded)")
        loaded_generation = getattr(base, "generation_config", None)
        if generations and loaded_generation is not None:
            differ = min((_differ(loaded_generation.to_dict(), g.to_dict()) for g in generations), key=len)
            if differ:
                problems.append(f"generation_config.json: the loaded {', '.join(differ[:6])} differ from the "
                                "verified file's (swapped while it loaded)")
    return problems
