"""emit_grpo_config: request -> recipe + variant + target -> validated files in a run directory.

Writes train/config.yaml (TrlParser YAML, accepted by `trl grpo --config`), train/rewards.json, train/train.py,
train/request.json and train/request.schema.json (runs.Run names them). Every file is written atomically.
train/train.py is the run's trainer template (emission.agentic.TRAINER_TEMPLATES: training/train_template.py, or
training/train_agentic_template.py for a run with an environment or tools, which also gets train/agentic.json)
with the run's name and prompt column filled in: the template lives with the training code it imports;
emission only copies its text.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import yaml

from mcp_server.dataset import check_prompt_column, read_file
from mcp_server.emission.agentic import (TRAINER_TEMPLATES, agentic_fields, agentic_record, completion_budget,
                                         refuse_unparsed_template, trainer_name, turn_cost)
from mcp_server.errors import UserInputError
from mcp_server.gpus import resolve_target
from mcp_server.emission.batch import schedule, size_batch
from mcp_server.emission.lengths import completion_length
from mcp_server.emission.fit import fit_to_target, grow_vllm_share, launch_text, model_size_b, plan_for
from mcp_server.memory.verdict import validate
from mcp_server.model_ref import TINY, is_moe, resolve_model
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.recipe.models import EmitResult, Finding, GRPORecipeRequest
from mcp_server.recipe.trl_fields import trl_defaults
from mcp_server.recipe.validate import SEVERITY_ORDER
from mcp_server.recipe.precision import FP16_REASON, dtype_reason, weights_dtype
from mcp_server.recipe.thinking import thinking_fields
from mcp_server.recipe.variants import (DAPO_SOFT_PUNISH_FRACTION, DYNAMIC_SAMPLING_NOTE, choose_variant,
                                        off_policy_fields, recipe_values)
from mcp_server.rewards.registry import REGISTRY
from mcp_server.rewards.spec import RewardSpec
from mcp_server.runs import Run
from mcp_server.tiny import split_task, write_jsonl
from mcp_server.worker import in_training
from mcp_server.worker_targets import LORA_TARGETS_WITHOUT_ROUTERS
from mcp_server.workspace import (
    atomic_write_json,
    atomic_write_text,
    find_existing,
    runs_root,
    unique_run_name,
    workspace_root,
)

ALWAYS_WRITTEN = {"loss_type", "output_dir", "model_name_or_path", "dtype"}
DATA_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
PROMPT_COUNTS: dict[str, int] = {}  # rows of the local data files read while emitting, by resolved path


def _prompt_count(request: GRPORecipeRequest) -> int | None:
    """The training prompts of the request's data set when known offline: the tiny task's or a local file's."""
    if request.dataset == TINY:
        return len(split_task()[0])
    path = Path(request.dataset).expanduser()
    return PROMPT_COUNTS.get(str(path.resolve())) if path.is_file() else None


def _dataset_fields(request: GRPORecipeRequest, run: Run) -> dict:
    """TrlParser keys for the data: a local file becomes a `datasets` mixture entry, a hub name `dataset_name`."""
    if request.dataset == TINY:
        train_rows, _ = split_task()
        path = write_jsonl(train_rows, run.train_data)
        # Relative to the run (train.py runs there): a moved or copied run reads its own copy.
        return {"datasets": [{"path": "json", "data_files": str(path.relative_to(run.dir)), "split": "train"}]}
    path = Path(request.dataset).expanduser()
    if path.exists():
        if path.is_file():
            fmt = DATA_FORMATS.get(path.suffix.lower())
            if fmt is None:
                raise UserInputError("dataset", f"{path}: unsupported file type; use {', '.join(DATA_FORMATS)}")
            _check_columns(path, request)
            data_file = path.resolve()
            if data_file.is_relative_to(run.dir.resolve()):  # the run's own data: relative, moves with it
                data_file = data_file.relative_to(run.dir.resolve())
            return {"datasets": [{"path": fmt, "data_files": str(data_file), "split": "train"}]}
        if not path.is_dir():  # a device or a pipe: no data set, and reading it may never end
            raise UserInputError("dataset", f"{request.dataset} is not a regular file or a directory; give a "
                                 f"{', '.join(DATA_FORMATS)} file, a directory of them, a hub name or 'tiny'")
        return {"datasets": [{"path": str(path.resolve()), "split": request.dataset_split}]}
    if request.dataset.startswith((".", "/", "~")):
        raise UserInputError("dataset", f"no such file or directory: {request.dataset}")
    if path.suffix.lower() in DATA_FORMATS:  # names a data file that is not here: a typo, not a hub data set
        raise UserInputError("dataset", f"no such file: {request.dataset} (relative to {Path.cwd()}); a hub data "
                             "set is named owner/name, without a file suffix")
    fields = {"dataset_name": request.dataset, "dataset_train_split": request.dataset_split}
    if request.dataset_config:
        fields["dataset_config"] = request.dataset_config
    return fields


