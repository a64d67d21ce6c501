"""emit_grpo_config: request -> recipe + variant + target -> validated files in a run directory.

Writes train/config.yaml (TrlParser YAML, accepted by `trl grpo --config`), train/rewards.json, train/train.py,
train/request.json and train/request.schema.json (runs.Run names them). Every file is written atomically.
train/train.py is mcp_server/training/train_template.py with the run's name and prompt column filled in: the
template lives with the training code it imports; emission only copies its text.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import yaml

from mcp_server.dataset import check_prompt_column, read_file
from mcp_server.errors import UserInputError
from mcp_server.gpus import resolve_target
from mcp_server.memory.models import MemoryPlanRequest
from mcp_server.memory.planner import plan_memory
from mcp_server.model_ref import TINY, is_moe, resolve_model
from mcp_server.recipe.models import EmitResult, GRPORecipeRequest
from mcp_server.recipe.rules import finding
from mcp_server.recipe.trl_fields import trl_defaults
from mcp_server.recipe.validate import validate_values
from mcp_server.recipe.variants import BASE_RECIPE, VARIANTS, choose_variant
from mcp_server.rewards.registry import REGISTRY
from mcp_server.runs import Run
from mcp_server.tiny import split_task, write_jsonl
from mcp_server.workspace import atomic_write_json, atomic_write_text, runs_root, unique_run_name

LORA_LEARNING_RATE = 1e-5  # LoRA updates few weights: GRPO with LoRA settles an order of magnitude above full FT
ALWAYS_WRITTEN = {"loss_type", "output_dir", "model_name_or_path"}
TEMPLATE = Path(__file__).parents[1] / "training" / "train_template.py"
DATA_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def _dataset_fields(request: GRPORecipeRequest, run_dir: Path) -> dict:
    """TrlParser keys for the data: a local file becomes a `datasets` mixture entry, a hub name `dataset_name`."""
    if request.dataset == TINY:
        train_rows, _ = split_task()
        run = Run(run_dir)
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
            if data_file.is_relative_to(Path(run_dir).resolve()):  # the run's own data: relative, moves with it
                data_file = data_file.relative_to(Path(run_dir).resolve())
            return {"datasets": [{"path": fmt, "data_files": str(data_file), "split": "train"}]}
        return {"datasets": [{"path": str(path.resolve()), "split": request.dataset_split}]}
    if request.dataset.startswith((".", "/", "~")):
        raise UserInputError("dataset", f"no such file or directory: {request.dataset}")
    fields = {"dataset_name": request.dataset, "dataset_train_split": request.dataset_split}
    if request.dataset_config:
        fields["dataset_config"] = request.dataset_config
    return fields


def _check_columns(path: Path, request: GRPORecipeRequest) -> None:
    """Read the whole local file the way inspection does: every row parses, prompts are text or chat
    messages, and the prompt (and answer) columns exist."""
    rows = read_file(path)
    check_prompt_column(rows, request.prompt_column)
    if request.answer_column and request.answer_column not in rows[0]:
        raise UserInputError("answer_column", f"column '{request.answer_column}' is not in {path} "
                             f"(columns: {', '.join(rows[0])})")


def _model_fields(request: GRPORecipeRequest, model: str, bf16: bool) -> dict:
    fields = {"model_name_or_path": model, "dtype": "bfloat16" if bf16 else "float32"}
    if request.finetune in ("lora", "qlora"):
        fields.update(
            use_peft=True,
            lora_r=request.lora_r,
            lora_alpha=request.lora_alpha or 2 * request.lora_r,
            lora_target_modules=request.lora_target_modules,
        )
    if request.finetune == "qlora":
        fields.update(load_in_4bit=True, bnb_4bit_quant_type="nf4", use_bnb_nested_quant=True)
    return fields


def build_config(request: GRPORecipeRequest, run_dir: Path) -> tuple[dict, str, str, bool]:
    """(config values, variant, reason, is_moe) for the request's target."""
    model = resolve_model(request.model)
    moe = is_moe(model)
    variant, reason = choose_variant(request.variant, request.symptom, moe, request.override_reason)
    gpu, _ = resolve_target(request.gpu)

    recipe = dict(BASE_RECIPE)
    recipe.update(VARIANTS[variant])
    if gpu is None:  # CPU target: no vLLM, no mixed precision
        recipe.update(use_vllm=False, bf16=False, use_cpu=True)  # use_cpu: every torchrun rank joins one gloo world
    else:
        recipe["bf16"] = gpu.bf16  # without bf16 train in fp32: fp16 diverges silently in RL
        recipe["vllm_mode"] = "server" if request.num_gpus > 1 else "colocate"
    if request.finetune != "full":
        recipe["learning_rate"] = LORA_LEARNING_RATE
    if any(s.weight != 1.0 for s in request.rewards):
        recipe["reward_weights"] = [s.weight for s in request.rewards]
    recipe["output_dir"] = str(Run(run_dir).checkpoints.relative_to(run_dir))  # relative: the run can move

    model_fields = _model_fields(request, model, recipe["bf16"])
    values = {**model_fields, **_dataset_fields(request, run_dir), **recipe}
    values.update(_trl_cli_rewards(request))
    values.update(request.overrides)
    try:
        defaults = trl_defaults()
    except UserInputError:  # no training interpreter: write every value; validation says TRL's checks did not run
        defaults = {}
    # Recipe values are always written, so a later TRL with other defaults runs the same recipe; other values
    # only when they differ from the installed TRL's defaults.
    explicit = ALWAYS_WRITTEN | set(recipe) | (set(model_fields) - {"dtype"}) | set(request.overrides)
    values = {k: v for k, v in values.items() if k in explicit or k not in defaults or defaults[k] != v}
    return values, variant, reason, moe


