"""The planner's inputs: the run's config (a file, a run directory or a dict) and the request, read into the
settings the arithmetic uses (RunSettings) and the GPUs it must fit on (Target)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, computed_field

from mcp_server.config import FIELD, GRPOView, trl_default
from mcp_server.config.batches import MIN_GENERATIONS, generation_batch, training_world, whole_groups
from mcp_server.config.target import DEFAULT_SERVER_GPUS
from mcp_server.errors import UserInputError
from mcp_server.gpus import GPU
from mcp_server.memory.constants import DTYPE_BYTES
from mcp_server.memory.models import MemoryPlanRequest
from mcp_server.memory.params import Architecture
from mcp_server.recipe.precision import weights_dtype
from mcp_server.recipe.variants import BASE_RECIPE


class RunSettings(BaseModel):
    """The resolved run: TRL defaults, then the config, then explicit request fields. Names follow TRL's config."""

    finetune: str = "full"
    lora_r: int = trl_default(FIELD.lora_r)
    lora_target_modules: str | list[str] = "all-linear"
    lora_dropout: float = trl_default(FIELD.lora_dropout)
    optim: str = trl_default(FIELD.optim)
    dtype: str = trl_default(FIELD.dtype)
    mixed_precision: bool = True
    gradient_checkpointing: bool = True
    beta: float = 0.0
    num_generations: int = trl_default(FIELD.num_generations)
    per_device_train_batch_size: int = trl_default(FIELD.per_device_train_batch_size)
    gradient_accumulation_steps: int = 1
    steps_per_generation: int | None = None
    prompt_length: int = 512
    max_completion_length: int = trl_default(FIELD.max_completion_length)
    use_vllm: bool = False
    vllm_mode: str = trl_default(FIELD.vllm_mode)
    vllm_gpu_memory_utilization: float = trl_default(FIELD.vllm_gpu_memory_utilization)
    vllm_enable_sleep_mode: bool = False
    vllm_tensor_parallel_size: int = 1
    vllm_max_model_length: int | None = None  # vLLM's context; None: the model's own (TRL passes it through)
    vllm_server_gpus: int = DEFAULT_SERVER_GPUS  # config.target's default; a launch's choice replaces it
    # `trl vllm-serve` as the launcher starts it: its own --gpu_memory_utilization (0.9 by default; the config's
    # vllm_gpu_memory_utilization is colocate-only), tensor parallel over its GPUs, data parallel 1
    vllm_server_gpu_memory_utilization: float = 0.9
    vllm_server_data_parallel_size: int = 1
    zero_stage: int = 0
    offload_optimizer: bool = False  # DeepSpeed ZeRO-Offload: optimizer state (and fp32 master) in CPU memory
    fsdp: bool = False
    strategy: str = "auto"  # the launcher's multi-GPU strategy; auto: the plan picks the sharding that fits
    use_liger_kernel: bool = False
    fused_logits: bool = False
    trl_version: str | None = None  # the TRL the run uses (None: the installed one); older TRLs differ in defaults
    generate_per_micro_step: bool = False  # TRL < 0.18: generation batch = one micro-step's completions
    attn_implementation: str = "sdpa"
    num_iterations: int = 1
    max_steps: int | None = None
    # DAPO's dynamic sampling (train/dynamic_sampling.json's max_extra_rounds; 0: off): up to this many extra
    # generation rounds per generation batch (memory: generation.dynamic_sampling_held; time: speed.estimate_speed)
    dynamic_sampling_rounds: int = 0
    # model-based rewards loaded beside the policy (reward_model_name_or_path, a model id in reward_funcs), each as
    # (parameters, hidden_size, intermediate_size, layers); planner.planned_run resolves them (issue 43)
    reward_models: list[tuple[int, int, int, int]] = Field(default_factory=list)

    @property
    def spg(self) -> int:
        """Micro-steps one generation round feeds (steps_per_generation, TRL's default the accumulation steps)."""
        return self.steps_per_generation or self.gradient_accumulation_steps

    @property
    def peft(self) -> bool:
        return self.finetune in ("lora", "qlora")

    @computed_field
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
        """GPUs `trl vllm-serve` holds for itself (none unless vLLM runs in server mode)."""
        return self.vllm_server_gpus if self.vllm_server else 0

    def training_processes(self, num_gpus: int) -> int:
        """Training processes on `num_gpus` GPUs: the rest after the vLLM server's (config.batches.training_world)."""
        return training_world(num_gpus, self.server_gpus)


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
        fields["beta"] = 0.04
        said.append(f"TRL {version}: beta defaults to 0.04 (0.0 from 0.19): a reference model is loaded for a full "
                    "fine-tune")
    if v < (0, 22):
        fields["gradient_checkpointing"] = False
        said.append(f"TRL {version}: gradient_checkpointing defaults to False (True from 0.22)")
    if v < (1, 0):
        fields["prompt_length"] = 512
        said.append(f"TRL {version}: max_prompt_length defaults to 512 (prompts truncated; removed in 1.0)")
    if v < (1, 10):
        fields[FIELD.max_completion_length] = 256
    if v < (0, 15):
        fields["per_device_train_batch_size"] = 1
    if v < (0, 18):
        fields["generate_per_micro_step"] = True
        said.append(f"TRL {version}: each micro-step generates its own batch (one round per effective batch from "
                    "0.18)")
    return fields, said