# Columns a registry reward reads -> the parameter renaming it (its factory's `Column` ones; TRL passes the others).
COLUMN_PARAMS = {column: param for reward in REGISTRY.values() for param, column in reward.column_params.items()}


def reward_columns(request: GRPORecipeRequest) -> dict[str, str]:
    """{data set column: the reward that reads it} for the request's registry rewards: only what they read is
    required (a code reward reads `tests`, never `answer`)."""
    needed = {}
    for spec in request.rewards:
        entry = REGISTRY.get(spec.name)
        for column in entry.info.columns if entry else []:
            if column not in COLUMN_PARAMS or (column == "schema" and "schema" in spec.params):
                continue  # TRL's own inputs (prompts, completion_ids), or a schema given as a parameter
            default = request.answer_column if column == "answer" else column
            name = spec.params.get(COLUMN_PARAMS[column], default)
            if name:
                needed[name] = spec.name
    return needed


def _check_columns(path: Path, request: GRPORecipeRequest) -> None:
    """Read the whole local file the way inspection does: every row parses, prompts are text or chat
    messages, and the prompt column and the columns the rewards read exist."""
    rows = read_file(path)
    PROMPT_COUNTS[str(path.resolve())] = len(rows)
    check_prompt_column(rows, request.prompt_column)
    for column, reward in reward_columns(request).items():
        if column not in rows[0]:
            field = "answer_column" if column == request.answer_column else "rewards"
            raise UserInputError(field, f"column '{column}', which {reward} reads, is not in {path} "
                                 f"(columns: {', '.join(rows[0])})")


def _model_fields(request: GRPORecipeRequest, model: str, moe: bool, recipe: dict, why: dict,
                  cpu: bool) -> tuple[dict, dict]:
    """(values, why) of the model section: the weights' dtype follows recipe.precision; under LoRA the recipe's
    beta and bf16 say what they cost there (in `why`), and a MoE model's routers are left out of LoRA's targets."""
    view = GRPOView(recipe)
    if request.finetune != "full" and view.beta:
        # trl/trainer/grpo_trainer.py: under PEFT ref_model is None and the reference log-probs come from the
        # policy with its adapter disabled
        why["beta"] = ("a small KL pull to the starting model; under LoRA TRL computes the reference by disabling the "
                       "adapter (no second model in memory, one more forward pass per step); 0 drops the KL term")
    if request.finetune != "full" and view.bf16:
        why["bf16"] = (
            "bf16 autocast for the matmuls over the bf16 base; the LoRA adapters and their AdamW state stay float32"
        )
    fields, model_why = _model_section(request, model, view.bf16, cpu)
    if moe and GRPOView.given(fields).lora_target_modules == "all-linear":
        fields["lora_target_modules"] = _moe_lora_targets(model)
        model_why["lora_target_modules"] = "every linear layer except the MoE routers, which LoRA must not adapt"
    return fields, model_why


def _model_section(request: GRPORecipeRequest, model: str, bf16: bool, cpu: bool) -> tuple[dict, dict]:
    """(values, why) of the model section as the request asks: the weights' dtype, LoRA or QLoRA."""
    fields = {"model_name_or_path": model, "dtype": weights_dtype(request.finetune, bf16, cpu)}
    why = {"model_name_or_path": "the policy model", "dtype": dtype_reason(request.finetune, bf16, cpu)}
    if request.finetune in ("lora", "qlora"):
        fields.update(
            use_peft=True,
            lora_r=request.lora_r,
            lora_alpha=request.lora_alpha or 2 * request.lora_r,
            lora_target_modules=request.lora_target_modules,
        )
        why.update(
            use_peft="LoRA: float32 adapters on a frozen base",
            lora_r="rank: 16-32 is the settled range for RL, whose updates are low-rank",
            lora_alpha="alpha = 2 x rank, the usual scaling" if not request.lora_alpha else "as requested",
            lora_target_modules="every linear layer: attention-only LoRA learns less in RL",
        )
    if request.finetune == "qlora":
        fields.update(load_in_4bit=True, bnb_4bit_quant_type="nf4", use_bnb_nested_quant=True)
        why.update(load_in_4bit="QLoRA: the frozen base in 4-bit", bnb_4bit_quant_type="NF4, QLoRA's data type",
                   use_bnb_nested_quant="double quantisation: about 0.4 bits per weight less")
    return fields, why


