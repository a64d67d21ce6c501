"""Topic "rehearsal" (issue 44): the run rehearsed on a miniature (recipe.rehearsal), then what a CPU rehearsal
cannot show, judged from TRL's, transformers' and vLLM's code for the target: the generation engine's own use of
generation_kwargs, settings that waste the run without an exception, and GPU-only start-up failures.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp_server.config import FIELD
from mcp_server.config.fields import ENGINES, engine_name
from mcp_server.recipe.context import Context, Rule, finding
from mcp_server.recipe.models import Finding

_LENGTH = FIELD.max_completion_length


def rule_rehearsal(ctx: Context) -> list[Finding]:
    """What the rehearsal found, or why it did not run (an info finding naming what was not checked)."""
    rehearsal = ctx.rehearsal
    if rehearsal.skipped:
        return [finding("rehearsal_skipped", "config", "info",
                        f"the run was not rehearsed on a miniature: {rehearsal.skipped}; crashes that only appear "
                        "once the model, data and rewards load (a missing column, a scheduler's kwargs, a reward's "
                        "signature) were not checked",
                        "validate on the machine that holds the data set (and the model's config.json)")]
    out = list(rehearsal.findings)
    if not out:
        aside = f"; set aside: {', '.join(rehearsal.set_aside)}" if rehearsal.set_aside else ""
        out.append(finding("rehearsed", "config", "info",
                           f"rehearsed: built as train/train.py builds it and trained one step on a miniature of its "
                           f"model in {rehearsal.seconds} s{aside}"))
    return out


def _engine(ctx: Context) -> str:
    """vllm_colocate | vllm_server | transformers: who reads generation_kwargs (trl/generation/vllm_generation.py,
    GRPOTrainer.__init__)."""
    if not ctx.config.use_vllm:
        return "transformers"
    return "vllm_server" if ctx.config.vllm_mode == "server" else "vllm_colocate"


def rule_generation_kwargs(ctx: Context) -> list[Finding]:
    """TRL applies generation_kwargs last: vLLM colocate builds SamplingParams(**{"n": 1, ..., "max_tokens": L}) then
    `generation_kwargs.update(self.generation_kwargs)` (vllm_generation.py); transformers' path updates its
    GenerationConfig the same way (GRPOTrainer.__init__). So a key there overrides the field TRL set from the config;
    a key of the other engine is refused by vLLM's SamplingParams or ignored by transformers' GenerationConfig."""
    kwargs = ctx.config.generation_kwargs
    if not isinstance(kwargs, dict) or not kwargs:
        return []
    engine = _engine(ctx)
    ours = "vllm" if engine.startswith("vllm") else "transformers"
    other = "transformers" if ours == "vllm" else "vllm"
    out = []
    for key in kwargs:
        where = f"generation_kwargs.{key}"
        field = next((f for f in ENGINES if engine_name(f, ours) == key), None)
        foreign = next((f for f in ENGINES if engine_name(f, other) == key), None)
        if key == "seed" and engine == "vllm_colocate":
            out.append(finding(
                "generation_seed_colocate", FIELD.generation_kwargs, "error",
                f"{where} with vLLM colocate: TRL asks vLLM for each of a group's {ctx.config.num_generations} "
                "completions separately (n=1, the prompt repeated), so one seed makes them identical: no reward "
                "spread, no advantage, nothing trains",
                "drop seed from generation_kwargs (the run's seed field seeds training)"))
        elif field == "num_generations" and not (engine == "vllm_server" and kwargs[key] == ctx.config.num_generations):
            # the server is asked for n = num_generations (vllm_generation.py): the same n changes nothing
            out.append(finding(
                "generation_count_overridden", FIELD.generation_kwargs, "error",
                f"{where} overrides num_generations: TRL expects exactly num_generations completions per prompt and "
                "fails (or mis-groups them) with another count",
                "drop it from generation_kwargs; set num_generations"))
        elif field == _LENGTH:
            out.append(finding(
                "generation_length_overridden", FIELD.generation_kwargs, "warning",
                f"{where}={kwargs[key]} overrides max_completion_length ({ctx.config.max_completion_length}): the "
                "engine generates to this length, while the memory plan, the truncation mask and DAPO's length "
                "shaping use max_completion_length",
                "set the length with max_completion_length only"))
        elif field == "temperature" or (field == "repetition_penalty" and engine.startswith("vllm")
                                        and ctx.config.vllm_importance_sampling_correction):
            # temperature: TRL's loss divides the logits by args.temperature; a penalty matters where vLLM's
            # processed log-probs feed the importance-sampling correction
            out.append(finding(
                "generation_sampling_overridden", FIELD.generation_kwargs, "warning",
                f"{where}={kwargs[key]} overrides {field} ({getattr(ctx.config, field)}) for sampling only: TRL's loss "
                f"computes log-probs with the config's {field}, so the sampler and the trainer disagree and the "
                "importance ratios are off from the first step",
                f"set {field} itself, and drop it from generation_kwargs"))
        elif foreign is not None and field is None:
            refused = ours == "vllm"
            out.append(finding(
                "generation_kwarg_other_engine", FIELD.generation_kwargs, "error" if refused else "warning",
                f"{where} is {other}'s name for {foreign}, not {ours}'s: "
                + ("vLLM's SamplingParams refuses an unknown keyword when the first batch is generated" if refused
                   else "transformers' GenerationConfig keeps it unused, so it does nothing"),
                f"set {foreign} itself" + (f" (or {ours}'s name, {engine_name(foreign, ours)})"
                                            if engine_name(foreign, ours) else "")))
    return out


def rule_lora_fields_without_peft(ctx: Context) -> list[Finding]:
    """trl/trainer/utils.py get_peft_config: `if model_args.use_peft is False: return None`: LoRA fields then do
    nothing, and the run is a full fine-tune."""
    given = [k for k in ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save")
             if k in ctx.values]
    if not given or ctx.config.use_peft or ctx.config.load_in_4bit or ctx.config.load_in_8bit:
        return []
    return [finding("lora_fields_without_peft", FIELD.use_peft, "warning",
                    f"{', '.join(given)} set but use_peft is false: TRL builds no adapter (get_peft_config returns "
                    "None), so this is a full fine-tune and the LoRA fields do nothing",
                    "set use_peft: true for LoRA, or drop the lora_* fields")]


def rule_warmup_under_constant(ctx: Context) -> list[Finding]:
    """transformers' get_scheduler: `if name == SchedulerType.CONSTANT: return schedule_func(optimizer)`: the
    constant schedule takes no warmup."""
    warmup = ctx.config.warmup_steps
    if ctx.config.lr_scheduler_type != "constant" or not isinstance(warmup, (int, float)) or warmup <= 0:
        return []
    return [finding("warmup_ignored", FIELD.lr_scheduler_type, "warning",
                    f"warmup_steps={warmup} with lr_scheduler_type: constant: transformers' constant schedule takes "
                    "no warmup (get_scheduler returns it before reading warmup), so the run starts at full rate",
                    "use lr_scheduler_type: constant_with_warmup, or drop warmup_steps")]


def rule_eval_cadence(ctx: Context) -> list[Finding]:
    """transformers' TrainingArguments.__post_init__: eval_strategy steps without eval_steps takes
    `self.eval_steps = self.logging_steps`."""
    if ctx.config.eval_strategy != "steps" or ctx.given.eval_steps:
        return []
    return [finding("eval_steps_from_logging", FIELD.eval_steps, "warning",
                    f"eval_strategy: steps without eval_steps: transformers evaluates every logging_steps "
                    f"({ctx.config.logging_steps}), which for GRPO means generating for the eval set that often",
                    "set eval_steps (e.g. the save cadence)")]


def rule_logging_epoch(ctx: Context) -> list[Finding]:
    """transformers' DefaultFlowCallback logs at on_epoch_end under logging_strategy epoch: a run bounded by
    max_steps logs once, at its end, and the guard and diagnose_run see no step until then."""
    if ctx.config.logging_strategy != "epoch":
        return []
    return [finding("logging_once_per_epoch", FIELD.logging_strategy, "warning",
                    "logging_strategy: epoch writes metrics once an epoch: the live guard, training_status and "
                    "diagnose_run read logged steps, so a run of an epoch or less shows none until it ends",
                    "use logging_strategy: steps with logging_steps: 1 (GRPO's steps are long)")]


def rule_think_reward_without_thinking(ctx: Context) -> list[Finding]:
    """trl/rewards/format_rewards.py think_format_reward pays only a completion matching `^<think>...</think>`;
    Qwen3's template with enable_thinking false ends the prompt with an empty think block, so the completion never
    starts with one."""
    kwargs = ctx.config.chat_template_kwargs if isinstance(ctx.config.chat_template_kwargs, dict) else {}
    if kwargs.get("enable_thinking") is not False:
        return []
    names = [str(r) for r in (ctx.config.reward_funcs or [])] + [str(s.get("name")) for s in ctx.reward_specs or []
                                                                  if isinstance(s, dict)]
    think = [n for n in names if n.rsplit(".", 1)[-1] == "think_format_reward"]
    if not think:
        return []
    return [finding("reward_never_pays", FIELD.chat_template_kwargs, "warning",
                    "think_format_reward pays only completions that open with <think>, but chat_template_kwargs "
                    "turns thinking off: the template already closes an empty think block in the prompt, so this "
                    "reward is 0 for every completion",
                    "turn thinking on (enable_thinking: true), or drop think_format_reward")]


def _deepspeed_config(value, base_dir: Path | None) -> dict | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.endswith(".json"):
        path = Path(value) if Path(value).is_absolute() or base_dir is None else base_dir / value
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) else None
    return None


def rule_deepspeed_batch(ctx: Context) -> list[Finding]:
    """transformers' HfTrainerDeepSpeedConfig.trainer_config_finalize refuses a DeepSpeed config whose batch values
    are not "auto" and differ from TrainingArguments' ("Please correct the following DeepSpeed config values that
    mismatch TrainingArguments values")."""
    ds = _deepspeed_config(ctx.config.deepspeed, ctx.base_dir)
    if not ds:
        return []
    world = ctx.training_processes
    wanted = {"train_micro_batch_size_per_gpu": ctx.config.per_device_train_batch_size,
              "gradient_accumulation_steps": ctx.config.gradient_accumulation_steps}
    wanted["train_batch_size"] = (wanted["train_micro_batch_size_per_gpu"] * wanted["gradient_accumulation_steps"]
                                  * world)
    wrong = [f"{k}={ds[k]} (the config's is {v})" for k, v in wanted.items() if k in ds and ds[k] != "auto"
             and ds[k] != v]
    if not wrong:
        return []
    return [finding("deepspeed_batch_mismatch", FIELD.deepspeed, "error",
                    f"the DeepSpeed config's {', '.join(wrong)}: transformers refuses to start when these differ "
                    "from the training arguments (trainer_config_finalize)",
                    "set them to \"auto\" in the DeepSpeed config (transformers fills them in)")]