def recipe_defaults(target: Target, finetune: str = "full") -> dict[str, Any]:
    """The recipe's memory-relevant defaults (what emit_grpo_config would write for this target and mode)."""
    keys = ("use_vllm", "vllm_mode", "num_generations", "beta", "per_device_train_batch_size",
            "gradient_accumulation_steps")
    defaults = {k: BASE_RECIPE[k] for k in keys if k in BASE_RECIPE}
    bf16 = target.gpu.bf16 if target.gpu else True
    defaults["dtype"] = weights_dtype(finetune, bf16)  # a full fine-tune keeps float32 master weights
    if target.num_gpus > 1 and defaults.get("use_vllm"):
        defaults["vllm_mode"] = "server"  # the recipe gives vLLM its own GPU when there are several
    return defaults


# config fields read as they are into RunSettings
_CONFIG_FIELDS = (FIELD.lora_r, FIELD.lora_target_modules, FIELD.lora_dropout, FIELD.optim,
                  FIELD.gradient_checkpointing, FIELD.beta, FIELD.num_generations, FIELD.per_device_train_batch_size,
                  FIELD.gradient_accumulation_steps, FIELD.steps_per_generation, FIELD.max_completion_length,
                  FIELD.use_vllm, FIELD.vllm_mode, FIELD.vllm_gpu_memory_utilization, FIELD.vllm_enable_sleep_mode,
                  FIELD.vllm_tensor_parallel_size, FIELD.vllm_max_model_length, FIELD.use_liger_kernel,
                  FIELD.attn_implementation, FIELD.num_iterations, FIELD.max_steps)


def resolve_settings(request: MemoryPlanRequest, config: dict[str, Any], target: Target | None = None) -> RunSettings:
    fields: dict[str, Any] = {}
    # an older TRL's own defaults first (the installed TRL's are RunSettings' defaults)
    installed = installed_trl_version()
    version = request.trl_version if request.trl_version and request.trl_version != installed else None
    fields.update(trl_version_defaults(version)[0])
    if version:
        fields["trl_version"] = version
    # without a config, the recipe's defaults (over TRL's); with one, only what it says (over TRL's)
    if not config and target is not None:
        fields.update(recipe_defaults(target, request.finetune or "full"))
    given = GRPOView.given(config)  # only what the config says
    if given.use_peft:
        fields["finetune"] = "qlora" if given.load_in_4bit else "lora"
    for key in _CONFIG_FIELDS:
        if getattr(given, key) is not None:
            fields[key] = getattr(given, key)
    if config.get("use_liger_loss") and not given.use_liger_kernel:  # its name in TRL 0.17 to 0.24
        fields["use_liger_kernel"] = True
    if fields.get("max_steps") is not None and int(fields["max_steps"]) <= 0:
        fields.pop("max_steps")
    init = given.model_init_kwargs or {}
    if isinstance(init, str):  # the CLI form: a JSON string
        try:
            init = json.loads(init)
        except json.JSONDecodeError:
            raise UserInputError("model_init_kwargs", f"expected a mapping or a JSON object, got {init!r}") from None
    if init.get("attn_implementation") and not given.attn_implementation:
        fields["attn_implementation"] = init["attn_implementation"]
    dtype = given.dtype or config.get("torch_dtype") or init.get("dtype") or init.get("torch_dtype")
    if dtype and dtype != "auto":
        fields["dtype"] = str(dtype).replace("torch.", "")
    elif dtype == "auto":
        fields["dtype"] = "bfloat16"  # checkpoints of the catalog models are stored in bf16
    if config.get("max_prompt_length"):
        fields["prompt_length"] = config["max_prompt_length"]
    if given.bf16 is False and given.fp16 is not True:
        fields["mixed_precision"] = False
    elif given.bf16 or given.fp16:
        fields["mixed_precision"] = True
    fields["zero_stage"] = zero_stage_of(given.deepspeed)
    fields["offload_optimizer"] = offloads_optimizer(given.deepspeed)
    fields["fsdp"] = bool(given.fsdp)
    if fields["zero_stage"] or fields["fsdp"]:
        fields["strategy"] = "fsdp" if fields["fsdp"] else f"zero{fields['zero_stage']}"
    # explicit request fields win
    explicit = request.model_dump(exclude_none=True)
    for key in RunSettings.model_fields:
        if key in explicit and not (key == "strategy" and explicit[key] == "auto"):
            fields[key] = explicit[key]
    if request.zero_stage is not None and not request.strategy:
        fields["strategy"] = f"zero{request.zero_stage}" if request.zero_stage else "ddp"
    if request.fsdp and not request.strategy:
        fields["strategy"] = "fsdp"
    if request.fused_logits is None and not version:
        fields["fused_logits"] = detect_fused_logits()
    if request.strategy and request.strategy != "auto":  # the launcher's strategy, chosen by hand
        fields.update(strategy=request.strategy, fsdp=request.strategy == "fsdp",
                      zero_stage={"zero2": 2, "zero3": 3}.get(request.strategy, 0))
    settings = RunSettings(**{k: v for k, v in fields.items() if v is not None})
    if settings.dtype not in DTYPE_BYTES:
        raise UserInputError("dtype", f"'{settings.dtype}' is not one of {', '.join(DTYPE_BYTES)}")
    return settings