def _trl_cli_rewards(request: GRPORecipeRequest) -> dict:
    """`reward_funcs` for `trl grpo`: only when every reward is expressible as a dotted path with its defaults."""
    paths = []
    for spec in request.rewards:
        if spec.name in REGISTRY:
            dotted = REGISTRY[spec.name].get("dotted_path")
            if spec.params or not dotted:
                return {}
            paths.append(dotted)
        elif "." in spec.name and not spec.params:
            paths.append(spec.name)
        else:
            return {}
    return {"reward_funcs": paths}


def _memory_findings(config_path: Path, gpu_target: bool) -> list:
    """Will the emitted run fit the target GPU? A warning with the smallest set of levers when it does not."""
    if not gpu_target:
        return []
    try:
        plan = plan_memory(MemoryPlanRequest(config_path=str(config_path), validate_levers=False))
    except UserInputError as exc:  # e.g. a hub model that is neither cached nor in the catalog
        return [finding("memory_not_planned", "model_name_or_path", "info", f"memory not planned: {exc}",
                        "call plan_memory with the model's architecture numbers")]
    summary = f"planned peak {plan.peak_gib:.1f} GiB per GPU of {plan.capacity_gib:.1f} GiB on the {plan.gpu}"
    if plan.status == "fits":
        return [finding("memory_fits", None, "info", summary + f" ({plan.headroom_gib:.1f} GiB headroom).")]
    fix = "see plan_memory for the levers"
    if plan.recommended:
        fix = (f"apply {', '.join(plan.recommended.levers)} (peak {plan.recommended.peak_gib:.1f} GiB): "
               f"set {plan.recommended.patch}")
    severity, code = ("warning", "memory_does_not_fit") if plan.status == "does_not_fit" else ("warning", "memory_tight")
    return [finding(code, None, severity, summary + ("; it does not fit." if code == "memory_does_not_fit" else
                                                     "; under 10% headroom."), fix)]


SECTIONS = (
    ("model", ("GRPOScriptArguments", "ModelConfig"), lambda k: k.startswith(("model", "dtype", "lora", "use_peft", "load_in", "bnb"))),
    ("data", ("GRPOScriptArguments", "DatasetMixtureConfig"), lambda k: k.startswith("dataset")),
    ("rewards", (), lambda k: k.startswith("reward")),
)