def rule_qlora_fsdp_storage(ctx: Context) -> list[Finding]:
    """accelerate's fsdp2_prepare_model: a 4-bit base under FSDP needs bnb_4bit_quant_storage a floating dtype
    (FSDP flattens parameters of one dtype; bitsandbytes stores uint8 by default)."""
    if not ctx.config.load_in_4bit or not (ctx.config.fsdp or ctx.config.fsdp_config):
        return []
    storage = str(ctx.config.bnb_4bit_quant_storage or "uint8")
    if storage in ("bfloat16", "float16", "float32"):
        return []
    return [finding("qlora_fsdp_storage", FIELD.bnb_4bit_quant_storage, "error",
                    f"load_in_4bit under FSDP with bnb_4bit_quant_storage {storage}: FSDP shards parameters of one "
                    "floating dtype, and accelerate refuses a uint8-stored 4-bit base",
                    "set bnb_4bit_quant_storage to the compute dtype (bfloat16)")]


# transformers' modeling_utils: flash_attention_2 needs compute capability >= 8.0; flash_attention_3 Hopper (9.0)
_KERNEL_CAPABILITY = {"flash_attention_2": 8.0, "flash_attention_3": 9.0}


def rule_attention_kernel(ctx: Context) -> list[Finding]:
    """An attention kernel the target GPU cannot run fails when the model loads on it."""
    kernel = str(ctx.config.attn_implementation or (ctx.config.model_init_kwargs or {}).get("attn_implementation")
                 or "")
    need = _KERNEL_CAPABILITY.get(kernel)
    if need is None or ctx.gpu is None:
        return []
    have = float(ctx.gpu.compute_capability)
    if have >= need:
        return []
    return [finding("attention_kernel_unsupported", FIELD.attn_implementation, "error",
                    f"attn_implementation {kernel} needs compute capability {need} or higher; {ctx.gpu_name} has "
                    f"{have}: the model fails to load on it",
                    "use attn_implementation: sdpa on this GPU")]


RULES: tuple[Rule, ...] = (
    Rule(rule_rehearsal, needs=("trl", "rehearsal")), Rule(rule_generation_kwargs),
    Rule(rule_lora_fields_without_peft), Rule(rule_warmup_under_constant), Rule(rule_eval_cadence),
    Rule(rule_logging_epoch), Rule(rule_think_reward_without_thinking), Rule(rule_deepspeed_batch),
    Rule(rule_qlora_fsdp_storage), Rule(rule_attention_kernel),
)
