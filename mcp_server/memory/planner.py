"""plan_memory: will this GRPO run fit on the target GPUs, what to change if not, and how fast will it roll out.

The model is arithmetic on the architecture and the run settings (no torch): per training GPU, the peak of
  training   = weights + reference + optimizer state + gradients/activations/logits (+ vLLM if colocated)
  generation = weights + reference + optimizer state + KV cache (HF generate) or the whole vLLM share
plus the CUDA context and allocator slack. See references/grpo-memory.md for every term and its source.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from mcp_server.errors import UserInputError
from mcp_server.gpus import GPU, lookup_gpu, resolve_target
from mcp_server.memory.models import (
    Lever,
    LeverSet,
    MemoryComponent,
    MemoryPlan,
    MemoryPlanRequest,
    RolloutSpeed,
    ServerGPUPlan,
    SizeClassAnchor,
    Validation,
)
from mcp_server.memory.lm_catalog import find_model, lookup_model
from mcp_server.memory.params import Architecture, ParamCount, count_params, linear_modules, load_local_architecture, lora_trainable_params
from mcp_server.model_ref import cached_config_path, expand_tiny
from mcp_server.recipe.models import default_rewards
from mcp_server.recipe.validate import validate_values
from mcp_server.recipe.variants import BASE_RECIPE
from mcp_server.runs import Run, sidecars
from mcp_server.userfiles import read_text

GIB = 1024**3
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
NF4_BYTES = 4.127 / 8  # NF4 with double quantization: 4 bits + ~0.127 bits of quantization constants per weight
# Full-logits GRPO loss (logits, logits/T, log-softmax kept for backward, its gradient) per element of
# batch x completion x vocab: 46 GB for 16 x 2048 x 151936 measured in open-r1#615 -> ~9.2 bytes.
LOGITS_BYTES = 9.2
CUDA_CONTEXT_GIB = 0.8  # CUDA context, cuBLAS/NCCL workspaces: outside torch's allocator but on the GPU
ALLOCATOR_SLACK = 0.05  # caching-allocator fragmentation on top of what is live
VLLM_RUNTIME_GIB = 1.0  # vLLM activations, sampler and CUDA graphs inside its memory share
VLLM_SLEEP_RESIDUAL_GIB = 0.5  # what a sleeping colocated vLLM still holds
TIGHT_FRACTION = 0.10  # under 10% headroom counts as tight

EIGHT_BIT_OPTIMS = {"adamw_8bit", "paged_adamw_8bit", "adamw_bnb_8bit", "paged_lion_8bit", "lion_8bit", "ademamix_8bit"}


class RunSettings(BaseModel):
    """The resolved run: TRL defaults, then the config, then explicit request fields. Names follow TRL's config."""

    finetune: str = "full"
    lora_r: int = 16
    lora_target_modules: str | list[str] = "all-linear"
    lora_dropout: float = 0.05
    optim: str = "adamw_torch_fused"
    dtype: str = "float32"
    mixed_precision: bool = True
    gradient_checkpointing: bool = True
    beta: float = 0.0
    num_generations: int = 8
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    steps_per_generation: int | None = None
    prompt_length: int = 512
    max_completion_length: int = 512
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    vllm_gpu_memory_utilization: float = 0.3
    vllm_enable_sleep_mode: bool = False
    vllm_tensor_parallel_size: int = 1
    vllm_server_gpus: int = 1
    zero_stage: int = 0
    fsdp: bool = False
    use_liger_kernel: bool = False
    fused_logits: bool = False
    attn_implementation: str = "sdpa"
    num_iterations: int = 1
    max_steps: int | None = None

    @property
    def spg(self) -> int:
        return self.steps_per_generation or self.gradient_accumulation_steps

    @property
    def peft(self) -> bool:
        return self.finetune in ("lora", "qlora")

    @property
    def seq_len(self) -> int:
        return self.prompt_length + self.max_completion_length


class _Target(BaseModel):
    gpu_name: str
    capacity_gib: float
    num_gpus: int
    gpu: GPU | None = Field(default=None)


# --------------------------------------------------------------------------- inputs
def _read_config(request: MemoryPlanRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config fields, train/request.json fields) from config_path / config."""
    cfg: dict[str, Any] = {}
    recipe: dict[str, Any] = {}
    if request.config_path:
        import yaml

        path = Path(request.config_path).expanduser()
        if path.is_dir():
            path = Run(path).config if Run(path).config.exists() else path / "config.yaml"
        if not path.is_file():
            raise UserInputError("config_path", f"{request.config_path}: no such config (a YAML file or a run directory)")
        try:
            loaded = yaml.safe_load(read_text(path, "config_path")) or {}
        except yaml.YAMLError as exc:
            raise UserInputError("config_path", f"cannot read {path} as YAML: {exc}") from None
        if not isinstance(loaded, dict):
            raise UserInputError("config_path", f"{path} is not a mapping of config fields")
        cfg.update(loaded)
        request_json, rewards_json = sidecars(path)
        if rewards_json.is_file():
            try:
                recipe["_rewards"] = json.loads(rewards_json.read_text(encoding="utf-8"))
            except (OSError, ValueError):  # unreadable, not UTF-8 or not JSON: planned without it
                pass
        if request_json.is_file():
            try:
                recipe.update(json.loads(request_json.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                pass
    if request.config:
        cfg.update(request.config)
    return cfg, recipe


def _zero_stage(value: Any) -> int:
    """ZeRO stage from TrainingArguments.deepspeed (a dict or a path to a JSON file)."""
    if not value:
        return 0
    ds = value
    if isinstance(value, str):
        try:
            ds = json.loads(Path(value).expanduser().read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return 3 if "3" in Path(value).name else 2 if "2" in Path(value).name else 0
    if isinstance(ds, dict):
        stage = (ds.get("zero_optimization") or {}).get("stage", 0)
        return int(stage) if str(stage).isdigit() else 0
    return 0


def _detect_fused_logits() -> bool:
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


def recipe_defaults(target: "_Target") -> dict[str, Any]:
    """The recipe's memory-relevant defaults (what emit_grpo_config would write for this target)."""
    keys = ("use_vllm", "vllm_mode", "num_generations", "beta", "per_device_train_batch_size",
            "gradient_accumulation_steps")
    out = {k: BASE_RECIPE[k] for k in keys if k in BASE_RECIPE}
    bf16 = target.gpu.bf16 if target.gpu else True
    out["dtype"] = "bfloat16" if bf16 else "float32"
    if target.num_gpus > 1 and out.get("use_vllm"):
        out["vllm_mode"] = "server"  # the recipe gives vLLM its own GPU when there are several
    return out


