"""The planner's inputs: the run's config (a file, a run directory or a dict) and the request, read into the
settings the arithmetic uses (RunSettings) and the GPUs it must fit on (Target)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from mcp_server.config import FIELD, GRPOView, trl_default
from mcp_server.config.batches import MIN_GENERATIONS, generation_batch, whole_groups
from mcp_server.config.target import DEFAULT_SERVER_GPUS, Target as RunTarget
from mcp_server.errors import UserInputError
from mcp_server.gpus import GPU
from mcp_server.memory.constants import DTYPE_BYTES
from mcp_server.memory.params import Architecture
from mcp_server.recipe.precision import weights_dtype
from mcp_server.recipe.variants import BASE_RECIPE


_TRL = object()  # a setting's default is TRL's own (config.trl_default)

# The settings the planner's arithmetic reads, in the order a plan reports them (MemoryPlan.run), each with its
# default. A setting named FIELD.x is the run's config field x, read from the config (read_config) and defaulted as
# the installed TRL defaults it unless the planner assumes otherwise (said beside it); the others are the planner's
# own, decided from the config (finetune, mixed_precision, zero_stage, ...), the launch or the request.
_SETTINGS: tuple[tuple[str, Any], ...] = (
    ("finetune", "full"),
    (FIELD.lora_r, _TRL),
    (FIELD.lora_target_modules, "all-linear"),  # TRL's None leaves peft's choice; the emitter targets all-linear
    (FIELD.lora_dropout, _TRL),
    (FIELD.optim, _TRL),
    (FIELD.dtype, _TRL),
    ("mixed_precision", True),
    (FIELD.gradient_checkpointing, _TRL),
    (FIELD.beta, _TRL),
    (FIELD.num_generations, _TRL),
    (FIELD.per_device_train_batch_size, _TRL),
    (FIELD.gradient_accumulation_steps, _TRL),
    (FIELD.steps_per_generation, _TRL),
    ("prompt_length", 512),
    (FIELD.max_completion_length, _TRL),
    (FIELD.use_vllm, _TRL),
    (FIELD.vllm_mode, _TRL),
    (FIELD.vllm_gpu_memory_utilization, _TRL),
    (FIELD.vllm_enable_sleep_mode, _TRL),
    (FIELD.vllm_tensor_parallel_size, _TRL),
    (FIELD.vllm_max_model_length, _TRL),  # vLLM's context; None: the model's own (TRL passes it through)
    ("vllm_server_gpus", DEFAULT_SERVER_GPUS),  # config.target's default; a launch's choice replaces it
    # `trl vllm-serve` as the launcher starts it: its own --gpu_memory_utilization (0.9 by default; the config's
    # vllm_gpu_memory_utilization is colocate-only), tensor parallel over its GPUs, data parallel 1
    ("vllm_server_gpu_memory_utilization", 0.9),
    ("vllm_server_data_parallel_size", 1),
    ("zero_stage", 0),
    ("offload_optimizer", False),  # DeepSpeed ZeRO-Offload: optimizer state (and fp32 master) in CPU memory
    ("fsdp", False),  # whether the run shards with FSDP (the config's fsdp field, or the launch's strategy)
    ("strategy", "auto"),  # the launcher's multi-GPU strategy; auto: the plan picks the sharding that fits
    (FIELD.use_liger_kernel, _TRL),
    ("fused_logits", False),
    ("trl_version", None),  # the TRL the run uses (None: the installed one); older TRLs differ in defaults
    ("generate_per_micro_step", False),  # TRL < 0.18: generation batch = one micro-step's completions
    (FIELD.attn_implementation, "sdpa"),  # TRL's None: transformers picks sdpa where the model has it
    (FIELD.num_iterations, _TRL),
    (FIELD.max_steps, None),  # None: not capped (TRL's -1)
    # DAPO's dynamic sampling (train/dynamic_sampling.json's max_extra_rounds; 0: off): up to this many extra
    # generation rounds per generation batch (memory: generation.dynamic_sampling_held; time: speed.estimate_speed)
    ("dynamic_sampling_rounds", 0),
    # model-based rewards loaded beside the policy (reward_model_name_or_path, a model id in reward_funcs), each as
    # (parameters, hidden_size, intermediate_size, layers); planner.planned_run resolves them (issue 43)
    ("reward_models", ()),
)
DEFAULTS: dict[str, Any] = {name: trl_default(name) if default is _TRL else default for name, default in _SETTINGS}
# the settings that are config fields, read as the config holds them (read_config), and the config keys read_config
# interprets (most of a lever search's patches hold none of them)
_READ_AS_IS = frozenset(name for name, _ in _SETTINGS
                        if name in GRPOView.DEFAULTS and name not in (FIELD.dtype, "fsdp"))
# a setting read from either name of a deprecated pair ({setting: its replacement}: gradient_checkpointing is
# transformers 5.25's deprecated alias of activation_checkpointing; config.grpo_fields' ALIASES)
_ALIASED = {old: new for old, new in GRPOView.ALIASES.items() if old in _READ_AS_IS}
_INTERPRETED = frozenset({FIELD.use_peft, "use_liger_loss", FIELD.max_steps, FIELD.model_init_kwargs, FIELD.dtype,
                          "torch_dtype", "max_prompt_length", FIELD.bf16, FIELD.fp16, FIELD.deepspeed, FIELD.fsdp})


class RunSettings:
    """The run as the planner's arithmetic reads it, derived from the run's config (RunSpec.fields) and not a copy
    of it: each setting (NAMES) is read, in order, from what the request gave (or a lever or the layout set), what
    the config says (read_config), the defaults below the config (an older TRL's, the recipe's for a run with no
    config) and DEFAULTS. The config is read once, when the settings are made, into plain attributes (the lever
    search reads them a few hundred thousand times a plan); `updated` and `patched` make the search's variants
    without reading it again."""

    NAMES = tuple(DEFAULTS)

    def __init__(self, config: Mapping[str, Any] | None = None, *, below: Mapping[str, Any] | None = None,
                 given: Mapping[str, Any] | None = None) -> None:
        self.config = config or {}  # the run's config fields (the spec's), as its file holds them
        self.below = dict(below or {})  # defaults under the config: an older TRL's, the recipe's
        self.given = dict(given or {})  # over the config: the request's, a lever's, the layout's
        self.__dict__.update({**DEFAULTS, **_present(self.below), **read_config(self.config), **_present(self.given)})

    @classmethod
    def reported(cls, run: Mapping[str, Any]) -> RunSettings:
        """The settings a plan reported (MemoryPlan.run), as given."""
        return cls(given={k: v for k, v in run.items() if k in DEFAULTS})

    def updated(self, update: Mapping[str, Any]) -> RunSettings:
        """These settings with `update` (settings by name) given over them; the config is not read again (the
        lever search makes a few hundred a plan)."""
        copied = object.__new__(type(self))
        copied.__dict__.update(self.__dict__)
        copied.__dict__.update(_present(update))
        copied.given = {**self.given, **update}
        return copied

    def patched(self, patch: Mapping[str, Any]) -> RunSettings:
        """These settings under a config patch (a lever's), read as the config is."""
        return self.updated(read_config(patch))

    def model_dump(self) -> dict[str, Any]:
        """Every setting by name, and the logits' width: what a plan reports."""
        out = {name: self.__dict__[name] for name in self.NAMES}
        out["reward_models"] = list(out["reward_models"])
        out["logits_dtype_bytes"] = self.logits_dtype_bytes
        return out

    @property
    def spg(self) -> int:
        """Micro-steps one generation round feeds (steps_per_generation, TRL's default the accumulation steps)."""
        return self.steps_per_generation or self.gradient_accumulation_steps

    @property
    def peft(self) -> bool:
        return self.finetune in ("lora", "qlora")

    @property
    def logits_dtype_bytes(self) -> int:
        """Width of the full logits: accelerate's bf16 autocast hands the model's outputs back in fp32
        (convert_outputs_to_fp32 in Accelerator.prepare_model); DeepSpeed's bf16 engine, which runs without it, and
        runs without mixed precision give them in the weights' dtype."""
        if self.mixed_precision and self.zero_stage == 0:
            return 4
        return 2 if self.mixed_precision else DTYPE_BYTES.get(self.dtype, 4)

    @property
    def seq_len(self) -> int:
        return self.prompt_length + self.max_completion_length

    @property
    def colocated_vllm(self) -> bool:
        return self.use_vllm and self.vllm_mode == "colocate"

    @property
    def vllm_server(self) -> bool:
        return self.use_vllm and self.vllm_mode == "server"

    @property
    def server_gpus(self) -> int:
        """GPUs `trl vllm-serve` holds for itself (none unless vLLM runs in server mode): config.target decides."""
        return RunTarget(num_gpus=1, vllm_server_gpus=self.vllm_server_gpus).server_gpus(self.vllm_server)

    def training_processes(self, num_gpus: int) -> int:
        """Training processes on `num_gpus` GPUs, the rest after the vLLM server's: config.target.Target.world, the
        one place the training world is decided."""
        return RunTarget(num_gpus=num_gpus, vllm_server_gpus=self.vllm_server_gpus).world(self.vllm_server)


def _present(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


_UNREADABLE = object()


def _typed(name: str, value: Any) -> Any:
    """A setting as TRL's parser types it: a YAML or a request may give "5e-7", "0" or "true" for a number or a
    switch (HfArgumentParser converts them), and arithmetic on the raw string fails. One that does not convert
    ("many" for an int) is left out, so the plan uses the default: the config gate names the field."""
    default = DEFAULTS.get(name)
    if not isinstance(value, str) or not isinstance(default, (bool, int, float)):
        return value
    try:
        return TypeAdapter(type(default)).validate_python(value)
    except ValidationError:
        return _UNREADABLE


def read_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a config, or a lever's patch of one, says of the settings, by setting name: only what it says. The one
    reading of config fields into settings (use_peft and load_in_4bit are the finetune mode, deepspeed and fsdp the
    strategy, bf16 and fp16 mixed precision, model_init_kwargs the weights' dtype and attention)."""
    fields: dict[str, Any] = {key: _typed(key, value) for key, value in config.items()
                              if key in _READ_AS_IS and value is not None}
    for old, new in _ALIASED.items():  # the new name wins where set, as TrainingArguments resolves the pair
        if config.get(new) is not None:
            fields[old] = _typed(old, config[new])
    fields = {key: value for key, value in fields.items() if value is not _UNREADABLE}
    if _INTERPRETED.isdisjoint(config):
        return fields
    get = config.get
    if get(FIELD.use_peft):
        fields["finetune"] = "qlora" if get(FIELD.load_in_4bit) else "lora"
    if get("use_liger_loss") and not get(FIELD.use_liger_kernel):  # its name in TRL 0.17 to 0.24
        fields[FIELD.use_liger_kernel] = True
    if fields.get(FIELD.max_steps) is not None and int(fields[FIELD.max_steps]) <= 0:
        fields.pop(FIELD.max_steps)
    init = get(FIELD.model_init_kwargs) or {}
    if isinstance(init, str):  # the CLI form: a JSON string
        try:
            init = json.loads(init)
        except json.JSONDecodeError:
            raise UserInputError(FIELD.model_init_kwargs,
                                 f"expected a mapping or a JSON object, got {init!r}") from None
    if init.get(FIELD.attn_implementation) and not get(FIELD.attn_implementation):
        fields[FIELD.attn_implementation] = init[FIELD.attn_implementation]
    dtype = get(FIELD.dtype) or get("torch_dtype") or init.get(FIELD.dtype) or init.get("torch_dtype")
    if dtype and dtype != "auto":
        fields[FIELD.dtype] = str(dtype).replace("torch.", "")
    elif dtype == "auto":
        fields[FIELD.dtype] = "bfloat16"  # checkpoints of the catalog models are stored in bf16
    if get("max_prompt_length"):
        fields["prompt_length"] = get("max_prompt_length")
    if get(FIELD.bf16) is False and get(FIELD.fp16) is not True:
        fields["mixed_precision"] = False
    elif get(FIELD.bf16) or get(FIELD.fp16):
        fields["mixed_precision"] = True
    deepspeed, fsdp = get(FIELD.deepspeed), get(FIELD.fsdp)
    if deepspeed:
        fields["zero_stage"] = zero_stage_of(deepspeed)
        fields["offload_optimizer"] = offloads_optimizer(deepspeed)
    if fsdp:
        fields["fsdp"] = True
    if fields.get("zero_stage") or fsdp:
        fields["strategy"] = "fsdp" if fsdp else f"zero{fields['zero_stage']}"
    return fields


class Target(BaseModel):
    """The GPUs the run must fit on."""

    gpu_name: str
    capacity_gib: float
    num_gpus: int
    gpu: GPU | None = Field(default=None)


def zero_stage_of(deepspeed: Any) -> int:
    """ZeRO stage from TrainingArguments.deepspeed (a dict or a path to a JSON file)."""
    if not deepspeed:
        return 0
    ds_config = deepspeed
    if isinstance(deepspeed, str):
        try:
            ds_config = json.loads(Path(deepspeed).expanduser().read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            name = Path(deepspeed).name
            return 3 if "3" in name else 2 if "2" in name else 0
    if isinstance(ds_config, dict):
        stage = (ds_config.get("zero_optimization") or {}).get("stage", 0)
        return int(stage) if str(stage).isdigit() else 0
    return 0


def offloads_optimizer(deepspeed: Any) -> bool:
    """Whether a DeepSpeed config offloads the optimizer state to CPU (zero_optimization.offload_optimizer)."""
    ds_config = deepspeed
    if isinstance(deepspeed, str):
        try:
            ds_config = json.loads(Path(deepspeed).expanduser().read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return "offload" in Path(deepspeed).name
    if not isinstance(ds_config, dict):
        return False
    offload = (ds_config.get("zero_optimization") or {}).get("offload_optimizer") or {}
    return isinstance(offload, dict) and offload.get("device") in ("cpu", "nvme")


@functools.lru_cache(maxsize=1)  # read once per process, like installed_trl_version (an 80 kB read per plan)
def detect_fused_logits() -> bool:
    """Whether the installed TRL scores log-probs in tiles (add_fused_lm_head) instead of full logits.

    Reads TRL's source text instead of importing it, so the server stays fast.
    """
    import importlib.util

    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return False
    utils = Path(list(spec.submodule_search_locations)[0]) / "trainer" / "utils.py"
    try:
        return "def add_fused_lm_head" in utils.read_text(encoding="utf-8")
    except OSError:
        return False


@functools.lru_cache(maxsize=1)  # read once per process: each plan asks (a metadata read is ~1 ms)
def installed_trl_version() -> str | None:
    """The installed TRL's version, from its package metadata (no import)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return None


def _version(text: str | None) -> tuple[int, ...]:
    parts = []
    for piece in str(text or "").split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts) or (0,)


# The last TRL release whose GRPO history was read for the defaults below (trl git tags v0.14.0 .. v1.9.0, the
# PyPI wheels 1.10.0 .. 1.16.0): the fused LM head (trl.trainer.utils.add_fused_lm_head) arrived in 1.15.0.
LAST_CHECKED_TRL = (1, 16, 0)
FUSED_LM_HEAD_SINCE = (1, 15, 0)


LIGER_GRPO_LOSS = ((0, 17, 0), (1, 15, 0))  # LigerFusedLinearGRPOLoss in GRPOTrainer: from 0.17, gone in 1.15
LIGER_FIELD_RENAMED = (0, 25, 0)  # GRPOConfig.use_liger_loss before 0.25, use_liger_kernel from 0.25


def liger_field(settings: RunSettings) -> str:
    """The GRPOConfig field that turns on Liger's GRPO loss in the run's TRL."""
    old = settings.trl_version is not None and _version(settings.trl_version) < LIGER_FIELD_RENAMED
    return "use_liger_loss" if old else "use_liger_kernel"


def has_liger_grpo_loss(settings: RunSettings) -> bool:
    """Whether the run's TRL can score GRPO through Liger's chunked loss (use_liger_kernel); the installed 1.16 uses
    its fused LM head instead."""
    if settings.trl_version is None:
        return False
    first, gone = LIGER_GRPO_LOSS
    return first <= _version(settings.trl_version) < gone


def trl_version_defaults(version: str | None) -> tuple[dict[str, Any], list[str]]:
    """The memory-relevant defaults of a TRL release older than the installed one, read from TRL's history:
    (RunSettings fields, what they assume). The installed TRL's own defaults are RunSettings' defaults."""
    if version is None:
        return {}, []
    v = _version(version)
    fields: dict[str, Any] = {"fused_logits": FUSED_LM_HEAD_SINCE <= v <= LAST_CHECKED_TRL}
    if fields["fused_logits"]:
        said = [f"TRL {version}: log-probs are scored through the fused LM head (from 1.15), no full logits"]
    else:
        said = [f"TRL {version}: the full batch x completion x vocab logits are materialized for the loss"
                + (" (no fused LM head before 1.15)" if v <= LAST_CHECKED_TRL else "; releases after 1.16 are not "
                   "checked, planned as full logits")]
    if v < (0, 19):
        fields["mixed_precision"] = False
        said.append(f"TRL {version}: bf16 defaults to False (TrainingArguments' default; True from 0.19): fp32 "
                    "activations and logits unless the config sets bf16")
        fields[FIELD.beta] = 0.04
        said.append(f"TRL {version}: beta defaults to 0.04 (0.0 from 0.19): a reference model is loaded for a full "
                    "fine-tune")
    if v < (0, 22):
        fields[FIELD.gradient_checkpointing] = False
        said.append(f"TRL {version}: gradient_checkpointing defaults to False (True from 0.22)")
    if v < (1, 0):
        fields["prompt_length"] = 512
        said.append(f"TRL {version}: max_prompt_length defaults to 512 (prompts truncated; removed in 1.0)")
    if v < (1, 10):
        fields[FIELD.max_completion_length] = 256
    if v < (0, 15):
        fields[FIELD.per_device_train_batch_size] = 1
    if v < (0, 18):
        fields["generate_per_micro_step"] = True
        said.append(f"TRL {version}: each micro-step generates its own batch (one round per effective batch from "
                    "0.18)")
    return fields, said


def recipe_defaults(target: Target, finetune: str = "full") -> dict[str, Any]:
    """The recipe's memory-relevant defaults (what emit_grpo_config would write for this target and mode)."""
    keys = (FIELD.use_vllm, FIELD.vllm_mode, FIELD.num_generations, FIELD.beta, FIELD.per_device_train_batch_size,
            FIELD.gradient_accumulation_steps)
    defaults = {k: BASE_RECIPE[k] for k in keys if k in BASE_RECIPE}
    bf16 = target.gpu.bf16 if target.gpu else True
    defaults["dtype"] = weights_dtype(finetune, bf16)  # a full fine-tune keeps float32 master weights
    if target.num_gpus > 1 and defaults.get("use_vllm"):
        defaults["vllm_mode"] = "server"  # the recipe gives vLLM its own GPU when there are several
    return defaults


def resolve_settings(config: Mapping[str, Any], given: Mapping[str, Any] | None = None,
                     target: Target | None = None) -> RunSettings:
    """The settings of a run with this config (the spec's fields) and the settings a request `given` by hand (they
    win; a strategy decides the sharding it names). An older TRL's defaults go under the config, and a run with no
    config plans the recipe's defaults for `target`."""
    given = {k: v for k, v in (given or {}).items() if v is not None}
    below: dict[str, Any] = {}
    installed = installed_trl_version()
    version = given.get("trl_version") if given.get("trl_version") != installed else None
    below.update(trl_version_defaults(version)[0])  # an older TRL's own defaults (the installed TRL's: DEFAULTS)
    if version:
        below["trl_version"] = version
    if not config and target is not None:  # without a config, the recipe's defaults; with one, only what it says
        below.update(recipe_defaults(target, given.get("finetune") or "full"))
    over = {k: v for k, v in given.items() if k in DEFAULTS and not (k == "strategy" and v == "auto")}
    if given.get("zero_stage") is not None and not given.get("strategy"):
        over["strategy"] = f"zero{given['zero_stage']}" if given["zero_stage"] else "ddp"
    if given.get("fsdp") and not given.get("strategy"):
        over["strategy"] = "fsdp"
    if given.get("fused_logits") is None and not version:
        over["fused_logits"] = detect_fused_logits()
    if given.get("strategy") and given["strategy"] != "auto":  # the launcher's strategy, chosen by hand
        over.update(strategy=given["strategy"], fsdp=given["strategy"] == "fsdp",
                    zero_stage={"zero2": 2, "zero3": 3}.get(given["strategy"], 0))
    settings = RunSettings(config, below=below, given=over)
    if settings.dtype not in DTYPE_BYTES:
        raise UserInputError(FIELD.dtype, f"'{settings.dtype}' is not one of {', '.join(DTYPE_BYTES)}")
    return settings


def check_run_numbers(settings: RunSettings, arch: Architecture, target: Target) -> None:
    """The batch and length rules TRL enforces at start-up, raised as input errors before any arithmetic."""
    batch = generation_batch(settings.per_device_train_batch_size, settings.training_processes(target.num_gpus),
                             settings.spg)
    if settings.num_generations < MIN_GENERATIONS:
        raise UserInputError(FIELD.num_generations, f"GRPO needs at least {MIN_GENERATIONS} completions per prompt")
    if not whole_groups(batch, settings.num_generations):
        raise UserInputError(
            FIELD.num_generations,
            f"the generation batch (per_device_train_batch_size x training GPUs x steps_per_generation = "
            f"{batch}) must be divisible by num_generations={settings.num_generations}")
    if arch.max_position_embeddings and settings.seq_len > arch.max_position_embeddings:
        raise UserInputError(
            FIELD.max_completion_length,
            f"prompt {settings.prompt_length} + completion {settings.max_completion_length} tokens exceeds the "
            f"model's {arch.max_position_embeddings}-token context")