def render_yaml(values: dict, header: str) -> str:
    """YAML grouped by topic, with a header saying what it is and how to run it."""
    groups: dict[str, dict] = {"model": {}, "data": {}, "rewards": {}, "grpo": {}}
    for key, value in values.items():
        name = next((n for n, _, pred in SECTIONS if pred(key)), "grpo")
        groups[name][key] = value
    parts = [header]
    for name, title in (("model", "model"), ("data", "data"), ("rewards", "rewards"), ("grpo", "GRPO / training")):
        if groups[name]:
            parts.append(f"# --- {title}\n" + yaml.safe_dump(groups[name], sort_keys=False, default_flow_style=False))
    return "\n".join(parts)


def emit_grpo_config(request: GRPORecipeRequest) -> EmitResult:
    """Into `run_dir` when given (refused when it holds anything launched), else into a new run directory
    that appears only once every file is written: a failed emission leaves nothing behind."""
    if request.run_dir:
        run_dir = Path(request.run_dir)
        if not run_dir.is_dir():
            raise UserInputError("run_dir", f"no such directory: {request.run_dir}")
        launched = Run(run_dir).launched_evidence()
        if launched:
            raise UserInputError(
                "run_dir", f"{run_dir} holds a launched run ({', '.join(launched)}): emitting into it would rewrite "
                "what was launched. Emit without run_dir for a new run, or resume_training to continue this one")
        return _emit(request, run_dir, run_dir)
    slug = request.run_name or Path(request.model).name
    made_root = not runs_root().exists()
    runs_root().mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".emit-", dir=runs_root()))  # hidden from all_runs
    try:
        while True:
            final = runs_root() / unique_run_name(slug)
            result = _emit(request, staging, final)
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


def _emit(request: GRPORecipeRequest, write_dir: Path, run_dir: Path) -> EmitResult:
    """Write the run's files into `write_dir`; the result names them where they will be, under `run_dir`."""
    values, variant, reason, moe = build_config(request, write_dir)
    specs = [s.model_dump() for s in request.rewards]
    validation = validate_values(values, request.gpu, request.num_gpus, reward_specs=specs,
                                 override_reason=request.override_reason, is_moe=moe)

    run = Run(write_dir)
    trl_version = validation.trl_version or "unknown: no training interpreter"
    target = validation.target
    header = (
        f"# GRPO config emitted by llm-finetuning for {target} (TRL {trl_version}); variant: {variant} ({reason}).\n"
        f"# Train with this run's rewards:  python train/train.py --config train/config.yaml\n"
        + ("# TRL's own CLI also accepts it:  trl grpo --config train/config.yaml\n" if "reward_funcs" in values else
           "# TRL's own CLI parses it too; rewards with parameters live in train/rewards.json, read by train.py.\n")
    )
    config_path = atomic_write_text(run.config, render_yaml(values, header))
    atomic_write_json(run.rewards, specs)
    request_record = request.model_dump()
    request_record.update(gpu=request.gpu, num_gpus=request.num_gpus, variant_chosen=variant, is_moe=moe)
    atomic_write_json(run.request, request_record)
    atomic_write_json(run.request_schema, GRPORecipeRequest.model_json_schema())
    validation.findings.extend(_memory_findings(config_path, gpu_target=validation.target != "CPU"))
    script = TEMPLATE.read_text().replace("{{RUN}}", run_dir.name).replace("{{PROMPT_COLUMN}}", request.prompt_column)
    atomic_write_text(run.script, script)
    final = Run(run_dir)
    return EmitResult(
        run_dir=str(run_dir),
        config_path=str(final.config),
        train_script_path=str(final.script),
        schema_path=str(final.request_schema),
        variant=variant,
        variant_reason=reason,
        config=values,
        validation=validation,
        launch_command=f"cd {run_dir} && python train/train.py --config train/config.yaml",
    )
