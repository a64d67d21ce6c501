"""What each GRPO config field is for, declared once beside the generated TRL table (config.grpo_fields): its
group, whether an inspection verdict pins it, and the name each generation engine gives it (issue 46).

The inspection pins (inspection.pins), the sampling pass (inspection.sampling) and the emitted YAML's sections
(emission.emit) ask this table instead of keeping lists of their own, so a sampling setting TRL adds is declared
here once and every reader follows. A field no group names is an algorithm field ("algorithm"): pinned, which is
the safe default for a field nobody has classified (tests/test_config_view.py holds every name here to a field of
the generated table).
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp_server.config.grpo_fields import GRPOView

ALGORITHM = "algorithm"
# Groups whose fields cannot change what is sampled or how it is scored: a verdict does not pin them.
UNPINNED_GROUPS = frozenset({"schedule", "layout", "logging", "saving"})
# The emitted config's sections, in order, by group ("grpo" holds every other group).
SECTIONS = (("model", "model"), ("data", "data"), ("rewards", "rewards"))

# Model, data and reward fields by prefix (ModelConfig's lora_*/bnb_*/load_in_*, GRPOScriptArguments' dataset_*).
_PREFIXES = (("model", ("model", "dtype", "lora", "use_peft", "load_in", "bnb")), ("data", ("dataset",)),
             ("rewards", ("reward",)))
_GROUPS: dict[str, tuple[str, ...]] = {
    "data": ("datasets",),
    # what a sample looks like: the sampling pass uses these, the verdict pins them
    "sampling": ("num_generations", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                 "max_completion_length", "chat_template_kwargs", "generation_kwargs"),
    # the optimizer, its schedule and how long it runs
    "schedule": ("learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps", "weight_decay",
                 "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "optim", "optim_args",
                 "num_train_epochs", "max_steps"),
    # how a batch is laid out in memory and time (the same samples, the same scores)
    "layout": ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
               "gradient_checkpointing", "gradient_checkpointing_kwargs", "activation_checkpointing",
               "activation_checkpointing_kwargs", "use_liger_kernel", "deepspeed", "fsdp",
               "fsdp_config", "ds3_gather_for_generation", "torch_empty_cache_steps", "vllm_gpu_memory_utilization",
               "vllm_enable_sleep_mode", "vllm_tensor_parallel_size", "dataloader_num_workers",
               "dataloader_pin_memory", "dataloader_persistent_workers"),
    # where and how often things are logged
    "logging": ("logging_steps", "logging_strategy", "logging_first_step", "logging_nan_inf_filter",
                "log_level", "log_level_replica", "log_on_each_node", "log_completions", "num_completions_to_print",
                "report_to", "run_name", "disable_tqdm"),
    # where and how often checkpoints are saved (not resume_from_checkpoint: it decides the weights that train,
    # so a verdict pins it as an algorithm field; resume_training passes the run's own checkpoint on the command
    # line, and the trainer refuses one outside its output_dir, issue 48)
    "saving": ("output_dir", "save_steps", "save_strategy", "save_total_limit", "save_only_model",
               "save_on_each_node", "push_to_hub", "hub_model_id", "hub_strategy", "hub_token",
               "hub_private_repo", "hub_always_push"),
}
_GROUP_OF = {name: group for group, names in _GROUPS.items() for name in names}


@dataclass(frozen=True)
class Engines:
    """A sampling field's name in vLLM's SamplingParams and in transformers' GenerationConfig (None: that engine
    has no such setting; TRL passes it some other way), and whether it only shapes sampling (`sampler`: a
    logits warper transformers' generate applies only with do_sample; False: it applies to greedy decoding too)."""

    vllm: str | None
    transformers: str | None
    sampler: bool = True


# From TRL 1.16: trl/generation/vllm_generation.py (the SamplingParams it builds: "n", "max_tokens", ...) and
# GRPOTrainer.__init__'s generation_kwargs for transformers' generate ("max_new_tokens", ...).
ENGINES: dict[str, Engines] = {
    "num_generations": Engines("n", "num_return_sequences", sampler=False),
    "temperature": Engines("temperature", "temperature"),
    "top_p": Engines("top_p", "top_p"),
    "top_k": Engines("top_k", "top_k"),
    "min_p": Engines("min_p", "min_p"),
    "repetition_penalty": Engines("repetition_penalty", "repetition_penalty", sampler=False),
    "max_completion_length": Engines("max_tokens", "max_new_tokens", sampler=False),
}


def group_of(name: str) -> str:
    """The field's group: declared above, else by its prefix (model, data, rewards), else "algorithm"."""
    if name in _GROUP_OF:
        return _GROUP_OF[name]
    for group, prefixes in _PREFIXES:
        if name.startswith(prefixes):
            return group
    return ALGORITHM


def fields_in(group: str) -> tuple[str, ...]:
    """The generated TRL's fields of `group`, declared ones first in their declared order."""
    declared = _GROUPS.get(group, ())
    return declared + tuple(n for n in GRPOView.DEFAULTS if n not in declared and group_of(n) == group)


def pinned(name: str) -> bool:
    """Whether an inspection verdict pins the field: it can change what is sampled or how it is scored."""
    return group_of(name) not in UNPINNED_GROUPS


def engine_name(name: str, engine: str) -> str | None:
    """The field's name in `engine` ("vllm" or "transformers"); None: not a setting that engine takes by name."""
    names = ENGINES.get(name)
    return getattr(names, engine) if names else None


def sampler(name: str) -> bool:
    """Whether the sampling field only shapes sampling (Engines.sampler); False for a field no engine takes."""
    names = ENGINES.get(name)
    return bool(names and names.sampler)


def declared_names() -> set[str]:
    """Every field name this module declares (tests hold each to a field of the generated TRL table)."""
    return set(_GROUP_OF) | set(ENGINES)
