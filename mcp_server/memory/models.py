"""Request and result of plan_memory. Every field has a description: they become the MCP tool schema."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from mcp_server.inputs import Name, PathText, Request

from mcp_server.memory.params import Architecture, ParamCount

Status = Literal["fits", "tight", "does_not_fit"]


class MemoryPlanRequest(Request):
    model: PathText | None = Field(
        default=None,
        description="The policy model: a catalog name (e.g. 'Qwen/Qwen2.5-7B-Instruct' or 'qwen3-8b'), a local model "
        "directory or config.json, 'tiny' or 'smollm2-135m'. Default: model_name_or_path of the config.",
    )
    architecture: Architecture | None = Field(
        default=None, description="Explicit architecture numbers, for a model that is neither local nor in the catalog."
    )
    config_path: PathText | None = Field(
        default=None,
        description="A GRPO config YAML (train/config.yaml from emit_grpo_config) or a run directory; the run's "
        "settings are read from it (and gpu/num_gpus from train/request.json beside it).",
    )
    config: dict[str, Any] | None = Field(default=None, description="The config as a dict of GRPOConfig/ModelConfig "
                                                                    "fields.")
    gpu: Name | None = Field(default=None, description="Target GPU type (H100, A100-40GB, RTX 4090, DGX Spark, ...).")
    gpu_memory_gib: float | None = Field(
        default=None, gt=0, le=4096, description="Raw GPU memory size in GiB, for a GPU not in the catalog (overrides "
                                                 "gpu)."
    )
    num_gpus: int | None = Field(default=None, ge=1, le=4096, description="GPUs on the target (all nodes); default 1.")
    finetune: Literal["full", "lora", "qlora"] | None = Field(
        default=None, description="full, lora or qlora (4-bit base + LoRA); default from the config (use_peft, "
                                  "load_in_4bit), else full."
    )
    lora_r: int | None = Field(default=None, ge=1, le=4096, description="LoRA rank; default 16.")
    lora_target_modules: str | list[str] | None = Field(default=None, description="LoRA targets; default 'all-linear'.")
    lora_dropout: float | None = Field(default=None, ge=0, lt=1, description="LoRA dropout (TRL default 0.05); above 0 "
                                                                             "it copies each targeted layer's input.")
    optim: Name | None = Field(
        default=None,
        description="HF optimizer name: adamw_torch_fused (TRL default), adamw_torch, adamw_8bit, paged_adamw_8bit, "
        "paged_adamw_32bit, adafactor, sgd.",
    )
    dtype: Literal["bfloat16", "float16", "float32"] | None = Field(
        default=None, description="Dtype the weights are loaded in (ModelConfig dtype); TRL's default is float32."
    )
    gradient_checkpointing: bool | None = Field(default=None, description="Recompute activations in backward (TRL "
                                                                          "default: true).")
    beta: float | None = Field(default=None, ge=0, description="KL coefficient; a reference model is held only when "
                                                               "beta != 0 (TRL default 0).")
    num_generations: int | None = Field(default=None, ge=1, le=4096, description="Completions per prompt (G).")
    per_device_train_batch_size: int | None = Field(default=None, ge=1, le=65536, description="Completions per GPU per "
                                                                                              "micro-step.")
    gradient_accumulation_steps: int | None = Field(default=None, ge=1, le=65536, description="Micro-steps per "
                                                                                              "optimizer step.")
    steps_per_generation: int | None = Field(default=None, ge=1, le=65536, description="Micro-steps one generation "
                                                                                       "round feeds; default "
                                                                                       "gradient_accumulation_steps.")
    prompt_length: int | None = Field(default=None, ge=1, le=2_000_000, description="Longest prompt in tokens; default "
                                                                                    "the config's max_prompt_length, "
                                                                                    "else 512.")
    max_completion_length: int | None = Field(default=None, ge=1, le=2_000_000, description="Longest completion in "
                                                                                            "tokens (TRL default 512).")
    use_vllm: bool | None = Field(default=None, description="Generate with vLLM (default false, as in TRL).")
    vllm_mode: Literal["colocate", "server"] | None = Field(default=None, description="vLLM inside the trainer "
                                                                                      "(colocate) or on other GPUs "
                                                                                      "(server).")
    vllm_gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1, description="Fraction of each GPU vLLM "
                                                                                            "takes (TRL default 0.3).")
    vllm_enable_sleep_mode: bool | None = Field(default=None, description="Colocate: vLLM releases weights and KV "
                                                                          "cache while the policy trains.")
    vllm_tensor_parallel_size: int | None = Field(default=None, ge=1, le=64, description="vLLM tensor parallel size.")
    vllm_server_gpus: int | None = Field(default=None, ge=1, le=4096, description="Server mode: GPUs given to `trl "
                                                                                  "vllm-serve` (default 1); the rest "
                                                                                  "train.")
    vllm_server_gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1,
        description="Server mode: the --gpu_memory_utilization `trl vllm-serve` is started with (its default 0.9; the "
        "config's vllm_gpu_memory_utilization is for colocate mode only).")
    strategy: Literal["auto", "single", "ddp", "zero2", "zero3", "fsdp"] | None = Field(
        default=None, description="Multi-GPU strategy the launcher will use; auto (default): the config's "
                                  "deepspeed/fsdp, "
        "else the plan picks the sharding that fits (ddp for LoRA, ZeRO-2 for a full fine-tune, ZeRO-3 when that does "
        "not fit).")
    trl_version: Name | None = Field(
        default=None, description="The TRL release the run uses, when it is not the installed one (e.g. '0.17.0'): its "
        "own defaults (beta, gradient checkpointing, prompt truncation, full logits) are planned.")

    @field_validator("trl_version")
    @classmethod
    def _release_number(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"v?\d+\.\d+(\.\d+)?([.+-]?[A-Za-z0-9.]+)?", value.strip()):
            raise ValueError(f"{value!r} is not a TRL release number; give one like '0.17.0' or '1.16.0'")
        return value.strip() if value else value
    zero_stage: Literal[0, 1, 2, 3] | None = Field(default=None, description="DeepSpeed ZeRO stage (0: none); default "
                                                                             "from the config's deepspeed.")
    fsdp: bool | None = Field(default=None, description="FSDP full sharding (default from the config's fsdp).")
    use_liger_kernel: bool | None = Field(default=None, description="Liger kernels (chunked loss: no full logits "
                                                                    "tensor).")
    fused_logits: bool | None = Field(
        default=None,
        description="Whether the training TRL computes log-probs in tiles without the full batch x length x vocab "
                    "logits "
        "(recent TRL); default: detected from the installed TRL.",
    )
    attn_implementation: Name | None = Field(default=None, description="eager adds the length^2 attention scores; "
                                                                       "sdpa/flash do not.")
    max_steps: int | None = Field(default=None, ge=1, description="Training steps, for the total time estimate.")
    validate_levers: bool = Field(
        default=True, description="Validate each lever's config change with validate_grpo_config (needs the recipe "
                                  "module)."
    )


class MemoryComponent(BaseModel):
    name: str = Field(description="weights, gradients, optimizer_state, reference_model, activations, logits, "
                      "autocast_weight_copies, gradient_temporary, generation_kv_cache, dynamic_sampling_rounds, "
                      "gathered_for_weight_sync, "
                      "vllm_weights, vllm_kv_cache or framework_overhead.")
    gib: float = Field(description="GiB on each training GPU at the peak phase.")
    note: str = Field(default="", description="How it was computed.")


class ServerGPUPlan(BaseModel):
    gpus: int = Field(description="GPUs running `trl vllm-serve`.")
    weights_gib: float = Field(description="vLLM weights per server GPU.")
    kv_cache_gib: float = Field(description="KV cache vLLM gets per server GPU.")
    fits: bool = Field(description="Whether the weights fit in vllm_gpu_memory_utilization of a server GPU.")


class VllmServerLaunch(BaseModel):
    gpus: int = Field(description="GPUs `trl vllm-serve` runs on (the last ones; the first ones train).")
    tensor_parallel_size: int = Field(description="--tensor_parallel_size the server is started with.")
    data_parallel_size: int = Field(description="--data_parallel_size the server is started with.")
    gpu_memory_utilization: float = Field(description="--gpu_memory_utilization the server is started with.")


class LaunchLayout(BaseModel):
    strategy: Literal["single", "ddp", "zero1", "zero2", "zero3", "fsdp"] = Field(
        description="How launch_training runs the trainer: one process, or accelerate with DDP, DeepSpeed ZeRO or FSDP."
    )
    training_processes: int = Field(description="Training processes (GPUs that train).")
    zero_stage: int = Field(description="DeepSpeed ZeRO stage of that strategy (0: none).")
    offload_optimizer: bool = Field(default=False, description="DeepSpeed offloads the optimizer state to CPU.")
    vllm_server: VllmServerLaunch | None = Field(default=None, description="The vLLM server, in server mode.")
    fits: bool = Field(description="Whether the run fits with this layout; launch_training refuses when not.")
    reason: str = Field(description="Why this layout: what fits, or why nothing does.")


class Validation(BaseModel):
    valid: bool | None = Field(description="validate_grpo_config's verdict on the run config with this change; null "
                                           "when not checked.")
    errors: list[str] = Field(default_factory=list, description="Error findings, as 'code: message'.")


class Lever(BaseModel):
    name: str = Field(description="Stable lever id: bf16_weights, vllm_sleep_mode, adamw_8bit, gradient_checkpointing, "
                                  "lora, qlora, "
                      "beta_zero, vllm_server_mode, right_size_vllm_memory, vllm_tensor_parallel, shorter_completions, "
                      "smaller_micro_batch, "
                      "chunked_loss, zero3.")
    description: str = Field(description="What it changes and what it costs.")
    patch: dict[str, Any] = Field(description="Config fields to set (merge into the run's config).")
    saves_gib: float = Field(description="Peak GiB saved on this run when applied alone.")
    peak_gib: float = Field(description="Peak GiB with this lever alone.")
    fits_alone: bool = Field(description="Whether this lever alone makes the run fit.")
    validation: Validation | None = Field(default=None, description="The config with this change, validated.")


class LeverSet(BaseModel):
    levers: list[str] = Field(description="The smallest set of levers that fits: least total change to the run (each "
                              "lever weighted by its cost in speed, quality or setup), then fewest levers.")
    patch: dict[str, Any] = Field(description="All their config changes merged.")
    peak_gib: float = Field(description="Peak GiB per GPU with the set applied.")
    headroom_gib: float = Field(description="Capacity minus peak with the set applied.")
    validation: Validation | None = Field(default=None, description="The config with the merged change, validated.")


class SizeClassAnchor(BaseModel):
    size_class: Literal["small", "medium", "large_32b", "xlarge_70b", "huge"] = Field(description="Size class by total "
                                                                                                  "parameters.")
    statement: str = Field(description="The rule of thumb for this class (from the grpo-memory-planning skill).")
    planner_check: str = Field(description="What the planner computes for the same scenario.")
    consistent: bool | None = Field(description="Whether the planner agrees with the anchor; null when no anchor "
                                                "applies.")


class RolloutSpeed(BaseModel):
    engine: Literal["vllm", "transformers"] = Field(description="What generates the completions.")
    bandwidth_gbs: float = Field(description="Sustained memory bandwidth planned with (GB/s per GPU).")
    sequences_per_round: int = Field(description="Completions one generation round produces per generating GPU (or "
                                                 "server).")
    concurrent_sequences: int = Field(description="Completions decoded at once (bounded by the KV cache).")
    decode_step_ms: float = Field(description="Time of one decode step of the batch (bandwidth- or compute-bound).")
    rollout_tokens_per_s: float = Field(description="Completion tokens per second per generating GPU/server.")
    rollout_s_per_step: float = Field(description="Seconds of generation per optimizer step (completions at full "
                                                  "length).")
    train_s_per_step: float = Field(description="Seconds of forward/backward per optimizer step.")
    step_s: float = Field(description="Seconds per optimizer step (generation + training).")
    total_hours: float | None = Field(default=None, description="Hours for max_steps steps, when max_steps is known.")
    dynamic_sampling_rounds: int = Field(default=0, description="DAPO's dynamic sampling: the most extra generation "
                                         "rounds per generation batch (train/dynamic_sampling.json; 0: off).")
    step_s_at_cap: float | None = Field(default=None, description="Seconds per optimizer step when every generation "
                                        "batch takes every extra round (dynamic sampling on; step_s is one round).")
    total_hours_at_cap: float | None = Field(default=None, description="Hours for max_steps steps at step_s_at_cap.")
    verdict: str = Field(description="Whether the run is fast enough to be worth it, in one sentence.")


class MemoryPlan(BaseModel):
    model: str = Field(description="The model planned for (hub id, path or 'explicit').")
    architecture: Architecture = Field(description="Its architecture numbers.")
    params: ParamCount = Field(description="Parameter counts computed from the architecture.")
    trainable_params: int = Field(description="Parameters the optimizer updates (all for full, the adapters for LoRA).")
    gpu: str = Field(description="GPU type planned for.")
    capacity_gib: float = Field(description="Memory per GPU the run must fit in (GiB).")
    num_gpus: int = Field(description="GPUs on the target.")
    training_gpus: int = Field(description="GPUs running the trainer (num_gpus minus vLLM server GPUs).")
    run: dict[str, Any] = Field(description="The run settings the plan used, after defaults and the config.")
    breakdown: list[MemoryComponent] = Field(description="Per-GPU GiB by component at the peak phase.")
    peak_phase: Literal["training", "generation"] = Field(description="Which phase sets the peak.")
    training_peak_gib: float = Field(description="Peak during forward/backward.")
    generation_peak_gib: float = Field(description="Peak during generation.")
    peak_gib: float = Field(description="The per-GPU peak (max of the phases).")
    headroom_gib: float = Field(description="capacity_gib - peak_gib (negative: does not fit).")
    status: Status = Field(description="fits (>= 10% headroom), tight (0-10%) or does_not_fit.")
    fits: bool = Field(description="peak_gib <= capacity_gib.")
    server: ServerGPUPlan | None = Field(default=None, description="The vLLM server GPUs, in server mode.")
    launch: LaunchLayout = Field(description="The layout launch_training uses for this run (strategy, ZeRO stage, "
                                 "vLLM server flags), planned so that it fits.")
    peak_allocated_gib: float = Field(description="The peak as torch.cuda.max_memory_allocated reports it.")
    peak_reserved_gib: float = Field(description="The peak as torch.cuda.max_memory_reserved reports it (+ the "
                                     "caching allocator's slack).")
    peak_nvidia_smi_gib: float = Field(description="The peak as nvidia-smi shows the process (+ CUDA context); "
                                       "equals peak_gib, what must fit the GPU.")
    assumptions: list[str] = Field(default_factory=list, description="The settings the plan assumed rather than "
                                   "read from the config: TRL's defaults and what the installed TRL does.")
    levers: list[Lever] = Field(default_factory=list, description="Applicable levers, most GiB saved first (when it "
                                                                  "does not fit or is tight).")
    recommended: LeverSet | None = Field(default=None, description="The smallest set of levers that fits (with 10% "
                                                                   "headroom when possible), when the run does not fit "
                                                                   "or is tight.")
    anchor: SizeClassAnchor = Field(description="The size-class rule of thumb as a cross-check.")
    speed: RolloutSpeed = Field(description="Rollout and step time estimate from the GPU's memory bandwidth.")
    notes: list[str] = Field(default_factory=list, description="Assumptions and warnings.")
