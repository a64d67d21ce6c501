"""Validation rules for each value against the installed TRL's fields: known keys (removed, renamed, async-only,
misspelt), value types, enumerated choices and numeric ranges."""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

from mcp_server.config import FIELD
from mcp_server.errors import closest_names
from mcp_server.recipe.context import Context, Rule, finding
from mcp_server.recipe.models import Finding
from mcp_server.runs import output_outside
from mcp_server.userfiles import package_switches

# Keys TRL removed or renamed, with what to use instead (checked only when the installed TRL lacks the key).
REMOVED_OR_RENAMED: dict[str, tuple[str | None, str]] = {
    "max_prompt_length": (
        None,
        "removed from GRPOConfig in TRL 0.28: prompts are no longer truncated; filter or "
        "truncate long prompts in the data set instead",
    ),
    "vllm_guided_decoding_regex": ("vllm_structured_outputs_regex", "renamed in TRL 0.25"),
    "wandb_log_unique_prompts": ("log_unique_prompts", "renamed when logging became backend-neutral"),
    "vllm_device": (
        None,
        "removed: use vllm_mode='colocate' (same GPUs) or 'server' (`trl vllm-serve` on its own GPUs)",
    ),
    "torch_dtype": ("dtype", "renamed in transformers 4.56 / TRL ModelConfig"),
    "evaluation_strategy": ("eval_strategy", "renamed in transformers 4.46"),
    "use_vllm_server": ("vllm_mode", "replaced by vllm_mode='server'"),
    "vllm_server_url": ("vllm_server_base_url", "renamed"),
}


# ---------------------------------------------------------------- 1. keys
def rule_known_keys(ctx: Context) -> list[Finding]:
    out = []
    known = ctx.trl["fields"]
    if not known:
        return out  # no training interpreter: validation says TRL's checks did not run
    for key in ctx.values:
        if key in known:
            if known[key].get("deprecated"):
                out.append(deprecated(key, known[key], ctx.trl))
            continue
        if key in REMOVED_OR_RENAMED:
            new, why = REMOVED_OR_RENAMED[key]
            fix = f"use '{new}' instead" if new and new in known else why
            out.append(finding("renamed_field" if new else "removed_field", key, "error",
                               f"'{key}' is not a field of TRL {ctx.trl['trl_version']}: {why}.", fix))
            continue
        if key in ctx.trl.get("async_fields", ()):
            out.append(finding(
                "async_grpo_field", key, "error",
                f"'{key}' is a field of TRL's experimental AsyncGRPOConfig, not of GRPOConfig: `trl grpo` and this "
                "run's "
                "train.py run the synchronous GRPOTrainer and would ignore it. Async GRPO is another trainer "
                "(trl.experimental.async_grpo.AsyncGRPOTrainer) with its own prerequisites: a vLLM server started "
                "apart (`trl vllm-serve`, reached through vllm_server_base_url), rewards that pickle (module-level "
                "functions), and no context or sequence parallelism.",
                "remove it, or write an AsyncGRPOTrainer script of your own (this plugin does not emit one)"))
            continue
        close = closest_names(key, list(known))
        out.append(finding("unknown_field", key, "error",
                           f"'{key}' is not a field of GRPOConfig, ModelConfig or the grpo script arguments in TRL "
                           f"{ctx.trl['trl_version']} (TRL's CLI would silently ignore it).",
                           f"did you mean {', '.join(repr(c) for c in close)}?" if close else "remove it"))
    return out


def declared_kind(type_text: str, default) -> str | None:
    """'bool', 'number' (float: an int is a float too, as argparse's float() reads it) or 'int' for a field whose
    declared type is that one scalar (None allowed), read from the type as TRL and transformers declare it
    (trl_fields.type_text: `float`, `int | None`); None for anything else (a union of kinds, str, dict, list).
    The default decides only where the probe recorded no type (warmup_steps is `float` with the default 0)."""
    parts = {part.strip() for part in type_text.split("|")} - {"None", "NoneType"} if type_text else set()
    if len(parts) == 1:
        return {"bool": "bool", "float": "number", "int": "int"}.get(parts.pop())
    if parts:
        return None
    if isinstance(default, bool):
        return "bool"
    return "number" if isinstance(default, float) else "int" if isinstance(default, int) else None


