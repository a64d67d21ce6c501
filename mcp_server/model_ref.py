"""What a model reference means, and loading one (docs/architecture.md, "Floors").

A reference is a built-in name ('tiny', the embedded offline model; 'smollm2-135m', a real pretrained model
from a PyPI wheel, mcp_server/smollm2.py), a local directory saved with save_pretrained (a LoRA adapter
directory too, for loading), or a hub name (org/name). What can be known without downloading (its config.json,
whether it is a mixture of experts) is read from the directory or the local HF cache, never the network.
torch, transformers and peft are imported inside the functions that load: the server's light environment has
none of them (docs/guide.md, "The training interpreter").
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from pathlib import Path

from mcp_server import smollm2
from mcp_server.errors import UserInputError, closest_names, did_you_mean, one_line, short
from mcp_server.tiny import ensure_tiny_model, tiny_model_dir

TINY = "tiny"
SMOLLM2 = smollm2.NAME
# The names every tool takes for a model built offline on first use: name -> its builder (returns the directory).
BUILT_IN = {TINY: ensure_tiny_model, SMOLLM2: smollm2.ensure_smollm2_model}
# Config keys that hold the number of routed experts, in every architecture transformers knows (Qwen-MoE, Mixtral,
# Llama 4, GLM-4.5, DeepSeek/Kimi-K2, Granite MoE, gpt-oss, DBRX's ffn_config, Ernie, Aria, ...): tests/
# test_moe_detection.py checks this list against every config class of the installed transformers.
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
# Only when no config.json is readable offline (a hub name never downloaded): what the name says. Structural marks
# (moe, "-A3B"/"-a800m" active parameters, "-16E" expert count) and the families that ship only as MoE.
_MOE_NAME = re.compile(
    r"(moe|mixtral|-a\d+(\.\d+)?[bm]\b|-\d+e\b|gpt-oss|deepseek-v[23]|deepseek-r1(?!-distill)|kimi-k2|llama-4|"
    r"glm-4\.[5-9]|dbrx|jamba|qwen3-(30|235)b)",
    re.I,
)
SMALL_MODEL_PARAMS = 50_000_000
# Walk 10: promote-checkpoint and export-model printed transformers' "FutureWarning: `is_gradient_checkpointing` is
# deprecated ... Use `is_activation_checkpointing` instead" on a LoRA checkpoint. Its cause is peft's
# PeftModel.__init__ (peft 0.21.2, the newest release), which reads the deprecated alias of every model it wraps to
# decide whether to prepare it for gradient checkpointing; no argument of from_pretrained changes that read, so
# load_model ignores that one message while peft wraps the model, and every other warning still shows.
PEFT_ALIAS_READ = r"`is_gradient_checkpointing` is deprecated"


# ---------------------------------------------------------------- what a name means
def expand_built_in(model: str) -> str:
    """A built-in name ('tiny', 'smollm2-135m') -> its directory (built on first use); anything else unchanged."""
    build = BUILT_IN.get(model)
    return str(build()) if build else model


def resolve_model(model: str) -> str:
    """A built-in name -> its directory; a local path must exist; anything else is a hub name."""
    if model in BUILT_IN:
        return expand_built_in(model)
    path = Path(model).expanduser()
    looks_local = model.startswith((".", "/", "~")) or path.exists()
    if looks_local:
        if not (path / "config.json").is_file():
            raise UserInputError(
                "model", f"'{model}' is not a model directory (no config.json there). Give a local directory "
                "saved with save_pretrained, a hub name such as 'Qwen/Qwen2.5-1.5B-Instruct', 'tiny' or "
                f"'{SMOLLM2}'."
            )
        return str(path.resolve())
    if not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", model):
        raise UserInputError("model", f"'{model}' is neither an existing local directory nor a hub name (org/name).")
    return model


def known_name(model: str) -> tuple[str, str | None]:
    """(the name a person knows the model by, its hub id or None) for a reference or the directory it resolved
    to: a built-in's directory is its built-in name ('smollm2-135m' with the hub id of the weights it converts,
    recorded in its smollm2.json; 'tiny' with none), a hub name is itself, any other path is itself and no hub id.
    What a baseline is filed under and a model card's base_model say, never a machine's cache path (issue 49)."""
    if model in BUILT_IN:
        return model, smollm2.HUB_ID if model == SMOLLM2 else None
    path = Path(model).expanduser()
    if not path.is_dir():
        return model, model if re.fullmatch(r"[\w.\-]+/[\w.\-]+", model) else None
    try:
        record = json.loads((path / "smollm2.json").read_text())
    except (OSError, ValueError):
        record = None
    if isinstance(record, dict) and record.get("name") == SMOLLM2:
        return SMOLLM2, record.get("weights_of") or smollm2.HUB_ID
    if path.resolve() == tiny_model_dir().resolve():
        return TINY, None
    return model, None


def shown_name(model) -> str:
    """The model as a message shows it: known_name's name ('smollm2-135m', 'tiny', a hub name), never a machine's
    cache path for a built-in (issue 49: the plain-prompt warning, review.md and sampling's lines named
    /root/.cache/llm-finetuning/smollm2-135m-q4_1-...); any other path as it is."""
    return known_name(str(model))[0]


def report_name(model) -> str:
    """The model as a report's row names it (the model card's and promotion-report.md's "Base model"): its hub id,
    else known_name's name, in backticks, then the path it was loaded from when that is neither (issue 49:
    promotion-report.md named smollm2-135m by its cache path where the model card named its hub id)."""
    name, hub_id = known_name(str(model))
    return f"`{hub_id or name}`" + (f" (loaded from `{model}`)" if str(model) not in (hub_id, name) else "")


def resolve_loadable(model: str) -> str:
    """resolve_model, for a model loaded here: a hub name only when it is in the local HF cache or the hub says it
    exists (hub_problem: one request, no retries), else UserInputError('model') at once."""
    ref = resolve_model(model)
    if Path(ref).is_dir() or cached_config_path(ref):
        return ref
    problem = hub_problem(ref)
    if problem:
        raise UserInputError("model", problem)
    return ref


def hub_problem(model: str) -> str | None:
    """Why the hub name `model`, not in the local HF cache, cannot be loaded here (None: the hub says it exists).
    One request without retries: transformers retries a missing file for about a minute before it says so, which
    is what a typo in a model name cost (issue 49). HF_HUB_OFFLINE=1 answers without the network."""
    start = (f"'{model}' is not a local model directory, a built-in name ('{TINY}', '{SMOLLM2}') or a model in "
             "the local Hugging Face cache, and ")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return start + "the hub is switched off here (HF_HUB_OFFLINE=1)." + _offline_way(model)
    near = closest_names(model, list(BUILT_IN), cutoff=0.8) if "/" not in model else []
    if near:  # a misspelt built-in name, answered without the network (issue 49: the CLI waited 20 s on the hub
        # for `smollm2-13m`; a request through a proxy or gateway that answers slowly took 6-19 s here, while an
        # MCP server, started by the SDK with no proxy variables, failed its lookup at once)
        return (start + f"it is a near miss of a built-in name, not a hub id (org/name).{did_you_mean(near)} Check "
                "the name; a hub model is named org/name, as on huggingface.co")
    try:
        from huggingface_hub import HfApi

        HfApi().model_info(model, timeout=10)
    except ImportError:
        return None  # no huggingface_hub: loading will say what is missing
    except Exception as exc:  # noqa: BLE001 - classified by its type: not found, gated, or no network
        kind = type(exc).__name__
        if kind == "GatedRepoError":
            return None  # it exists; loading asks for the token
        if kind in ("RepositoryNotFoundError", "RevisionNotFoundError"):
            hint = did_you_mean(closest_names(model, [smollm2.HUB_ID, *BUILT_IN], cutoff=0.8))
            return start + f"the hub has no such model.{hint} Check the name (org/name, as on huggingface.co)"
        return start + f"the hub cannot be reached ({kind}: {one_line(short(exc, 160))})." + _offline_way(model)
    return None


def _offline_way(model: str) -> str:
    """What loads without the hub, for a name the hub cannot be asked about: the built-in names, the nearest first
    (SmolLM2-135M-Instruct's hub id, misspelt, means `smollm2-135m`, its weights built offline). A download command
    only for a name that is no misspelling of one (issue 49: it repeated the typo)."""
    near = closest_names(model, {smollm2.HUB_ID: SMOLLM2, SMOLLM2: SMOLLM2, TINY: TINY}, cutoff=0.8)
    offline = f"'{SMOLLM2}' (SmolLM2-135M-Instruct, built offline) or '{TINY}'"
    if near:
        return (f" Did you mean {' or '.join(repr(n) for n in near)}? Offline, {offline} load without the hub; or "
                "give a local model directory")
    return (f" Offline, {offline} load without the hub; or give a local model directory, or download the model "
            f"where there is network (`hf download {model}`)")


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


def moe_expert_count(config: dict, depth: int = 0) -> int:
    """The largest routed-expert count in a config.json and its sub-configs (text_config, DBRX's ffn_config, ...);
    0 for a dense model, or for a block whose MoE is switched off (Gemma 4's enable_moe_block: false)."""
    if config.get("enable_moe_block") is False:
        return 0
    count = 0
    for key, value in config.items():
        if isinstance(value, dict) and depth < 3:
            count = max(count, moe_expert_count(value, depth + 1))
        elif key in EXPERT_COUNT_KEYS:
            values = value if isinstance(value, list) else [value]  # per-layer counts in a few configs
            count = max([count] + [v for v in values if isinstance(v, int) and not isinstance(v, bool)])
    return count if count > 1 else 0


def is_moe(model: str) -> bool:
    """Whether the model is a mixture of experts: from its config's expert fields when the config is readable
    offline, else from its name."""
    config = model_config(model)
    if config is not None:
        return moe_expert_count(config) > 0
    return bool(_MOE_NAME.search(model))


# Leaf names of MoE routers: never adapted (LoRA on the router changes which experts a token reaches).
ROUTER_NAMES = ("gate", "router")


def lora_targets_without_routers(model: str) -> list[str] | None:
    """What PEFT's 'all-linear' adapts on this model, as leaf names, minus the MoE routers: every nn.Linear but the
    output head, plus the expert projections PEFT maps onto transformers 5's fused expert tensors, minus a router
    (a Linear named gate/router, or one with one output per expert). The model is built on the meta device from
    its config (no weights, no download). None when the config is not readable offline. Training interpreter only."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config_dict = model_config(model)
    if config_dict is None:
        return None
    experts = moe_expert_count(config_dict)
    try:
        config = AutoConfig.from_pretrained(model, local_files_only=True)
        with torch.device("meta"):
            built = AutoModelForCausalLM.from_config(config)
    except Exception:  # custom code, an architecture this transformers lacks: the caller falls back
        return None
    head = built.get_output_embeddings()
    names = set()
    for name, module in built.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if not isinstance(module, torch.nn.Linear) or module is head:
            continue
        if leaf in ROUTER_NAMES or "router" in name.split(".") or (experts and module.out_features == experts):
            continue
        names.add(leaf)
    try:  # the expert projections PEFT adapts through its transformers-5 mapping (never its router entry)
        from peft.utils.transformers_weight_conversion import _MODEL_TO_CONVERSION_PATTERN, _MOE_TARGET_MODULE_MAPPING

        mapping = _MOE_TARGET_MODULE_MAPPING.get(_MODEL_TO_CONVERSION_PATTERN.get(config.model_type, ""), {})
        names |= {old for old in mapping if old not in ROUTER_NAMES}
    except ImportError:
        pass
    return sorted(names)


# ---------------------------------------------------------------- loading (training interpreter only)
def load_model(model_ref: str | Path, merge: bool = True, **files):
    """(model, tokenizer) in eval mode for a hub name, a full save or a LoRA adapter directory (merged in memory;
    `merge` False: the PEFT model, its adapter apart, for a check of what loaded before the merge).
    A full model loads in bf16 on a GPU that has it, else float32. `files`: from_pretrained's arguments that
    choose which files load (subfolder, variant, ...), for the model as the trainer loads it (the tokenizer, as
    TRL's, from the folder itself)."""
    path = Path(str(model_ref))
    if path.is_dir() and (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        from peft import AutoPeftModelForCausalLM
        from transformers import AutoTokenizer

        with warnings.catch_warnings():  # that one deprecation, of a read no argument here changes (PEFT_ALIAS_READ)
            warnings.filterwarnings("ignore", message=PEFT_ALIAS_READ, category=FutureWarning)
            model = AutoPeftModelForCausalLM.from_pretrained(path)
        return (model.merge_and_unload() if merge else model).eval(), AutoTokenizer.from_pretrained(path)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_ref)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_ref, dtype=dtype, **files).to(device).eval()
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