def resolve_settings(request: MemoryPlanRequest, cfg: dict[str, Any], target: "_Target | None" = None) -> RunSettings:
    s: dict[str, Any] = {}
    # without a config, the recipe's defaults (over TRL's); with one, only what it says (over TRL's)
    if not cfg and target is not None:
        s.update(recipe_defaults(target))
    if cfg.get("use_peft"):
        s["finetune"] = "qlora" if cfg.get("load_in_4bit") else "lora"
    for key in ("lora_r", "lora_target_modules", "lora_dropout", "optim", "gradient_checkpointing", "beta",
                "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
                "steps_per_generation", "max_completion_length", "use_vllm", "vllm_mode",
                "vllm_gpu_memory_utilization", "vllm_enable_sleep_mode", "vllm_tensor_parallel_size",
                "use_liger_kernel", "attn_implementation", "num_iterations", "max_steps"):
        if cfg.get(key) is not None:
            s[key] = cfg[key]
    if s.get("max_steps") is not None and int(s["max_steps"]) <= 0:
        s.pop("max_steps")
    init = cfg.get("model_init_kwargs") or {}
    if isinstance(init, str):  # the CLI form: a JSON string
        try:
            init = json.loads(init)
        except json.JSONDecodeError:
            raise UserInputError("model_init_kwargs", f"expected a mapping or a JSON object, got {init!r}") from None
    dtype = cfg.get("dtype") or cfg.get("torch_dtype") or init.get("dtype") or init.get("torch_dtype")
    if dtype and dtype != "auto":
        s["dtype"] = str(dtype).replace("torch.", "")
    elif dtype == "auto":
        s["dtype"] = "bfloat16"  # checkpoints of the catalog models are stored in bf16
    if cfg.get("max_prompt_length"):
        s["prompt_length"] = cfg["max_prompt_length"]
    if cfg.get("bf16") is False and cfg.get("fp16") is not True:
        s["mixed_precision"] = False
    s["zero_stage"] = _zero_stage(cfg.get("deepspeed"))
    s["fsdp"] = bool(cfg.get("fsdp"))
    # explicit request fields win
    explicit = request.model_dump(exclude_none=True)
    for key in RunSettings.model_fields:
        if key in explicit:
            s[key] = explicit[key]
    if request.fused_logits is None:
        s["fused_logits"] = _detect_fused_logits()
    settings = RunSettings(**{k: v for k, v in s.items() if v is not None})
    if settings.dtype not in DTYPE_BYTES:
        raise UserInputError("dtype", f"'{settings.dtype}' is not one of {', '.join(DTYPE_BYTES)}")
    return settings


def resolve_architecture(request: MemoryPlanRequest, cfg: dict[str, Any]) -> tuple[str, Architecture]:
    """(model name, architecture): the request's numbers, else a local config.json (model_ref.expand_tiny for
    'tiny'), the catalog, or a hub model's cached config.json (model_ref.cached_config_path)."""
    if request.architecture is not None:
        return request.model or "explicit", request.architecture
    name = request.model or cfg.get("model_name_or_path")
    if not name:
        raise UserInputError("model", "give a model (catalog name, local directory or config.json), a config with "
                             "model_name_or_path, or the architecture numbers")
    name = expand_tiny(name)
    local = load_local_architecture(name)
    if local is not None:
        return name, local
    found = find_model(name)
    if found is not None:
        return found
    cached = cached_config_path(name)  # a hub model downloaded before: its config.json, read offline
    if cached is not None:
        return name, load_local_architecture(cached)
    return lookup_model(name)  # raises with the closest catalog names


def plan_target(request: MemoryPlanRequest, recipe: dict[str, Any], cfg: dict[str, Any]) -> _Target:
    """The GPUs planned for: the request's, else the run's recorded target; a bare memory size is accepted."""
    num_gpus = request.num_gpus or recipe.get("num_gpus") or cfg.get("num_gpus") or 1
    gpu_name = request.gpu or recipe.get("gpu") or cfg.get("gpu")
    if request.gpu_memory_gib:
        gpu = lookup_gpu(gpu_name) if gpu_name and str(gpu_name).lower() != "cpu" else None
        return _Target(gpu_name=gpu.name if gpu else f"{request.gpu_memory_gib:g} GiB GPU",
                       capacity_gib=request.gpu_memory_gib, num_gpus=int(num_gpus), gpu=gpu)
    gpu, name = resolve_target(str(gpu_name or "H100"))
    if gpu is None:
        raise UserInputError("gpu", "memory planning is for GPUs; give a GPU type or gpu_memory_gib")
    return _Target(gpu_name=name, capacity_gib=gpu.memory_gib, num_gpus=int(num_gpus), gpu=gpu)


# --------------------------------------------------------------------------- the arithmetic
class _Breakdown(BaseModel):
    components: dict[str, float]  # GiB at the peak phase
    notes: dict[str, str]
    training_peak: float
    generation_peak: float
    peak: float
    peak_phase: str
    training_gpus: int
    trainable: int
    vllm_kv_gib: float = 0.0
    vllm_weights_gib: float = 0.0
    server: ServerGPUPlan | None = None
    problems: list[str] = []


def _activation_bytes_per_token_layer(arch: Architecture, s: RunSettings, act: int) -> float:
    """Bytes one token keeps for backward in one decoder layer (flash/sdpa attention)."""
    h, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    norms = (4 if arch.family in ("gemma2", "gemma3_text") else 2) * (4 * h + act * h)  # fp32 upcast + normed output
    attention = act * (3 * q + 3 * kv) + 4 * arch.num_attention_heads  # q/k/v, rotated q/k, output, logsumexp
    if arch.is_moe:
        k, w = arch.num_experts_per_tok, arch.expert_width
        mlp = act * k * (4 * w + h) + 4 * arch.num_experts  # per routed expert: gate, up, act, product, input copy
    else:
        mlp = act * 4 * arch.intermediate_size  # gate, up, activation, product
    lora = 0.0
    if s.peft and s.lora_dropout > 0:  # dropout makes a copy (and a mask) of each targeted module's input
        mods = linear_modules(arch)
        names = list(mods) if s.lora_target_modules == "all-linear" else [
            n for n in ([s.lora_target_modules] if isinstance(s.lora_target_modules, str) else s.lora_target_modules)
            if n in mods]
        lora = sum((act + 1) * mods[n][0] for n in names)
    return norms + attention + mlp + lora