def is_vllm_field(key: str) -> bool:
    return key == "use_vllm" or key.startswith("vllm_")


def _hardware(request: GRPORecipeRequest, gpu, recipe: dict, why: dict) -> tuple[dict, dict]:
    """(values, why) that adapt the seed recipe to the target. A CPU target drops the recipe's vLLM fields (in
    place): TRL's default use_vllm false samples with transformers generate, and a vLLM layout would mean nothing."""
    if gpu is None:  # CPU target: no vLLM, no mixed precision
        for key in [k for k in recipe if is_vllm_field(k)]:
            del recipe[key]
            why.pop(key, None)
        return ({"bf16": False, "use_cpu": True},
                {"bf16": "CPU target: float32 throughout (no vLLM fields: transformers generate samples on a CPU)",
                 "use_cpu": "CPU target: every torchrun rank joins one gloo world"})
    values, why = {"bf16": gpu.bf16}, {}
    if not gpu.bf16:
        values["fp16"] = True
        why["bf16"] = f"the {gpu.name} has no bf16"
        why["fp16"] = FP16_REASON
    if request.num_gpus > 1:
        values["vllm_mode"] = "server"
        why["vllm_mode"] = (f"{request.num_gpus} GPUs: vLLM serves on its own GPU (`trl vllm-serve`), training "
                            "runs on the rest")
    else:
        values["vllm_mode"] = "colocate"
    return values, why


def _dapo_length_shaping(request: GRPORecipeRequest, recipe: dict, why: dict, defaults: dict,
                         specs: list[RewardSpec]) -> list[RewardSpec]:
    """DAPO's soft overlong punishment as an extra reward, its L_max pinned as max_completion_length (in place)."""
    if any(s.name == "soft_overlong_punishment" for s in specs):
        return []
    # the request's, else the recipe's, else the installed TRL's default (else the generated TRL's)
    length = GRPOView({**recipe, **request.overrides}, {**GRPOView.DEFAULTS, **defaults}).max_completion_length
    if not isinstance(length, int) or length <= 0:
        return []  # validation reports the bad length
    recipe["max_completion_length"] = length
    source = ("override: " + (request.override_reason or "set by the request's overrides")
              if "max_completion_length" in request.overrides else
              why.get("max_completion_length", f"{length} tokens, TRL's default"))
    why["max_completion_length"] = (source
                                    + "; also L_max of DAPO's soft overlong punishment in train/rewards.json: "
                                    "change both together")
    return [RewardSpec(name="soft_overlong_punishment", params={
        "max_completion_len": length, "soft_punish_cache": round(length * DAPO_SOFT_PUNISH_FRACTION)})]