def check_run_numbers(settings: RunSettings, arch: Architecture, target: Target) -> None:
    """The batch and length rules TRL enforces at start-up, raised as input errors before any arithmetic."""
    batch = generation_batch(settings.per_device_train_batch_size, settings.training_processes(target.num_gpus),
                             settings.spg)
    if settings.num_generations < MIN_GENERATIONS:
        raise UserInputError("num_generations", f"GRPO needs at least {MIN_GENERATIONS} completions per prompt")
    if not whole_groups(batch, settings.num_generations):
        raise UserInputError(
            "num_generations",
            f"the generation batch (per_device_train_batch_size x training GPUs x steps_per_generation = "
            f"{batch}) must be divisible by num_generations={settings.num_generations}")
    if arch.max_position_embeddings and settings.seq_len > arch.max_position_embeddings:
        raise UserInputError(
            FIELD.max_completion_length,
            f"prompt {settings.prompt_length} + completion {settings.max_completion_length} tokens exceeds the "
            f"model's {arch.max_position_embeddings}-token context")


def with_update(settings: RunSettings, update: dict[str, Any]) -> RunSettings:
    """settings.model_copy(update=update) without pydantic's generic copy (its five copy.copy calls): the lever
    search makes a few hundred a plan. RunSettings keeps its fields in __dict__ alone (no extras, no private
    attributes), as model_copy's own copy does."""
    copied = object.__new__(type(settings))
    object.__setattr__(copied, "__dict__", {**settings.__dict__, **update})
    object.__setattr__(copied, "__pydantic_fields_set__", settings.__pydantic_fields_set__ | update.keys())
    object.__setattr__(copied, "__pydantic_extra__", None)
    object.__setattr__(copied, "__pydantic_private__", None)
    return copied


def settings_update(patch: dict[str, Any]) -> dict[str, Any]:
    """A lever's config patch (config field names) as the RunSettings fields it sets."""
    update: dict[str, Any] = {}
    for key, value in patch.items():
        if key == "use_peft":
            update["finetune"] = "qlora" if patch.get("load_in_4bit") else "lora"
        elif key == "deepspeed":
            update["zero_stage"] = zero_stage_of(value)
            update["offload_optimizer"] = offloads_optimizer(value)
            update["strategy"] = f"zero{update['zero_stage']}"
        elif key == "use_liger_loss":
            update["use_liger_kernel"] = value
        elif key in _SETTINGS_FIELDS:
            update[key] = value
    return update


_SETTINGS_FIELDS = frozenset(RunSettings.model_fields)  # asked for each key of a few hundred patches a plan