def compute_breakdown(arch: Architecture, params: ParamCount, s: RunSettings, target: _Target) -> _Breakdown:
    n_gpus = target.num_gpus
    problems: list[str] = []
    server_gpus = s.vllm_server_gpus if (s.use_vllm and s.vllm_mode == "server") else 0
    training_gpus = n_gpus - server_gpus
    if training_gpus < 1:
        problems.append(f"vLLM server mode needs at least {server_gpus + 1} GPUs ({server_gpus} for the server, "
                        "1 to train); there are {n_gpus}")
        training_gpus = 1
    shard = training_gpus if (s.zero_stage == 3 or s.fsdp) else 1
    wbytes = DTYPE_BYTES[s.dtype]
    act = 2 if (s.mixed_precision or wbytes == 2) else 4
    zero = s.zero_stage if not s.fsdp else 0
    P = params.total
    notes: dict[str, str] = {}

    # weights
    if s.finetune == "qlora":
        base = params.linear * NF4_BYTES + (P - params.linear) * wbytes
        notes["weights"] = f"{params.linear/1e9:.2f}B linear weights in NF4 + the rest in {s.dtype}"
    elif zero >= 1 and not s.peft:
        base = P * 2  # DeepSpeed holds bf16 weights; the fp32 master copy sits in the optimizer state
        notes["weights"] = "bf16 weights (DeepSpeed)"
    else:
        base = P * wbytes
        notes["weights"] = f"{P/1e9:.2f}B params in {s.dtype}"
    if s.peft:
        trainable = lora_trainable_params(arch, s.lora_r, s.lora_target_modules)
        adapter_bytes = 4 if zero != 3 else wbytes  # PEFT upcasts adapters to fp32 (TRL keeps them bf16 under ZeRO-3)
        weights = base / shard + trainable * adapter_bytes
        grads = trainable * adapter_bytes
        state_bytes = adapter_bytes
        notes["weights"] += f" + {trainable/1e6:.1f}M LoRA params (r={s.lora_r})"
    else:
        trainable = P
        weights = base / shard
        grads = trainable * (2 if zero >= 1 else wbytes) / (training_gpus if (zero >= 2 or shard > 1) else 1)
        state_bytes = wbytes
    # optimizer state
    optim = s.optim.lower()
    if optim in EIGHT_BIT_OPTIMS:
        per_param, onote = 2.0, "8-bit Adam: two 1-byte states"
    elif optim.startswith("adafactor"):
        per_param, onote = 0.1 * state_bytes, "Adafactor: factored second moment"
    elif optim.startswith("sgd"):
        per_param, onote = 0.0, "SGD without momentum"
    elif "lion" in optim:
        per_param, onote = float(state_bytes), "Lion: one state"
    else:
        per_param, onote = 2.0 * state_bytes, f"AdamW: two states in the {'fp32' if state_bytes == 4 else '16-bit'} param dtype"
    if zero >= 1 and not s.peft:
        per_param = (per_param if optim in EIGHT_BIT_OPTIMS else 8.0) + 4.0  # fp32 master + states
        onote = f"DeepSpeed ZeRO-{zero}: fp32 master weights + Adam states, sharded over {training_gpus} GPUs"
        optimizer = trainable * per_param / training_gpus
    else:
        optimizer = trainable * per_param / shard
    notes["optimizer_state"] = onote
    if "paged" in optim:
        notes["optimizer_state"] += " (paged: can spill to CPU under pressure)"
    # reference model
    reference = 0.0
    if s.beta != 0 and not s.peft:
        reference = P * (2 if zero >= 1 else wbytes) / (training_gpus if zero == 3 or s.fsdp else 1)
        notes["reference_model"] = f"beta={s.beta}: a frozen copy of the policy"
    elif s.beta != 0:
        notes["reference_model"] = "LoRA: the reference is the base with adapters disabled, no copy"
    # activations for one micro-batch
    B, S, C, L, H = s.per_device_train_batch_size, s.seq_len, s.max_completion_length, arch.num_hidden_layers, arch.hidden_size
    tokens = B * S
    per_layer = _activation_bytes_per_token_layer(arch, s, act)
    if s.attn_implementation == "eager":
        per_layer += arch.num_attention_heads * S * (2 * act + 1)
    if s.gradient_checkpointing:
        activations = tokens * (L * H * act + per_layer) + tokens * H * 4
        notes["activations"] = f"checkpointed: {L} layer inputs + one layer recomputed, {B} x {S} tokens"
    else:
        activations = tokens * (L * per_layer) + tokens * H * 4
        notes["activations"] = f"all layers kept, {B} x {S} tokens"
    # logits of the completion tokens
    if s.fused_logits or s.use_liger_kernel:
        logits = C * arch.vocab_size * 6.0  # one tile of a sequence at a time
        notes["logits"] = "chunked log-probs (fused LM head / Liger): one tile at a time"
    else:
        logits = B * C * arch.vocab_size * LOGITS_BYTES
        notes["logits"] = f"full logits {B} x {C} x {arch.vocab_size} (~{LOGITS_BYTES} bytes each with backward)"
    if zero == 3 or s.fsdp:  # gathered layer + prefetch
        gathered = 2 * (params.attention + params.mlp) / L * 2
    else:
        gathered = 0.0
    # gradients live with activations when accumulating; with one micro-step they replace them layer by layer
    if s.gradient_accumulation_steps > 1 or s.peft:
        dynamic = grads + activations + logits
    else:
        dynamic = max(grads, activations + logits)
    static = weights + reference + optimizer + gathered

    # generation
    gen_seqs = B * s.spg
    kv_token = 2 * L * arch.kv_dim * act
    vllm_total = vllm_weights = vllm_kv = 0.0
    server = None
    if s.use_vllm and s.vllm_mode == "colocate":
        vllm_total = s.vllm_gpu_memory_utilization * target.capacity_gib * GIB
        vllm_weights = P * 2 / s.vllm_tensor_parallel_size
        vllm_kv = vllm_total - vllm_weights - VLLM_RUNTIME_GIB * GIB
        if vllm_kv <= 0:
            problems.append(
                f"vllm_gpu_memory_utilization={s.vllm_gpu_memory_utilization} gives vLLM "
                f"{vllm_total/GIB:.1f} GiB, less than its {vllm_weights/GIB:.1f} GiB of weights + runtime")
            vllm_kv = 0.0
            vllm_total = vllm_weights + VLLM_RUNTIME_GIB * GIB  # what it would need: vLLM refuses to start below
        notes["vllm_weights"] = (f"bf16 weights / tensor parallel {s.vllm_tensor_parallel_size}; its "
                                 f"{VLLM_RUNTIME_GIB:g} GiB runtime is in the overhead")
        notes["vllm_kv_cache"] = (f"the rest of vllm_gpu_memory_utilization={s.vllm_gpu_memory_utilization:g} "
                                  "of the GPU, preallocated by vLLM")
        resident_in_training = VLLM_SLEEP_RESIDUAL_GIB * GIB if s.vllm_enable_sleep_mode else vllm_total
        training_peak = (static + resident_in_training, dynamic)
        generation_peak = (static + vllm_total, 0.0)
        gen_kv = 0.0
    else:
        gen_kv = gen_seqs * S * kv_token + gen_seqs * arch.vocab_size * 4 * 2
        gen_weights_extra = (P * 2 - weights) if zero == 3 or s.fsdp else 0.0  # ZeRO-3 gathers for generate
        training_peak = (static, dynamic)
        generation_peak = (static + max(gen_weights_extra, 0.0), gen_kv)
        if s.use_vllm and s.vllm_mode == "server":
            # `trl vllm-serve` shards the weights over its GPUs (--tensor-parallel-size = server GPUs)
            cap = target.capacity_gib * GIB
            server_tp = max(s.vllm_tensor_parallel_size, server_gpus)
            w = P * 2 / server_tp
            kv_srv = s.vllm_gpu_memory_utilization * cap - w - VLLM_RUNTIME_GIB * GIB
            server = ServerGPUPlan(gpus=server_gpus, weights_gib=round(w / GIB, 2),
                                   kv_cache_gib=round(max(kv_srv, 0) / GIB, 2), fits=kv_srv > 0)
            if kv_srv <= 0:
                need = math.ceil(P * 2 / (s.vllm_gpu_memory_utilization * cap - (VLLM_RUNTIME_GIB + 2) * GIB)) \
                    if s.vllm_gpu_memory_utilization * cap > (VLLM_RUNTIME_GIB + 2) * GIB else None
                problems.append(
                    f"the vLLM server's {server_gpus} GPU(s) cannot hold {P * 2 / GIB:.0f} GiB of bf16 weights at "
                    f"vllm_gpu_memory_utilization={s.vllm_gpu_memory_utilization:g}"
                    + (f": give `trl vllm-serve` at least {need} GPUs (--tensor-parallel-size)" if need else ""))
            gen_kv = 0.0
            generation_peak = (static, 0.0)
            vllm_kv = max(kv_srv, 0)

    def finish(parts: tuple[float, float]) -> float:
        # slack only on what is allocated and freed every step; weights and optimizer state are allocated once
        fixed, dynamic_part = parts
        return (fixed + dynamic_part * (1 + ALLOCATOR_SLACK)) / GIB + CUDA_CONTEXT_GIB

    t_peak, g_peak = finish(training_peak), finish(generation_peak)
    phase = "training" if t_peak >= g_peak else "generation"
    comp = {
        "weights": weights / GIB,
        "gradients": (grads if phase == "training" else 0.0) / GIB,
        "optimizer_state": optimizer / GIB,
        "reference_model": reference / GIB,
        "activations": (activations if phase == "training" else 0.0) / GIB,
        "logits": (logits if phase == "training" else 0.0) / GIB,
        "generation_kv_cache": (gen_kv if phase == "generation" else 0.0) / GIB,
        "vllm_weights": 0.0,
        "vllm_kv_cache": 0.0,
    }
    if zero == 3 or s.fsdp:
        comp["weights"] += gathered / GIB
        notes["weights"] += f"; sharded over {training_gpus} GPUs + gathered layers"
    if s.gradient_accumulation_steps > 1 and not s.peft:
        notes["gradients"] = f"held across {s.gradient_accumulation_steps} accumulation micro-steps, beside the activations"
    if phase == "training" and not (s.gradient_accumulation_steps > 1 or s.peft) and grads > activations + logits:
        comp["activations"] = comp["logits"] = 0.0
        notes["gradients"] = "one micro-step: the full gradients outgrow the activations they replace"
    elif phase == "training" and not (s.gradient_accumulation_steps > 1 or s.peft):
        comp["gradients"] = 0.0
        notes["gradients"] = "one micro-step: gradients fill in as activations are freed (peak is the activations)"
    if s.use_vllm and s.vllm_mode == "colocate":
        if phase == "generation" or not s.vllm_enable_sleep_mode:
            comp["vllm_weights"], comp["vllm_kv_cache"] = vllm_weights / GIB, max(vllm_kv, 0) / GIB
        else:
            comp["vllm_weights"] = VLLM_SLEEP_RESIDUAL_GIB
            notes["vllm_weights"] = "sleeping: weights offloaded and KV cache released while training"
    # what is left to the phase's peak: CUDA context, allocator slack, vLLM's runtime, gathered ZeRO-3 layers
    comp["framework_overhead"] = (t_peak if phase == "training" else g_peak) - sum(comp.values())
    notes["framework_overhead"] = (f"CUDA context {CUDA_CONTEXT_GIB} GiB + {int(ALLOCATOR_SLACK * 100)}% allocator "
                                   "slack on per-step tensors")
    return _Breakdown(
        components={k: round(v, 3) for k, v in comp.items()}, notes=notes, training_peak=t_peak, generation_peak=g_peak,
        peak=max(t_peak, g_peak), peak_phase=phase, training_gpus=training_gpus, trainable=trainable,
        vllm_kv_gib=vllm_kv / GIB, vllm_weights_gib=vllm_weights / GIB, server=server, problems=problems,
    )


