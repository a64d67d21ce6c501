"""The rehearsal, server side (issue 44): judge a config by running TRL's own code on a miniature of the run.

`rehearse(spec)` turns the run into its miniature (`miniature_values`: one optimizer step of one prompt group on the
CPU, short completions, no vLLM, DeepSpeed, FSDP or quantisation, none of which a CPU can run), asks the training
interpreter to build and train it exactly as train/train.py does (recipe/rehearsal_run.py: the run's trainer class,
DAPO's dynamic-sampling subclass included), and maps what it saw to findings (`findings_of`): the exception TRL,
transformers, peft or a reward raised, named by the field that caused it; and what the step showed that no exception
says (completions identical in every group, completions longer than the run's cap). What only the target GPU can
show (its memory, compute capability, a multi-node layout, vLLM's engine) stays a rule, judged for the target; what
was set aside is said (`Rehearsal.set_aside`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mcp_server.config import FIELD, GRPOView
from mcp_server.errors import UserInputError
from mcp_server.model_ref import expand_built_in, model_config
from mcp_server.recipe.models import Finding
from mcp_server.recipe.runspec import RunSpec
from mcp_server.rewards.dotted import required_columns
from mcp_server.rewards.registry import REGISTRY, column_fix
from mcp_server.worker import in_training
from mcp_server.worker_targets import REHEARSE

COMPLETION_TOKENS = 8  # the miniature's completions: enough to score, short enough to generate in milliseconds
OVERRIDE_TOKENS = 16  # a length generation_kwargs sets is cut to this, still above COMPLETION_TOKENS
# Set aside, each with why: what a CPU process cannot run, or what only the target shows.
SET_ASIDE = {
    FIELD.use_vllm: "vLLM's engine (the vLLM rules judge it for the target)",
    FIELD.deepspeed: "DeepSpeed (it needs the target's GPUs)", FIELD.fsdp: "FSDP (it needs the target's GPUs)",
    FIELD.fsdp_config: "FSDP (it needs the target's GPUs)",
    FIELD.load_in_4bit: "4-bit quantisation (bitsandbytes needs a GPU)", FIELD.load_in_8bit: "8-bit quantisation",
    FIELD.use_liger_kernel: "Liger's kernels (they need a GPU)", FIELD.torch_compile: "torch.compile",
    FIELD.bf16: "the target's precision", FIELD.fp16: "the target's precision", FIELD.tf32: "the target's precision",
    FIELD.push_to_hub: "pushing to the hub", FIELD.resume_from_checkpoint: "resuming a checkpoint",
    FIELD.report_to: "the trackers",
    FIELD.model_revision: "the model's revision (the miniature is built from its config)",
}
_DROPPED = ("deepspeed", "fsdp", "fsdp_config", "load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type",
            "bnb_4bit_quant_storage", "use_bnb_nested_quant", "model_revision", "hub_model_id", "tf32",
            "resume_from_checkpoint", "generation_batch_size", "steps_per_generation", "reward_model_name_or_path")


@dataclass
class Rehearsal:
    """What one rehearsal found, or why it did not run (`skipped`)."""

    findings: list[Finding] = field(default_factory=list)
    skipped: str | None = None
    set_aside: list[str] = field(default_factory=list)
    seconds: float | None = None


def miniature_values(values: dict) -> tuple[dict, list[str]]:
    """(the config's fields for the rehearsal, what it sets aside): one optimizer step of one prompt group on the
    CPU, every other field as the run has it."""
    view = GRPOView(values)
    group = int(view.num_generations or 8)
    out = {k: v for k, v in values.items() if k not in _DROPPED}
    aside = sorted({SET_ASIDE[k] for k in values if k in SET_ASIDE and values[k] not in (None, False, "none", [])})
    out.update(per_device_train_batch_size=group, gradient_accumulation_steps=1, use_vllm=False, bf16=False,
               fp16=False, use_cpu=True, save_strategy="no", report_to="none", push_to_hub=False, torch_compile=False,
               use_liger_kernel=False, dataloader_num_workers=0, dtype="float32")
    length = view.max_completion_length
    out[FIELD.max_completion_length] = min(int(length), COMPLETION_TOKENS) if isinstance(length, int) and length > 0 \
        else COMPLETION_TOKENS
    if isinstance(view.max_steps, int) and view.max_steps > 0:
        out["max_steps"] = 1
    else:  # left unset: one epoch of the one group kept (a streamed data set without max_steps fails as it would)
        out["num_train_epochs"] = 1
    if str(view.attn_implementation or "").startswith("flash"):
        out["attn_implementation"] = "sdpa"  # the kernel is judged for the target GPU
        aside.append("the attention kernel (judged for the target GPU)")
    kwargs = values.get(FIELD.generation_kwargs)
    if isinstance(kwargs, dict):  # a length it sets is kept above the cap, so the step shows the override
        out["generation_kwargs"] = {k: (min(v, OVERRIDE_TOKENS) if k in ("max_new_tokens", "max_tokens", "max_length")
                                        and isinstance(v, int) else v) for k, v in kwargs.items()}
    return out, aside


def model_source(spec: RunSpec, architecture) -> dict | None:
    """{"config": config.json's dict, "tokenizer": where the run's tokenizer is} of the run's model, from its
    directory or the HF cache, else from the architecture the catalog knows (a stand-in tokenizer); None: unknown."""
    name = GRPOView.given(spec.fields).model_name_or_path
    if not name:
        return None
    local = expand_built_in(str(name))
    config = model_config(local)
    if config is not None and config.get("model_type"):
        return {"config": config, "tokenizer": local}
    if architecture is None:
        return None
    arch = architecture[1]
    config = {"model_type": arch.family, "vocab_size": arch.vocab_size, "tie_word_embeddings": arch.tie_word_embeddings,
              "hidden_size": arch.hidden_size, "intermediate_size": arch.intermediate_size,
              "num_hidden_layers": arch.num_hidden_layers, "num_attention_heads": arch.num_attention_heads,
              "num_key_value_heads": arch.num_key_value_heads}
    if arch.num_experts:
        config.update(num_experts=arch.num_experts, num_experts_per_tok=arch.num_experts_per_tok)
    return {"config": config, "tokenizer": None}


def rehearse(spec: RunSpec, architecture=None) -> Rehearsal:
    """The run rehearsed (see the module's docstring); `architecture`: (name, Architecture) when validation has it."""
    if not reachable_data(spec):
        gone = missing_data_file(spec)
        return Rehearsal(skipped=f"its data set is not on this machine ({gone})" if gone else
                         "its data set is not on this machine (a hub data set is not downloaded to rehearse)")
    model = model_source(spec, architecture)
    if model is None:
        return Rehearsal(skipped="its model's config.json is not on this machine and the catalog does not know it")
    values, aside = miniature_values(spec.fields)
    try:
        evidence = in_training(REHEARSE, values, model, spec.rewards, spec.prompt_column or "prompt",
                               str(spec.base_dir) if spec.base_dir else None, 1, spec.dynamic_sampling)
    except UserInputError as exc:
        return Rehearsal(skipped=f"no training interpreter answered ({exc})")
    rehearsal = Rehearsal(set_aside=aside, seconds=evidence.get("seconds"))
    error = evidence.get("error")
    if error and evidence.get("stage") == "data" and _unreachable(error):
        rehearsal.skipped = "its data set is not on this machine (a hub data set is not downloaded to rehearse)"
        return rehearsal
    if error and error["type"] == "RehearsalTimeout":
        rehearsal.findings.append(Finding(
            code="rehearsal_timeout", field="reward_funcs", severity="warning",
            message=f"the rehearsal stopped at {_STAGES.get(evidence['stage'], evidence['stage'])}: "
                    f"{error['message']}; a reward that blocks or takes minutes per batch would hold every training "
                    "step the same way",
            fix="time the reward on a batch of completions (inspect_rewards does), or validate with rehearse: false"))
    elif error:
        rehearsal.findings.append(_failure(evidence["stage"], error, spec))
    rehearsal.findings += _observed(evidence.get("observed") or {}, spec)
    return rehearsal


def _unreachable(error: dict) -> bool:
    text = f"{error['type']} {error['message']}"
    return bool(re.search(r"offline|Couldn't reach|ConnectionError|LocalEntryNotFound|not find.*on the Hugging Face "
                          r"Hub|doesn't exist on the Hub|HF_DATASETS_OFFLINE|HF_HUB_OFFLINE", text, re.IGNORECASE))


def _failure(stage: str, error: dict, spec: RunSpec) -> Finding:
    """The exception of the stage that failed, as a finding on the field that caused it."""
    field_name, fix = _field_of(stage, error, spec)
    where = error["frames"][-1] if error.get("frames") else "?"
    message = (f"the run, built as train/train.py builds it and rehearsed for one step on a miniature of its model, "
               f"fails at {_STAGES.get(stage, stage)}: {error['type']}: {error['message'][:600]} (in {where})")
    return Finding(code="rehearsal_failed", field=field_name, severity="error", message=message, fix=fix)


_STAGES = {"model": "building the miniature", "parse": "TRL's config parser", "data": "loading the data set",
           "rewards": "building the reward functions", "init": "GRPOTrainer.__init__", "train": "the first step"}
_MISSING_ARG = re.compile(r"missing \d+ required (?:keyword-only |positional )?arguments?: (.*)")
_KEY = re.compile(r"^['\"]?(\w+)['\"]?$")
# (pattern in the exception's text, the field it names, the fix), for messages that name no field
_KNOWN = (
    (r"min_lr|min_lr_rate", "lr_scheduler_kwargs", "set lr_scheduler_kwargs (e.g. {min_lr_rate: 0.1}) for this "
                                                   "scheduler"),
    (r"max_steps (?:must|has to) be|args\.max_steps", "max_steps",
     "set max_steps (a streamed data set has no length)"),
    (r"eval_dataset|evaluation requires", "eval_strategy", "set eval_strategy: 'no', or give the run an eval split"),
    (r"^['\"]?prompt['\"]?$|column 'prompt'|\bprompt\b.*not in the dataset", "datasets",
     "give the data set a prompt column (or name the column that holds the prompts: emit_grpo_config's "
     "prompt_column)"),
    (r"^['\"]?test['\"]?$|dataset_test_split", "eval_strategy",
     "give the data set a test split (test_split_size, or dataset_test_split naming one), or eval_strategy: 'no'"),
)


def _field_of(stage: str, error: dict, spec: RunSpec) -> tuple[str, str]:
    """The config field that caused the failure, and a fix: a data column a reward needs (dropped by
    remove_unused_columns or a datasets `columns` list, or absent), a pattern of a known message, a field the
    message names, else the stage's own field."""
    text = error["message"]
    columns = _columns_wanted(text)
    if columns and stage in ("train", "init"):
        fields = spec.fields
        kept = _kept_columns(fields)
        if kept is not None and not set(columns) <= kept:
            return "datasets", f"keep {', '.join(columns)} in the datasets entry's columns (a reward reads them)"
        if GRPOView(fields).remove_unused_columns:
            return "remove_unused_columns", (f"set remove_unused_columns: false: TRL keeps only the prompt columns "
                                             f"otherwise, and a reward reads {', '.join(columns)}")
        return "reward_funcs", _column_fix(columns, spec)
    for pattern, name, fix in _KNOWN:
        if re.search(pattern, text):
            return name, fix
    named = [k for k in spec.fields if len(k) > 3 and re.search(rf"\b{re.escape(k)}\b", text)]
    if named:
        return named[0], f"fix {named[0]} (the error above is what training would raise)"
    fallback = {"data": "datasets", "rewards": "reward_funcs", "model": FIELD.model_name_or_path}
    return fallback.get(stage, "config"), "fix what the error names; validate_grpo_config rehearses it again"


def _column_fix(columns: list[str], spec: RunSpec) -> str:
    """The fix for rewards that read columns the data set lacks, true for the reward that reads each: a registry
    reward's params name its columns, a person's own function (a dotted path) takes none (walk 12)."""
    named = {str(r.get("name")): r.get("params") or {} for r in spec.rewards or [] if isinstance(r, dict)}
    funcs = spec.fields.get(FIELD.reward_funcs) or []
    named.update((str(f), {}) for f in ([funcs] if isinstance(funcs, str) else funcs))
    base = Path(spec.base_dir) if spec.base_dir else None
    dirs = [base, base.parent.parent] if base else []  # the run, the workspace that holds runs/ (train.py's path)
    fixes = []
    for column in columns:
        reader = next((n for n in named if n not in REGISTRY and column in (required_columns(n, dirs) or [])),
                      None) or \
            next((n for n, params in named.items() if n in REGISTRY and column in
                  {**REGISTRY[n].column_params, **params}.values()), None)
        fixes.append(column_fix(reader, column) if reader else f"add the column '{column}' to the data set")
    return f"a reward reads {', '.join(columns)}, which the data set lacks: " + "; ".join(fixes)


def _columns_wanted(text: str) -> list[str]:
    """The columns a reward asked for and did not get: a missing argument, or a KeyError's key."""
    found = _MISSING_ARG.search(text)
    if found:
        return re.findall(r"'(\w+)'", found.group(1))
    named = re.search(r"has no column '(\w+)'", text)  # this package's rewards (rewards.text.column)
    if named:
        return [named.group(1)]
    key = _KEY.match(text.strip())
    return [key.group(1)] if key and key.group(1) not in ("prompt",) else []


def _kept_columns(fields: dict) -> set[str] | None:
    """The columns a `datasets` entry keeps (its `columns` list), None when every column is kept."""
    kept = set()
    for entry in fields.get(FIELD.datasets) or []:
        if isinstance(entry, dict) and entry.get("columns"):
            kept |= set(entry["columns"]) | {"prompt"}
    return kept or None


def _observed(seen: dict, spec: RunSpec) -> list[Finding]:
    """What the step showed: every group's completions alike (nothing to learn from), completions past the cap."""
    out = []
    completions = seen.get("completions") or []
    group = int(GRPOView(spec.fields).num_generations or 8)
    groups = [completions[i:i + group] for i in range(0, len(completions), group)]
    if groups and group > 1 and all(len({tuple(c) for c in g}) == 1 for g in groups if len(g) == group):
        out.append(Finding(
            code="completions_identical", field="generation_kwargs" if spec.fields.get(FIELD.generation_kwargs)
            else "temperature", severity="error",
            message=f"in the rehearsal every group's {group} completions were identical: their rewards have no "
                    "spread, so GRPO's advantages are 0 and nothing trains",
            fix="sample: temperature > 0, and no seed in generation_kwargs"))
    lengths = seen.get("lengths") or []
    if lengths and max(lengths) > COMPLETION_TOKENS:
        out.append(Finding(
            code="length_cap_overridden", field="generation_kwargs", severity="warning",
            message=f"in the rehearsal completions ran to {max(lengths)} tokens past max_completion_length: a length "
                    "in generation_kwargs overrides it (TRL applies generation_kwargs last)",
            fix="set the length with max_completion_length only, and drop it from generation_kwargs"))
    return out


def missing_data_file(spec: RunSpec) -> str | None:
    """The first absolute data file the config names that is not there, said with its field (issue 49: a moved
    file read as "a hub data set is not downloaded"); None when there is none."""
    for i, entry in enumerate(spec.fields.get(FIELD.datasets) or []):
        files = entry.get("data_files") if isinstance(entry, dict) else None
        for f in files if isinstance(files, list) else [files] if isinstance(files, str) else []:
            if Path(str(f)).expanduser().is_absolute() and not Path(str(f)).expanduser().exists():
                return f"datasets[{i}].data_files names {f}, which is not there: moved or deleted since emission?"
    return None


def reachable_data(spec: RunSpec) -> bool:
    """Whether the run's data could be on this machine: local files, or a hub data set that might be cached."""
    base = Path(spec.base_dir) if spec.base_dir else Path.cwd()
    for entry in spec.fields.get(FIELD.datasets) or []:
        if isinstance(entry, dict):
            files = entry.get("data_files")
            files = files if isinstance(files, list) else [files] if isinstance(files, str) else []
            if any((base / f).exists() for f in files) or Path(str(entry.get("path", ""))).exists():
                return True
    name = spec.fields.get(FIELD.dataset_name)
    return bool(name) and (base / str(name)).exists()