def build_config(request: GRPORecipeRequest, run: Run) -> tuple[dict, str, str, bool, dict, list, object,
                                                               dict | None]:
    """(config values, variant, reason, is_moe, why per key, reward specs, memory plan or None, the agentic
    completion budget's finding or None) for the request's target."""
    model = resolve_model(request.model)
    moe = is_moe(model)
    variant, reason = choose_variant(request.variant, request.symptom, moe, request.override_reason)
    gpu, _ = resolve_target(request.gpu)
    try:
        defaults = trl_defaults()
    except UserInputError:  # no training interpreter: write every value; validation says TRL's checks did not run
        defaults = {}

    # a GPU target: never a layout the memory plan has not checked (an unknown architecture is refused)
    size_b = model_size_b(model, None if gpu is None else f"{request.num_gpus}x {request.gpu}")
    recipe, why = recipe_values(variant, request.finetune, size_b)
    record = agentic_record(request)
    refuse_unparsed_template(record, model)
    tool_fields, tool_why = agentic_fields(record)
    recipe.update(tool_fields)
    why.update(tool_why)
    hardware, hardware_why = _hardware(request, gpu, recipe, why)
    recipe.update(hardware)
    why.update(hardware_why)
    thinking, thinking_why = thinking_fields(model, request.thinking)
    if request.thinking and not thinking:
        raise UserInputError("thinking", f"'{request.model}' has no enable_thinking switch in its chat template; "
                             "leave thinking empty for it")
    recipe.update(thinking)
    why.update(thinking_why)
    ga = GRPOView({**recipe, **request.overrides}).gradient_accumulation_steps
    if isinstance(ga, int) and not {"steps_per_generation", "generation_batch_size", "num_iterations"} & set(
        request.overrides
    ):
        structure, structure_why = off_policy_fields(variant, ga)
        recipe.update(structure)
        why.update(structure_why)
    recipe.update(_report_to(request, why))
    budget = _size_for_turns(request, recipe, why, defaults, turn_cost(request, record, model))
    trl_length = GRPOView({}, {**GRPOView.DEFAULTS, **defaults}).max_completion_length  # the installed TRL's
    completion_length(recipe, why, request.overrides, trl_length, gpu is None, run, model)
    specs = list(request.rewards)
    if variant == "dapo":
        specs += _dapo_length_shaping(request, recipe, why, defaults, specs)
    if any(s.weight != 1.0 for s in specs):
        recipe["reward_weights"] = [s.weight for s in specs]
        why["reward_weights"] = "the weights of the rewards in train/rewards.json, in order"
    recipe["output_dir"] = str(run.checkpoints.relative_to(run.dir))  # relative: the run can move
    why["output_dir"] = "checkpoints go inside the run directory (relative to it, so the run can be moved)"

    model_fields, model_why = _model_fields(request, model, moe, recipe, why, gpu is None)
    data_fields = _dataset_fields(request, run)
    why.update(model_why)
    why.update({k: "the training prompts" for k in data_fields})
    values = {**model_fields, **data_fields, **recipe}
    cli_rewards = _trl_cli_rewards(specs)
    values.update(cli_rewards)
    why.update({k: "this run's rewards as import paths, so `trl grpo --config` runs them too" for k in cli_rewards})
    for key, value in request.overrides.items():
        if values.get(key, object()) != value or key not in why:
            why[key] = "override: " + (request.override_reason or "set by the request's overrides")
    values.update(request.overrides)
    fitted = set(values)
    plan = None
    if gpu is not None:  # the recipe fitted to the GPU by the memory plan (its levers, each value saying why)
        plan = fit_to_target(values, why, request.gpu, request.num_gpus, set(request.overrides))
    prompts = _prompt_count(request)
    size_batch(values, why, plan, request, prompts, variant)
    if gpu is not None:
        plan = grow_vllm_share(values, why, plan_for(values, request.gpu, request.num_gpus), request)
    schedule(values, why, prompts, plan.launch.training_processes if plan else 1, request.overrides)
    fitted = {k for k in values if k not in fitted or k in why and why[k].startswith("memory plan")}
    # Recipe values are always written, so a later TRL with other defaults runs the same recipe; other values
    # only when they differ from the installed TRL's defaults.
    explicit = ALWAYS_WRITTEN | set(recipe) | set(model_fields) | set(request.overrides) | fitted
    values = {k: v for k, v in values.items() if k in explicit or k not in defaults or defaults[k] != v}
    return values, variant, reason, moe, {k: why[k] for k in values if k in why}, specs, plan, budget


def _size_for_turns(request: GRPORecipeRequest, recipe: dict, why: dict, defaults: dict, cost: dict | None
                    ) -> dict | None:
    """An agentic run's max_completion_length sized for its tool-calling turns (in `recipe`, before DAPO pins its
    L_max to it); the finding that says the value and why (or that an override holds fewer turns)."""
    turns = GRPOView.given({**recipe, **request.overrides}).max_tool_calling_iterations
    base = GRPOView(recipe, {**GRPOView.DEFAULTS, **defaults}).max_completion_length  # the recipe's, else TRL's
    value, reason, found = completion_budget(cost, turns, base, GRPOView.given(request.overrides).max_completion_length)
    if value is not None:
        recipe["max_completion_length"] = value
        why["max_completion_length"] = reason
    return found