def _status(peak: float, capacity: float) -> str:
    if peak > capacity:
        return "does_not_fit"
    return "tight" if capacity - peak < TIGHT_FRACTION * capacity else "fits"


# --------------------------------------------------------------------------- rollout speed
def estimate_speed(arch: Architecture, params: ParamCount, s: RunSettings, target: _Target, bd: _Breakdown) -> RolloutSpeed:
    gpu = target.gpu
    bw = (gpu.sustained_bandwidth_gbs if gpu else 1000.0) * 1e9
    tflops = (gpu.bf16_tflops if gpu else 100.0) * 1e12
    engine = "vllm" if s.use_vllm else "transformers"
    S, C = s.seq_len, s.max_completion_length
    tp = s.vllm_tensor_parallel_size if s.use_vllm else 1
    if s.use_vllm and s.vllm_mode == "server":  # one server generates for every training GPU
        seqs = s.per_device_train_batch_size * bd.training_gpus * s.spg
    else:  # each GPU (or each tensor-parallel group of colocated vLLM) generates its own share
        seqs = s.per_device_train_batch_size * s.spg * tp
    kv_token = 2 * arch.num_hidden_layers * arch.kv_dim * 2
    if s.use_vllm:
        conc = max(1, min(seqs, int(bd.vllm_kv_gib * GIB * tp / (S * kv_token)))) if bd.vllm_kv_gib > 0 else 1
    else:
        conc = seqs
    waves = math.ceil(seqs / conc)
    # bytes read per decode step: the weights touched (MoE: the experts some token in the batch routes to) + the KV
    if arch.is_moe:
        frac = 1 - (1 - arch.num_experts_per_tok / arch.num_experts) ** conc
        touched = params.total - params.experts * (1 - frac)
    else:
        touched = params.active
    weight_bytes = touched * (NF4_BYTES if (s.finetune == "qlora" and not s.use_vllm) else 2) / tp
    kv_bytes = conc * (s.prompt_length + C / 2) * kv_token
    efficiency = 1.0 if s.use_vllm else 0.5  # HF generate: no paged attention, no CUDA graphs
    bw_time = (weight_bytes + kv_bytes / tp) / (bw * efficiency)  # each GPU reads its shard at once
    compute_time = 2 * params.active * conc / (tflops * tp * 0.5)
    overhead = 0.0005 if s.use_vllm else arch.num_hidden_layers * 0.0002  # launch overhead per step
    step = max(bw_time, compute_time) + overhead
    prefill = 2 * params.active * seqs * s.prompt_length / (tflops * tp * 0.4)
    rollout_s = waves * C * step + prefill
    tokens_per_s = seqs * C / rollout_s if rollout_s > 0 else 0.0
    # training: forward + backward (+ recompute) on every micro-step, ~35% of peak bf16 FLOPs
    flops_per_token = (4 if s.peft else 6) * params.active + (2 * params.active if s.gradient_checkpointing else 0)
    if s.beta != 0:
        flops_per_token += 2 * params.active
    if s.num_iterations > 1 or s.spg > s.gradient_accumulation_steps:
        flops_per_token += 2 * params.active  # old log-probs
    train_tokens = s.per_device_train_batch_size * S * s.gradient_accumulation_steps
    train_s = train_tokens * flops_per_token / (tflops * 0.35)
    step_s = rollout_s * (s.gradient_accumulation_steps / s.spg) + train_s
    total_hours = step_s * s.max_steps / 3600 if s.max_steps else None
    share = rollout_s / step_s if step_s else 0
    if step_s > 600:
        verdict = f"slow: {step_s/60:.0f} min per step"
    elif step_s > 120:
        verdict = f"workable: {step_s/60:.1f} min per step"
    else:
        verdict = f"fast enough: {step_s:.0f} s per step"
    if total_hours is not None:
        verdict += f", {total_hours:.1f} h for {s.max_steps} steps"
    verdict += f"; generation is {share:.0%} of the step"
    if engine == "transformers" and share > 0.5:
        verdict += " (use_vllm=true would cut it several-fold)"
    if gpu and gpu.name == "DGX Spark":
        verdict += "; planned at 186 GB/s sustained, not the 273 GB/s spec"
    return RolloutSpeed(
        engine=engine, bandwidth_gbs=bw / 1e9, sequences_per_round=seqs, concurrent_sequences=conc,
        decode_step_ms=round(step * 1000, 3), rollout_tokens_per_s=round(tokens_per_s, 1),
        rollout_s_per_step=round(rollout_s, 2), train_s_per_step=round(train_s, 2), step_s=round(step_s, 2),
        total_hours=round(total_hours, 2) if total_hours is not None else None, verdict=verdict,
    )