def deprecated(key: str, meta: dict, trl: dict) -> Finding:
    """A field its declaring library deprecates: transformers' own (gradient_checkpointing_kwargs, declared by
    TrainingArguments: "Deprecated alias of `activation_checkpointing_kwargs`") or TRL's (use_liger_kernel, declared
    by TRL's base config), named as that library's, with its replacement where the help names one."""
    declared_in = meta.get("deprecated_in") or meta.get("declared_in") or ""  # the declaration that deprecates it
    if declared_in.startswith("transformers."):
        library = f"transformers {trl.get('transformers_version') or ''}".rstrip()
    else:
        library = f"TRL {trl['trl_version']}"
    where = f" ({declared_in.rsplit('.', 1)[-1]})" if declared_in else ""
    help_text = meta.get("deprecation") or meta["help"]
    said = next((s for s in re.split(r"(?<=\.)\s+", help_text) if "deprecat" in s.lower()), help_text)
    alias = re.search(r"alias of `(\w+)`", said)
    fix = f"use '{alias[1]}' instead (the same value)" if alias else "see the field's help: " + help_text[:200]
    return finding("deprecated_field", key, "warning", f"'{key}' is deprecated in {library}{where}: "
                   f"{said[:240].rstrip('.')}.", fix)


def rule_value_types(ctx: Context) -> list[Finding]:
    out = []
    for key, value in ctx.values.items():
        meta = ctx.trl["fields"].get(key)
        if meta is None or value is None:
            continue
        default = meta["default"]
        kind = declared_kind(meta["type"], default)
        if kind == "bool":
            ok = isinstance(value, bool)
        elif kind == "number":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            continue
        if not ok:
            expected = {"bool": "true/false", "number": "a number", "int": "an integer"}[kind]
            why = f" (TRL's parser: {ctx.parse_errors[key]})" if key in ctx.parse_errors else ""
            out.append(finding("wrong_type", key, "error", f"'{key}' must be {expected}, got {value!r}{why}.",
                               f"set {key} to {expected} (TRL default: {default!r})"))
    return out


# ---------------------------------------------------------------- 2. enumerated values
def rule_choices(ctx: Context) -> list[Finding]:
    out = []
    for key, choices in ctx.trl["choices"].items():
        if key not in ctx.values:
            continue
        value = ctx.values[key]
        if key == "scale_rewards" and isinstance(value, bool):
            continue  # TRL maps True/False to "group"/"none"
        if value not in choices:
            close = closest_names(str(value), choices, n=1)
            out.append(finding("invalid_choice", key, "error",
                               f"{key}={value!r} is not one of TRL {ctx.trl['trl_version']}'s choices: "
                               f"{', '.join(choices)} "
                               "(TRL accepts it at config time and fails later, or silently does something else).",
                               f"use {close[0]!r}" if close else f"use one of {', '.join(choices)}"))
    return out


# Numeric fields TRL accepts at config time that cannot train: field -> (accepted interval, why, severity).
# Where TRL's help text states the interval ("Must be in (0, 1]", "between 0.0 and 1.0", "Range: [0.0-1.0]"),
# TRL's wins. num_generations and learning_rate have their own rules.
RANGES: dict[str, tuple[str, str, str]] = {
    FIELD.max_completion_length: ("[1, inf)", "no completion token to score or train on", "error"),
    FIELD.per_device_train_batch_size: ("[1, inf)", "no sample per step", "error"),
    FIELD.gradient_accumulation_steps: ("[1, inf)", "no micro-batch per optimizer step", "error"),
    FIELD.steps_per_generation: ("[1, inf)", "no optimizer step per generation", "error"),
    FIELD.generation_batch_size: ("[1, inf)", "no completion per generation", "error"),
    FIELD.num_iterations: ("[1, inf)", "no update per generation batch", "error"),
    FIELD.temperature: ("(0, inf)", "the logits are divided by the temperature", "error"),
    FIELD.top_p: ("(0, 1]", "a probability mass", "error"),
    FIELD.top_k: (
        "[0, inf)",
        "a token count (TRL: 0 turns top-k off; transformers' generate refuses a negative one)",
        "error",
    ),
    FIELD.min_p: ("[0, 1]", "a probability", "error"),
    FIELD.repetition_penalty: ("(0, inf)", "logits are divided or multiplied by it", "error"),
    FIELD.beta: ("[0, inf)", "a negative KL coefficient pays the policy for drifting from the reference", "error"),
    FIELD.epsilon: ("(0, 1)", "the clip range is [1 - epsilon, 1 + epsilon_high] around a positive ratio", "error"),
    FIELD.epsilon_high: ("(0, inf)", "the upper clip bound is 1 + epsilon_high", "error"),
    FIELD.delta: ("(1, inf)", "the two-sided clip's upper bound on the ratio (TRL recommends > 1 + epsilon)",
                  "warning"),
    FIELD.top_entropy_quantile: ("[0, 1]", "a quantile", "error"),
    FIELD.off_policy_mask_threshold: ("(0, inf)", "a KL threshold (TRL expects a positive value)", "error"),
    FIELD.vllm_gpu_memory_utilization: ("(0, 1]", "a fraction of the GPU's memory", "error"),
    FIELD.vllm_importance_sampling_clip_max: ("(0, inf)", "an upper bound on positive ratios", "error"),
    FIELD.vllm_importance_sampling_clip_min: ("[0, inf)", "a lower bound on positive ratios", "error"),
    FIELD.ref_model_mixup_alpha: ("[0, 1]", "a mixing weight", "error"),
    FIELD.ref_model_sync_steps: ("[1, inf)", "a step interval", "error"),
    FIELD.lora_r: ("[1, inf)", "the adapter's rank", "error"),
    FIELD.lora_alpha: ("(0, inf)", "the adapter's scale is lora_alpha / lora_r", "error"),
    FIELD.lora_dropout: ("[0, 1)", "a dropout probability (1 drops every input)", "error"),
    FIELD.weight_decay: ("[0, inf)", "a negative decay grows the weights", "error"),
    FIELD.max_grad_norm: ("[0, inf)", "a norm (0 turns clipping off)", "error"),
}
_INTERVAL = re.compile(r"([\[(])\s*(-?[\d.]+)\s*(?:,|-)\s*(-?[\d.]+|inf)\s*([\])])")
_BETWEEN = re.compile(r"between (-?[\d.]*\d) and (-?[\d.]*\d)")