REPORT_TO_WHY = {  # where each writes: training.script_support.keep_trackers_in_run
    "trackio": "trackio: a local dashboard, logged under trackers/trackio (`TRACKIO_DIR=trackers/trackio trackio "
               "show`)",
    "wandb": "wandb: set WANDB_MODE=offline to keep it on this machine, logged under trackers/wandb (`wandb sync` "
             "uploads later)",
    "mlflow": "mlflow: a local SQLite store, trackers/mlflow.db (`mlflow ui --backend-store-uri "
              "sqlite:///trackers/mlflow.db`)",
    "tensorboard": "tensorboard: event files under the checkpoints folder (`tensorboard --logdir checkpoints`)",
}


def _report_to(request: GRPORecipeRequest, why: dict) -> dict:
    """report_to as the person chose (TRL's default 'none': only this project's progress file), kept off the
    network where the integration allows it."""
    if not request.report_to:
        return {}
    chosen = list(dict.fromkeys(request.report_to))
    values: dict = {"report_to": chosen}
    why["report_to"] = ("also log to " + "; ".join(REPORT_TO_WHY[name] for name in chosen)
                        + " (each needs its package in the training environment)")
    if "trackio" in chosen:
        values.update(project=request.run_name or Path(request.model).name, trackio_static_space_id=False)
        why["project"] = "the trackio project this run logs under"
        why["trackio_static_space_id"] = ("false: no Space on the Hub, no sync or freeze after training "
                                          "(trackio_space_id is unset, so logs stay local)")
    return values


# LoRA targets for a MoE model whose layers cannot be listed offline: the attention and MLP projections of the
# Llama/Qwen/GLM/DeepSeek naming, never the router ('gate' / 'router'), which 'all-linear' would adapt.
GENERIC_MOE_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _moe_lora_targets(model: str) -> list[str]:
    """'all-linear' without the routers: listed from the model's layers (built on the meta device in the training
    interpreter), else the generic projection names."""
    try:
        found = in_training(LORA_TARGETS_WITHOUT_ROUTERS, model)
    except UserInputError:  # no training interpreter
        found = None
    return found or GENERIC_MOE_LORA_TARGETS


def _trl_cli_rewards(specs: list[RewardSpec]) -> dict:
    """`reward_funcs` for `trl grpo`: only when every reward is expressible as a dotted path with its defaults."""
    paths = []
    for spec in specs:
        if spec.name in REGISTRY:
            dotted = REGISTRY[spec.name].info.dotted_path
            if spec.params or not dotted:
                return {}
            paths.append(dotted)
        elif "." in spec.name and not spec.params:
            paths.append(spec.name)
        else:
            return {}
    return {"reward_funcs": paths}


SECTIONS = (
    (
        "model",
        ("GRPOScriptArguments", "ModelConfig"),
        lambda k: k.startswith(("model", "dtype", "lora", "use_peft", "load_in", "bnb")),
    ),
    ("data", ("GRPOScriptArguments", "DatasetMixtureConfig"), lambda k: k.startswith("dataset")),
    ("rewards", (), lambda k: k.startswith("reward")),
)


def render_yaml(values: dict, header: str, why: dict | None = None) -> str:
    """YAML grouped by topic, with a header saying what it is and how to run it, and each value's reason as a
    comment above it."""
    why = why or {}
    groups: dict[str, dict] = {"model": {}, "data": {}, "rewards": {}, "grpo": {}}
    for key, value in values.items():
        name = next((n for n, _, pred in SECTIONS if pred(key)), "grpo")
        groups[name][key] = value
    parts = [header]
    for name, title in (("model", "model"), ("data", "data"), ("rewards", "rewards"), ("grpo", "GRPO / training")):
        if groups[name]:
            lines = [f"# --- {title}"]
            for key, value in groups[name].items():
                if why.get(key):
                    lines += textwrap.wrap(why[key], 116, initial_indent="# ", subsequent_indent="#   ")
                lines.append(yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=False).rstrip("\n"))
            parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def emit_grpo_config(request: GRPORecipeRequest) -> EmitResult:
    """Into `run_dir` when given (refused when it holds anything launched), else into a new run directory
    that appears only once every file is written: a failed emission leaves nothing behind."""
    if request.run_dir:
        # A relative run_dir is resolved now (workspace first), whatever directory the emit ran from.
        run_dir = find_existing(request.run_dir)
        if run_dir is None or not run_dir.is_dir():
            raise UserInputError("run_dir", f"no such directory: {request.run_dir} (looked under {workspace_root()}, "
                                 "its runs/ and the current directory)")
        run = Run(run_dir)
        launched = run.launched_evidence()
        if launched:
            raise UserInputError(
                "run_dir", f"{run_dir} holds a launched run ({', '.join(launched)}): emitting into it would rewrite "
                "what was launched. Emit without run_dir for a new run, or resume_training to continue this one")
        return _emit(request, run, run)
    slug = request.run_name or Path(request.model).name
    made_root = not runs_root().exists()
    runs_root().mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".emit-", dir=runs_root()))  # hidden from all_runs
    try:
        while True:
            final = runs_root() / unique_run_name(slug)
            result = _emit(request, Run(staging), Run(final))
            try:
                os.rename(staging, final)  # fails when another emission took the name meanwhile: next name
                return result
            except OSError:
                if not final.exists():
                    raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if made_root:  # a first emission that failed leaves no empty runs/ either
            with contextlib.suppress(OSError):
                runs_root().rmdir()
        raise