# --------------------------------------------------------------------------- levers
# How much a lever changes the run (speed, quality, setup). The recommended set is the one of least total cost
# that fits: three free switches beat QLoRA. Ties go to fewer levers, then to the lower peak.
_LEVER_COST = {
    "bf16_weights": 1, "vllm_sleep_mode": 1, "adamw_8bit": 1, "chunked_loss": 1, "right_size_vllm_memory": 1,
    "gradient_checkpointing": 2, "vllm_tensor_parallel": 2, "smaller_micro_batch": 2, "beta_zero": 3, "zero3": 3, "vllm_server_mode": 3,
    "lora": 5, "shorter_completions": 6, "qlora": 7,
}


def candidate_levers(arch: Architecture, params: ParamCount, s: RunSettings, target: _Target, bd: _Breakdown) -> list[tuple[str, str, dict]]:
    out: list[tuple[str, str, dict]] = []
    colocate = s.use_vllm and s.vllm_mode == "colocate"
    if colocate and not s.vllm_enable_sleep_mode:
        out.append(("vllm_sleep_mode", "vLLM releases its weights and KV cache while the policy trains "
                    "(a few seconds per step to wake up).", {"vllm_enable_sleep_mode": True}))
    if colocate:
        # just enough vLLM memory for its weights and this run's KV cache: less when it hoards, more when its
        # weights do not even fit its share
        util = _just_enough_vllm(arch, params, s, target.capacity_gib, s.vllm_tensor_parallel_size)
        if abs(util - s.vllm_gpu_memory_utilization) >= 0.02:
            out.append(("right_size_vllm_memory", f"Give vLLM {util:.2f} of each GPU (now "
                        f"{s.vllm_gpu_memory_utilization:g}): its weights, runtime and one generation round's KV "
                        "cache.", {"vllm_gpu_memory_utilization": util}))
        if bd.training_gpus >= 2 and s.vllm_tensor_parallel_size < bd.training_gpus:
            sizes = [t for t in (2, 4, 8, 16, 32, 64) if t > s.vllm_tensor_parallel_size and bd.training_gpus % t == 0]
            fitting = [t for t in sizes if params.total * 2 / t <= 0.25 * target.capacity_gib * GIB]
            if sizes:
                tp = fitting[0] if fitting else sizes[-1]
                util_tp = _just_enough_vllm(arch, params, s, target.capacity_gib, tp)
                out.append(("vllm_tensor_parallel", f"Shard the colocated vLLM over {tp} GPUs: each holds 1/{tp} of "
                            "its weights and KV cache.", {"vllm_tensor_parallel_size": tp,
                                                           "vllm_gpu_memory_utilization": util_tp}))
    if s.dtype == "float32" and not (target.gpu and not target.gpu.bf16):
        out.append(("bf16_weights", "Load the weights in bfloat16 (TRL loads float32 by default): halves weights, "
                    "gradients and optimizer state.", {"dtype": "bfloat16"}))
    if s.optim.lower() not in EIGHT_BIT_OPTIMS and not s.optim.lower().startswith(("sgd", "adafactor")):
        out.append(("adamw_8bit", "8-bit AdamW (bitsandbytes): optimizer state from 8 (or 16) to 2 bytes per "
                    "trained parameter; quality is on par.", {"optim": "adamw_8bit"}))
    if not s.gradient_checkpointing:
        out.append(("gradient_checkpointing", "Keep only layer inputs and recompute in backward (~30% slower "
                    "training step).", {"gradient_checkpointing": True}))
    if not (s.fused_logits or s.use_liger_kernel):
        out.append(("chunked_loss", "Liger's chunked GRPO loss: never materialize batch x length x vocab logits.",
                    {"use_liger_kernel": True}))
    if s.beta != 0 and not s.peft:
        out.append(("beta_zero", "beta=0 (TRL's default): no reference model in memory; no KL term.", {"beta": 0.0}))
    if s.finetune == "full":
        out.append(("lora", "LoRA r=16 on all linear layers: no full gradients or optimizer state, reference "
                    "by disabling adapters.", {"use_peft": True, "lora_r": 16, "lora_alpha": 32,
                                               "lora_target_modules": "all-linear"}))
    if s.finetune != "qlora":
        out.append(("qlora", "QLoRA: 4-bit NF4 base + LoRA r=16 (slower, slightly lossy base; vLLM cannot serve "
                    "the 4-bit policy directly).", {"use_peft": True, "load_in_4bit": True, "lora_r": 16,
                                                    "lora_alpha": 32, "lora_target_modules": "all-linear"}))
    if colocate and target.num_gpus >= 2:
        out.append(("vllm_server_mode", "Move vLLM to its own GPU (`trl vllm-serve`); the others train.",
                    {"vllm_mode": "server"}))
    if s.per_device_train_batch_size > 1 and s.per_device_train_batch_size % 2 == 0:
        patch = {"per_device_train_batch_size": s.per_device_train_batch_size // 2,
                 "gradient_accumulation_steps": s.gradient_accumulation_steps * 2}
        if s.steps_per_generation:
            patch["steps_per_generation"] = s.steps_per_generation * 2
        out.append(("smaller_micro_batch", "Half the completions per micro-step, twice the accumulation: same "
                    "effective batch, smaller activations.", patch))
    if s.max_completion_length >= 256:
        out.append(("shorter_completions", "Halve max_completion_length (changes the task: check truncation "
                    "first).", {"max_completion_length": s.max_completion_length // 2}))
    if target.num_gpus >= 2 and s.zero_stage != 3 and not s.fsdp:
        out.append(("zero3", "DeepSpeed ZeRO-3: shard weights, gradients and optimizer state over the GPUs.",
                    {"deepspeed": {"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"},
                                   "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}}))
    return out


def apply_patch(s: RunSettings, patch: dict[str, Any]) -> RunSettings:
    update: dict[str, Any] = {}
    for key, value in patch.items():
        if key == "use_peft":
            update["finetune"] = "qlora" if patch.get("load_in_4bit") else "lora"
        elif key == "deepspeed":
            update["zero_stage"] = _zero_stage(value)
        elif key in RunSettings.model_fields:
            update[key] = value
    return s.model_copy(update=update)


class _Validator:
    """Validates the run's config with a lever's patch merged, through the recipe validator.

    A lever is judged on the errors it adds: errors the run's config already has are reported once in the notes.
    """

    def __init__(self, cfg: dict[str, Any], rewards: list | None, target: _Target, enabled: bool):
        self.cfg, self.rewards, self.target, self.enabled = cfg, rewards, target, enabled
        self.core = None
        self.base_errors: set[str] = set()
        if not enabled:
            return
        self.core = validate_values
        self.base_errors = set(self._errors({}) or [])

    def _errors(self, patch: dict[str, Any]) -> list[str] | None:
        if self.core is None:
            return None
        gpu = self.target.gpu.name if self.target.gpu else "H100"
        try:
            result = self.core({**self.cfg, **patch}, gpu=gpu, num_gpus=self.target.num_gpus, reward_specs=self.rewards)
        except UserInputError as exc:
            return [str(exc)]
        return [f"{f.code}: {f.message}" for f in result.findings if f.severity == "error"]

    def check(self, patch: dict[str, Any]) -> Validation | None:
        if not self.enabled:
            return None
        errors = self._errors(patch)
        if errors is None:
            return Validation(valid=None, errors=["validator not available (mcp_server.recipe.validate)"])
        new = [e for e in errors if e not in self.base_errors]
        return Validation(valid=not new, errors=new)


def _default_rewards():
    return default_rewards()


def _base_config_for_validation(cfg: dict[str, Any], model: str, s: RunSettings) -> dict[str, Any]:
    """A config to validate levers against: the run's own config, or one built from the plan's settings."""
    if cfg:
        return dict(cfg)
    base = {
        "model_name_or_path": model, "output_dir": "checkpoints", "bf16": True,
        "per_device_train_batch_size": s.per_device_train_batch_size,
        "gradient_accumulation_steps": s.gradient_accumulation_steps, "num_generations": s.num_generations,
        "max_completion_length": s.max_completion_length, "beta": s.beta, "optim": s.optim,
        "gradient_checkpointing": s.gradient_checkpointing, "use_vllm": s.use_vllm,
    }
    if s.use_vllm:
        base.update(vllm_mode=s.vllm_mode, vllm_gpu_memory_utilization=s.vllm_gpu_memory_utilization,
                    vllm_enable_sleep_mode=s.vllm_enable_sleep_mode)
    if s.peft:
        base.update(use_peft=True, lora_r=s.lora_r, lora_target_modules=s.lora_target_modules)
        if s.finetune == "qlora":
            base["load_in_4bit"] = True
    return base


def rank_levers(arch, params, s, target, bd, validator: _Validator) -> tuple[list[Lever], LeverSet | None]:
    cands = candidate_levers(arch, params, s, target, bd)
    cap = target.capacity_gib
    levers: list[Lever] = []
    for name, desc, patch in cands:
        b = compute_breakdown(arch, params, apply_patch(s, patch), target)
        lever = Lever(name=name, description=desc, patch=patch, saves_gib=round(bd.peak - b.peak, 2),
                      peak_gib=round(b.peak, 2), fits_alone=b.peak <= cap and not b.problems)
        # keep what saves memory, and what repairs a broken layout (e.g. a vLLM share too small for its weights)
        if lever.saves_gib > 0.005 or len(b.problems) < len(bd.problems):
            levers.append(lever)
    levers.sort(key=lambda lv: -lv.saves_gib)

    # smallest set: fewest levers, then lowest cost, then lowest peak; prefer >=10% headroom, accept any fit
    best: tuple | None = None
    names = [lv.name for lv in levers]
    by_name = {lv.name: lv for lv in levers}
    for want_margin in (True, False):
        for k in range(1, min(len(names), 6) + 1):
            for combo in itertools.combinations(names, k):
                if "lora" in combo and "qlora" in combo:
                    continue
                if "vllm_sleep_mode" in combo and "vllm_server_mode" in combo:
                    continue
                vllm_layout = {"right_size_vllm_memory", "vllm_tensor_parallel", "vllm_server_mode"}
                if len(vllm_layout.intersection(combo)) > 1:
                    continue
                patch: dict[str, Any] = {}
                for n in combo:
                    patch.update(by_name[n].patch)
                b = compute_breakdown(arch, params, apply_patch(s, patch), target)
                ok = b.peak <= cap * (1 - TIGHT_FRACTION) if want_margin else b.peak <= cap
                if ok and not b.problems:
                    key = (sum(_LEVER_COST[n] for n in combo), len(combo), b.peak)
                    if best is None or key < best[0]:
                        best = (key, combo, patch, b.peak)
        if best:
            break
    recommended = None
    if best:
        _, combo, patch, peak = best
        recommended = LeverSet(levers=list(combo), patch=patch, peak_gib=round(peak, 2),
                               headroom_gib=round(cap - peak, 2), validation=validator.check(patch))
    for lv in levers:
        lv.validation = validator.check(lv.patch)
    return levers, recommended


# --------------------------------------------------------------------------- size-class anchor
def _just_enough_vllm(arch: Architecture, params: ParamCount, s: RunSettings, capacity_gib: float, tp: int = 1) -> float:
    """vllm_gpu_memory_utilization that holds the weights + runtime + one round's KV cache + 1 GiB."""
    seqs = s.per_device_train_batch_size * s.spg
    kv_need = seqs * s.seq_len * 2 * arch.num_hidden_layers * arch.kv_dim * 2
    need = (params.total * 2 / tp + (VLLM_RUNTIME_GIB + 1) * GIB + kv_need / tp) / (capacity_gib * GIB)
    return min(0.95, math.ceil(need * 100) / 100)


def size_class_anchor(arch: Architecture, params: ParamCount, s: RunSettings) -> SizeClassAnchor:
    b = params.total / 1e9

    def peak_on(gpu_name: str, update: dict) -> tuple[float, float]:
        # the anchors' scenario: one GPU, colocated vLLM, bf16, the run's lengths, 8 completions per micro-step
        gpu = lookup_gpu(gpu_name)
        t = _Target(gpu_name=gpu.name, capacity_gib=gpu.memory_gib, num_gpus=1, gpu=gpu)
        run = s.model_copy(update={"use_vllm": True, "vllm_mode": "colocate", "zero_stage": 0, "fsdp": False,
                                   "vllm_tensor_parallel_size": 1, "dtype": "bfloat16", "mixed_precision": True,
                                   "per_device_train_batch_size": 8, "num_generations": 8,
                                   "gradient_accumulation_steps": 1, "steps_per_generation": None, "beta": 0.0,
                                   "gradient_checkpointing": True, "optim": "adamw_torch_fused", **update})
        run = run.model_copy(update={"vllm_gpu_memory_utilization": _just_enough_vllm(arch, params, run, gpu.memory_gib)})
        return compute_breakdown(arch, params, run, t).peak, gpu.memory_gib

    if b <= 3.5:
        all3 = {"finetune": "full", "vllm_enable_sleep_mode": True, "optim": "adamw_8bit", "gradient_checkpointing": True}
        p_all, cap = peak_on("RTX 4090", all3)
        drops = {name: peak_on("RTX 4090", {**all3, **undo})[0] for name, undo in (
            ("sleep mode", {"vllm_enable_sleep_mode": False}), ("8-bit AdamW", {"optim": "adamw_torch_fused"}),
            ("gradient checkpointing", {"gradient_checkpointing": False}))}
        needed = [n for n, p in drops.items() if p > cap]
        check = (f"this model, full GRPO with colocated vLLM on a 24 GB GPU ({cap:.1f} GiB): {p_all:.1f} GiB with all "
                 "three; without " + ", ".join(f"{n} {p:.1f}" for n, p in drops.items())
                 + f"; needed here: {', '.join(needed) or 'none of them'}")
        return SizeClassAnchor(size_class="small", statement="A small model (<= ~3B) fits a 24 GB GPU only with "
                               "vLLM sleep mode + 8-bit AdamW + gradient checkpointing together.",
                               planner_check=check, consistent=p_all <= cap)
    if 25 <= b <= 45:
        lora = {"finetune": "lora", "vllm_enable_sleep_mode": True}
        (p_h100, c_h100), (p_h200, c_h200) = peak_on("H100", lora), peak_on("H200", lora)
        return SizeClassAnchor(size_class="large_32b", statement="~32B needs an H200-class GPU (141 GB) for "
                               "single-GPU GRPO.",
                               planner_check=f"LoRA + colocated vLLM with sleep mode: H100 {p_h100:.1f} of "
                               f"{c_h100:.1f} GiB, H200 {p_h200:.1f} of {c_h200:.1f} GiB",
                               consistent=p_h100 > c_h100 and p_h200 <= c_h200)
    if 60 <= b <= 80:
        qlora = {"finetune": "qlora", "vllm_enable_sleep_mode": True, "gradient_checkpointing": True}
        (p_h200, c_h200), (p_b200, c_b200) = peak_on("H200", qlora), peak_on("B200", qlora)
        return SizeClassAnchor(size_class="xlarge_70b", statement="~70B needs a B200-class GPU (180 GB) for "
                               "single-GPU GRPO, or several GPUs.",
                               planner_check=f"QLoRA + colocated bf16 vLLM with sleep mode: H200 {p_h200:.1f} of "
                               f"{c_h200:.1f} GiB, B200 {p_b200:.1f} of {c_b200:.1f} GiB",
                               consistent=p_h200 > c_h200 and p_b200 <= c_b200)
    size = "medium" if b < 25 else ("huge" if b > 80 else "large_32b")
    return SizeClassAnchor(size_class=size, statement="No anchor for this size; between the ~3B, ~32B and ~70B "
                           "anchors the plan's own arithmetic decides.", planner_check="n/a", consistent=None)


# --------------------------------------------------------------------------- entry point
def plan_memory(request: MemoryPlanRequest) -> MemoryPlan:
    cfg, recipe = _read_config(request)
    recipe_rewards = recipe.get("_rewards")
    model, arch = resolve_architecture(request, cfg)
    target = plan_target(request, recipe, cfg)
    s = resolve_settings(request, cfg, target)
    if s.finetune == "full" and recipe.get("finetune") in ("lora", "qlora") and request.finetune is None:
        s = s.model_copy(update={"finetune": recipe["finetune"]})
    params = count_params(arch)
    _check_numbers(s, arch, target)
    bd = compute_breakdown(arch, params, s, target)
    cap = target.capacity_gib
    status = _status(bd.peak, cap) if not bd.problems else "does_not_fit"
    levers: list[Lever] = []
    recommended = None
    notes = list(bd.problems)
    if status != "fits":
        rewards = recipe_rewards if cfg else [r.model_dump() for r in _default_rewards()]
        validator = _Validator(_base_config_for_validation(cfg, model, s), rewards, target, request.validate_levers)
        levers, recommended = rank_levers(arch, params, s, target, bd, validator)
        if validator.base_errors:
            notes.append("the run's config is already invalid (" + "; ".join(sorted(validator.base_errors))
                         + "); levers are judged on the errors they add")
    notes += _notes(arch, params, s, target, cfg, request)
    if status != "fits" and recommended is None:
        notes.append("No combination of levers fits this GPU: use a bigger GPU class, more GPUs, or a smaller model.")
    breakdown = [MemoryComponent(name=k, gib=round(v, 2), note=bd.notes.get(k, "")) for k, v in bd.components.items()
                 if v > 0.005 or k in ("weights", "framework_overhead")]
    return MemoryPlan(
        model=model, architecture=arch, params=params, trainable_params=bd.trainable, gpu=target.gpu_name,
        capacity_gib=round(cap, 2), num_gpus=target.num_gpus, training_gpus=bd.training_gpus,
        run=s.model_dump(), breakdown=breakdown, peak_phase=bd.peak_phase,
        training_peak_gib=round(bd.training_peak, 2), generation_peak_gib=round(bd.generation_peak, 2),
        peak_gib=round(bd.peak, 2), headroom_gib=round(cap - bd.peak, 2), status=status,
        fits=bd.peak <= cap and not bd.problems, server=bd.server, levers=levers, recommended=recommended,
        anchor=size_class_anchor(arch, params, s), speed=estimate_speed(arch, params, s, target, bd), notes=notes,
    )


def _check_numbers(s: RunSettings, arch: Architecture, target: _Target) -> None:
    global_batch = s.per_device_train_batch_size * max(target.num_gpus - (s.vllm_server_gpus if s.use_vllm and s.vllm_mode == "server" else 0), 1) * s.spg
    if s.num_generations < 2:
        raise UserInputError("num_generations", "GRPO needs at least 2 completions per prompt")
    if global_batch % s.num_generations:
        raise UserInputError(
            "num_generations",
            f"the generation batch (per_device_train_batch_size x training GPUs x steps_per_generation = "
            f"{global_batch}) must be divisible by num_generations={s.num_generations}")
    if arch.max_position_embeddings and s.seq_len > arch.max_position_embeddings:
        raise UserInputError(
            "max_completion_length",
            f"prompt {s.prompt_length} + completion {s.max_completion_length} tokens exceeds the model's "
            f"{arch.max_position_embeddings}-token context")


def _notes(arch, params, s: RunSettings, target: _Target, cfg, request) -> list[str]:
    notes = []
    if not cfg:
        notes.append("no config given: the recipe's defaults (vLLM, 8 completions per device and per prompt, "
                      "4 accumulation steps, beta 0.01, bf16 where the GPU has it) under the fields you set")
    if not cfg and request.prompt_length is None:
        notes.append(f"prompt length assumed {s.prompt_length} tokens (TRL does not truncate prompts; pass prompt_length)")
    if s.dtype == "float32" and (not cfg.get("dtype") and request.dtype is None):
        notes.append("weights planned in float32: TRL loads in float32 unless dtype is set (dtype: bfloat16 halves weights, gradients and optimizer state)")
    if target.gpu and not target.gpu.bf16 and s.dtype == "bfloat16":
        notes.append(f"{target.gpu.name} has no bf16: use float16 or float32")
    if target.gpu and target.gpu.unified_memory:
        notes.append("unified memory: the OS and CPU processes share the same pool; keep extra headroom")
    if arch.is_moe and s.finetune == "qlora":
        notes.append("MoE experts are fused 3-D tensors in transformers 5: bitsandbytes leaves them unquantized")
    if s.finetune == "qlora" and s.use_vllm:
        notes.append("vLLM serves the merged bf16 policy: its weights are planned at 2 bytes per parameter")
    if arch.extra_params:
        notes.append(f"{arch.extra_params/1e6:.0f}M parameters outside the text decoder (vision tower) are loaded and counted")
    if "paged" in s.optim:
        notes.append("paged optimizer: under pressure its state moves to CPU, so the real peak can be lower than planned")
    return notes