@functools.lru_cache(maxsize=256)  # the same help texts at each validation (a dozen per lever search)
def parse_interval(text: str) -> tuple[float, float, bool, bool] | None:
    """(low, high, low_closed, high_closed) of the first interval written in `text`, e.g. '(0, 1]'."""
    match = _INTERVAL.search(text)
    if match:
        return float(match[2]), float(match[3]), match[1] == "[", match[4] == "]"
    match = _BETWEEN.search(text)
    return (float(match[1]), float(match[2]), True, True) if match else None


def _interval_text(low, high, low_closed, high_closed) -> str:
    return f"{'[' if low_closed else '('}{low:g}, {high:g}{']' if high_closed else ')'}"


def rule_ranges(ctx: Context) -> list[Finding]:
    out = []
    for key, (interval, why, severity) in RANGES.items():
        value = ctx.values.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or key in ctx.parse_errors:
            continue  # unset, null, or a wrong type (rule_value_types says so)
        if not math.isfinite(value):
            if key != "learning_rate":  # rule_learning_rate says why a NaN rate is fatal
                out.append(finding("not_finite", key, "error", f"{key}={value!r} is not a finite number: TRL accepts "
                                   "it at config time and the run computes NaN.", f"set {key} within {interval}"))
            continue
        stated = parse_interval(ctx.trl["fields"].get(key, {}).get("help", ""))
        low, high, low_closed, high_closed = stated or parse_interval(interval)
        inside = (value > low or (low_closed and value == low)) and (value < high or (high_closed and value == high))
        if not inside:
            source = f"TRL {ctx.trl['trl_version']}'s help for {key}" if stated else "what can train"
            accepted = _interval_text(low, high, low_closed, high_closed)
            out.append(finding("out_of_range", key, severity,
                               f"{key}={value!r} is outside {accepted} ({source}): {why}. TRL accepts it at config "
                               "time" + ("; training fails or learns nothing." if severity == "error" else "."),
                               f"set {key} within {accepted}"))
    return out


# Topic "fields": each value against the installed TRL's fields (what TRL's CLI would ignore, misread or refuse).
def rule_env_switches(ctx: Context) -> list[Finding]:
    """TRL's TrlParser pops a top-level `env:` mapping into os.environ before anything else runs (trl/scripts/
    utils.py, TrlParser.parse_args_and_config): a variable of this package's there would switch the trainer's own
    checks (its sampling mode skips the point-of-use check). Refused; the trainer refuses it too (issue 48)."""
    names = package_switches(ctx.spec.values)
    if not names:
        return []
    return [finding("env_sets_package_switch", f"env.{names[0]}", "error",
                    f"the config's env: block sets {', '.join(names)}: TRL's parser exports it into the trainer's "
                    "environment before the trainer checks what it trains on, and this package's variables switch "
                    "those checks", "remove it from env: (no llm-finetuning variable belongs in a config)")]


def rule_output_dir(ctx: Context) -> list[Finding]:
    """A run's output_dir is a folder of the run: it is unpinned (where checkpoints go cannot change a sample), so
    one edited after the verdict to /tmp/elsewhere, or into another run, would carry the trained weights out of the
    run. Refused here (every launch validates) and by the trainer's own check (issue 48). A config validated
    outside a run (no run directory, no rewards record) has no run to keep."""
    base = ctx.base_dir
    if base is None or not ((Path(base) / "train").is_dir() or ctx.spec.rewards is not None):
        return []
    why = output_outside(Path(base), ctx.spec.values.get("output_dir"))
    return [finding("output_dir_outside_run", "output_dir", "error", why + ".",
                    "set output_dir: checkpoints (relative paths are relative to the run directory)")] if why else []


RULES = (Rule(rule_known_keys, needs=("trl",)), Rule(rule_value_types, needs=("trl",)),
         Rule(rule_choices, needs=("trl",)), Rule(rule_ranges), Rule(rule_env_switches), Rule(rule_output_dir))