def _emit(request: GRPORecipeRequest, run: Run, final: Run) -> EmitResult:
    """Write the run's files into `run` (a staging directory, or the run itself); the result names them where
    they will be, in `final`."""
    values, variant, reason, moe, why, reward_specs, plan, budget = build_config(request, run)
    command, how = launch_text(plan, final.dir)
    specs = [s.model_dump() for s in reward_specs]
    agentic = agentic_record(request)
    # the one validation entry point (memory.verdict.validate): rules, TRL's checks, architecture, memory plan
    validation = validate(values, request.gpu, request.num_gpus, reward_specs=specs,
                          override_reason=request.override_reason, is_moe=moe, base_dir=run.dir,
                          agentic=agentic.model_dump() if agentic else None)

    trl_version = validation.trl_version or "unknown: no training interpreter"
    target = validation.target
    names = ", ".join(s["name"] for s in specs)
    if any(s["name"] == "soft_overlong_punishment" for s in specs):
        names += " (soft_overlong_punishment: DAPO's length shaping, -1 at max_completion_length)"
    note = ("".join(f"# {line}\n" for line in textwrap.wrap(DYNAMIC_SAMPLING_NOTE, 114))
            if variant == "dapo" else "")
    header = (
        f"# GRPO config emitted by llm-finetuning for {target} (TRL {trl_version}); variant: {variant} ({reason}).\n"
        + note
        + "# Each value that differs from TRL's default says why above it.\n"
        f"# Rewards (train/rewards.json): {names}.\n"
        f"# Train with this run's rewards:  {how}\n"
        + ("# TRL's own CLI also accepts it:  trl grpo --config train/config.yaml\n" if "reward_funcs" in values else
           "# TRL's own CLI parses it too; rewards with parameters live in train/rewards.json, read by train.py.\n")
    )
    atomic_write_text(run.config, render_yaml(values, header, why))
    atomic_write_json(run.rewards, specs)
    request_record = request.model_dump()
    request_record.update(gpu=request.gpu, num_gpus=request.num_gpus, variant_chosen=variant, is_moe=moe,
                          trainer=trainer_name(agentic))
    atomic_write_json(run.request, request_record)
    if agentic:
        atomic_write_json(run.agentic, agentic.model_dump())
    atomic_write_json(run.request_schema, GRPORecipeRequest.model_json_schema())
    if budget:  # the agentic completion budget: the emitted value and why, or an override that holds fewer turns
        findings = sorted([*validation.findings, Finding(**budget)], key=lambda f: SEVERITY_ORDER[f.severity])
        validation = validation.model_copy(update={"findings": findings})
    template = TRAINER_TEMPLATES[trainer_name(agentic)].read_text()
    script = template.replace("{{RUN}}", final.name).replace("{{PROMPT_COLUMN}}", request.prompt_column)
    atomic_write_text(run.script, script)
    return EmitResult(
        run_dir=str(final.dir),
        config_path=str(final.config),
        train_script_path=str(final.script),
        schema_path=str(final.request_schema),
        variant=variant,
        variant_reason=reason,
        config=values,
        validation=validation,
        launch_command=command,
    )
