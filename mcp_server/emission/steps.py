"""Emission's steps: the run's config built as an ordered list of `Recipe -> Recipe` functions (STEPS).

Each step reads what the request resolved to (`Given`, computed once before the first step) and the recipe so
far, and returns a new recipe (config.recipe.Recipe: each value with its reason and source); none changes what it
was given, so a step's whole effect is the recipe it returns. The order is data: STEPS below, read top to bottom,
is the order in which a value can be set and then replaced. A step that replaces a value an earlier one set keeps
it in `Setting.replaced`, and says so in the value's reason where the reason is the point (the request's
overrides, DAPO's L_max, the memory plan's levers).

max_completion_length, in order: the thinking mode's budget, the agentic turns' budget on top of it, else the run's
measurement or the target's placeholder, then DAPO pins its L_max to it, then the request's override, then the
memory plan's lever when the run does not fit.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from mcp_server.config import FIELD
from mcp_server.agentic.spec import AgenticRecord
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.config.recipe import SOURCES, Recipe
from mcp_server.emission.naming import default_run_name
from mcp_server.emission.agentic import agentic_fields, budget_length
from mcp_server.emission.batch import schedule, size_batch
from mcp_server.emission.fit import fit_to_target, grow_vllm_share, plan_for
from mcp_server.emission.lengths import LENGTH, completion_length
from mcp_server.memory.models import MemoryPlan
from mcp_server.recipe.models import GRPORecipeRequest
from mcp_server.recipe.precision import FP16_REASON, dtype_reason, weights_dtype
from mcp_server.recipe.thinking import thinking_fields
from mcp_server.recipe.variants import off_policy_fields, recipe_values
from mcp_server.rewards.registry import follow_config
from mcp_server.rewards.registry import REGISTRY
from mcp_server.rewards.spec import RewardSpec
from mcp_server.runs import Run
from mcp_server.worker import in_training
from mcp_server.worker_targets import LORA_TARGETS_WITHOUT_ROUTERS
from mcp_server.errors import UserInputError


@dataclasses.dataclass(frozen=True)
class Given:
    """What emission resolves from the request once, before the first step (emit.resolve): nothing here changes
    while the steps run."""

    request: GRPORecipeRequest
    run: Run
    model: str  # the resolved model reference
    moe: bool
    variant: str
    variant_reason: str
    gpu: Any  # gpus.GPU, None for a CPU target
    trl_defaults: Mapping[str, Any]  # the installed TRL's defaults ({} when no training interpreter answered)
    size_b: float | None  # the model's parameters in billions, None when unknown offline
    agentic: AgenticRecord | None
    turn_cost: dict | None  # the costliest tool-calling turn, measured (None: single-turn or not measurable)
    data: Mapping[str, Any]  # the data set's TrlParser fields
    prompts: int | None  # the data set's training prompts when known offline
    # train/dynamic_sampling.json's content (recipe.dynamic_sampling.settings; None: off): every plan counts its held
    # rounds, as validation's and the launch's do (RunSpec.dynamic_sampling)
    dynamic_sampling: Mapping[str, Any] | None = None
    # {deprecated field: its replacement} in the installed TRL and transformers (recipe.trl_fields.installed_aliases;
    # {} when no training interpreter answered: the old names, which every version reads)
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # plans already made, by the values' JSON: planning the same values again gives the same plan (a memo only)
    _plans: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def cpu(self) -> bool:
        return self.gpu is None

    @property
    def defaults(self) -> dict[str, Any]:
        """TRL's defaults: the installed TRL's, else the generated table's."""
        return {**GRPOView.DEFAULTS, **self.trl_defaults}

    def plan_of(self, values: dict) -> MemoryPlan | None:
        """The memory plan of `values` on the request's GPUs (None on a CPU target or where it cannot be planned)."""
        if self.cpu:
            return None
        key = json.dumps(values, sort_keys=True, default=str)
        if key not in self._plans:
            self._plans[key] = plan_for(values, self.request.gpu, self.request.num_gpus, self.dynamic_sampling)
        return self._plans[key]


Step = Callable[[Recipe, Given], Recipe]


def seed(recipe: Recipe, given: Given) -> Recipe:
    """The seed recipe, the variant's values and training's logged samples (recipe.variants)."""
    return recipe.merged(recipe_values(given.variant, given.request.finetune, given.size_b))


def agentic_turns(recipe: Recipe, given: Given) -> Recipe:
    return recipe.merged(agentic_fields(given.agentic))


def target(recipe: Recipe, given: Given) -> Recipe:
    """The seed recipe adapted to the target. A CPU target drops the recipe's vLLM fields: TRL's default use_vllm
    false samples with transformers generate, and a vLLM layout would mean nothing."""
    if given.cpu:  # no vLLM, no mixed precision
        return recipe.without([k for k in recipe if k == "use_vllm" or k.startswith("vllm_")]).with_values(
            {FIELD.bf16: False, FIELD.use_cpu: True},
            {FIELD.bf16: "CPU target: float32 throughout (no vLLM fields: transformers generate samples on a CPU)",
             FIELD.use_cpu: "CPU target: every torchrun rank joins one gloo world"}, "target")
    gpu, num_gpus = given.gpu, given.request.num_gpus
    values, why = {FIELD.bf16: gpu.bf16}, {}
    if not gpu.bf16:
        values[FIELD.fp16] = True
        why["bf16"] = f"the {gpu.name} has no bf16"
        why["fp16"] = FP16_REASON
    values[FIELD.vllm_mode] = "server" if num_gpus > 1 else "colocate"
    if num_gpus > 1:
        why["vllm_mode"] = f"{num_gpus} GPUs: vLLM serves on its own GPU (`trl vllm-serve`), training runs on the rest"
    return recipe.with_values(values, why, "target")


def thinking(recipe: Recipe, given: Given) -> Recipe:
    """A hybrid thinking model's switch and its mode's max_completion_length (emit.resolve refused thinking for a
    model without the switch)."""
    return recipe.merged(thinking_fields(given.model, given.request.thinking))


def off_policy(recipe: Recipe, given: Given) -> Recipe:
    """The variant's mini-batches per rollout, unless the request sets the generation structure itself."""
    ga = GRPOView({**recipe.values, **given.request.overrides}).gradient_accumulation_steps
    if not isinstance(ga, int) or {"steps_per_generation", "generation_batch_size", "num_iterations"} & set(
            given.request.overrides):
        return recipe
    return recipe.merged(off_policy_fields(given.variant, ga))


REPORT_TO_WHY = {  # where each writes: training.trainer.tracker_dirs.keep_trackers_in_run
    "trackio": "trackio: a local dashboard, logged under trackers/trackio (`TRACKIO_DIR=trackers/trackio trackio "
               "show`)",
    "wandb": "wandb: set WANDB_MODE=offline to keep it on this machine, logged under trackers/wandb (`wandb sync` "
             "uploads later)",
    "mlflow": "mlflow: a local SQLite store, trackers/mlflow.db (`mlflow ui --backend-store-uri "
              "sqlite:///trackers/mlflow.db`)",
    "tensorboard": "tensorboard: event files under the checkpoints folder (`tensorboard --logdir checkpoints`)",
}


def report_to(recipe: Recipe, given: Given) -> Recipe:
    """report_to as the person chose (TRL's default 'none': only this project's progress file), kept off the
    network where the integration allows it."""
    request = given.request
    if not request.report_to:
        return recipe
    chosen = list(dict.fromkeys(request.report_to))
    values: dict = {FIELD.report_to: chosen}
    why = {FIELD.report_to: "also log to " + "; ".join(REPORT_TO_WHY[name] for name in chosen)
                        + " (each needs its package in the training environment)"}
    if "trackio" in chosen:
        values.update(project=request.run_name or default_run_name(request.model, request.dataset),
                      trackio_static_space_id=False)
        why["project"] = "the trackio project this run logs under"
        why["trackio_static_space_id"] = ("false: no Space on the Hub, no sync or freeze after training "
                                          "(trackio_space_id is unset, so logs stay local)")
    return recipe.with_values(values, why, "request")


def turn_budget(recipe: Recipe, given: Given) -> Recipe:
    """An agentic run's max_completion_length sized for its tool-calling turns over the model's own text (the
    thinking mode's length, else TRL's), unless the request sets it (validation then says whether it holds them)."""
    if GRPOView.given(given.request.overrides).max_completion_length is not None:
        return recipe
    turns = GRPOView.given({**recipe.values, **given.request.overrides}).max_tool_calling_iterations
    base = recipe.view(given.defaults).max_completion_length
    sized = budget_length(given.turn_cost, turns, base)
    if sized is None:
        return recipe
    return recipe.with_value(LENGTH, sized.value, sized.reason, sized.source)


def length(recipe: Recipe, given: Given) -> Recipe:
    """max_completion_length never left at TRL's default silently (emission.lengths)."""
    trl_length = GRPOView({}, given.defaults).max_completion_length  # the installed TRL's
    return completion_length(recipe, given.request.overrides, trl_length, given.cpu, given.run, given.model)


def dapo_length_shaping(recipe: Recipe, given: Given) -> Recipe:
    """DAPO's soft overlong punishment as an extra reward, its L_max pinned as max_completion_length."""
    request = given.request
    if given.variant != "dapo" or any(s.name == "soft_overlong_punishment" for s in recipe.rewards):
        return recipe
    # the request's, else the recipe's, else the installed TRL's default (else the generated TRL's)
    limit = GRPOView({**recipe.values, **request.overrides}, given.defaults).max_completion_length
    if not isinstance(limit, int) or limit <= 0:
        return recipe  # validation reports the bad length
    source = ("override: " + (request.override_reason or "set by the request's overrides")
              if LENGTH in request.overrides else
              recipe.setting(LENGTH).reason if LENGTH in recipe
              else f"{limit} tokens, TRL's default")
    recipe = recipe.with_value(LENGTH, limit, source + "; also L_max of DAPO's soft overlong "
                               "punishment in train/rewards.json: change both together", "recipe")
    # its parameters follow the final length (rewards_follow_config, the reward's Follows: line)
    return recipe.with_rewards([*recipe.rewards, RewardSpec(name="soft_overlong_punishment")])


def reward_weights(recipe: Recipe, given: Given) -> Recipe:
    if all(s.weight == 1.0 for s in recipe.rewards):
        return recipe
    return recipe.with_value(FIELD.reward_weights, [s.weight for s in recipe.rewards],
                             "the weights of the rewards in train/rewards.json, in order", "request")


def output_dir(recipe: Recipe, given: Given) -> Recipe:
    checkpoints = str(given.run.checkpoints.relative_to(given.run.dir))  # relative: the run can move
    return recipe.with_value(FIELD.output_dir, checkpoints,
                             "checkpoints go inside the run directory (relative to it, so the run can be moved)",
                             "run")


def data(recipe: Recipe, given: Given) -> Recipe:
    """The data set's fields, ahead of the recipe's (the model's go before them)."""
    return recipe.with_values(given.data, {k: "the training prompts" for k in given.data}, "data", first=True)


def model(recipe: Recipe, given: Given) -> Recipe:
    """The model section, ahead of all: the weights' dtype follows recipe.precision; under LoRA the recipe's beta
    and bf16 say what they cost there, and a MoE model's routers are left out of LoRA's targets."""
    request, view = given.request, recipe.view()
    peft = request.finetune != "full"
    if peft and view.beta:
        # trl/trainer/grpo_trainer.py: under PEFT ref_model is None and the reference log-probs come from the
        # policy with its adapter disabled
        recipe = recipe.explained({FIELD.beta: "a small KL pull to the starting model; under LoRA TRL computes the "
                                           "reference by disabling the adapter (no second model in memory, one more "
                                           "forward pass per step); 0 drops the KL term"})
    if peft and view.bf16:
        recipe = recipe.explained({FIELD.bf16: "bf16 autocast for the matmuls over the bf16 base; the LoRA adapters "
                                               "and their AdamW state stay float32"})
    section = model_section(request, given.model, view.bf16, given.cpu)
    if given.moe and section.get(FIELD.lora_target_modules) == "all-linear":
        section = section.with_value(FIELD.lora_target_modules, _moe_lora_targets(given.model),
                                     "every linear layer except the MoE routers, which LoRA must not adapt", "model")
    return recipe.merged(section, first=True)


def model_section(request: GRPORecipeRequest, model_ref: str, bf16: bool, cpu: bool) -> Recipe:
    """The model section as the request asks: the weights' dtype, LoRA or QLoRA."""
    values = {FIELD.model_name_or_path: model_ref, FIELD.dtype: weights_dtype(request.finetune, bf16, cpu)}
    why = {FIELD.model_name_or_path: "the policy model", FIELD.dtype: dtype_reason(request.finetune, bf16, cpu)}
    if request.finetune in ("lora", "qlora"):
        values.update(use_peft=True, lora_r=request.lora_r, lora_alpha=request.lora_alpha or 2 * request.lora_r,
                      lora_target_modules=request.lora_target_modules)
        why.update(
            use_peft="LoRA: float32 adapters on a frozen base",
            lora_r="rank: 16-32 is the settled range for RL, whose updates are low-rank",
            lora_alpha="alpha = 2 x rank, the usual scaling" if not request.lora_alpha else "as requested",
            lora_target_modules="every linear layer: attention-only LoRA learns less in RL",
        )
    if request.finetune == "qlora":
        values.update(load_in_4bit=True, bnb_4bit_quant_type="nf4", use_bnb_nested_quant=True)
        why.update(load_in_4bit="QLoRA: the frozen base in 4-bit", bnb_4bit_quant_type="NF4, QLoRA's data type",
                   use_bnb_nested_quant="double quantisation: about 0.4 bits per weight less")
    return Recipe.of(values, why, "model")


# LoRA targets for a MoE model whose layers cannot be listed offline: the attention and MLP projections of the
# Llama/Qwen/GLM/DeepSeek naming, never the router ('gate' / 'router'), which 'all-linear' would adapt.
GENERIC_MOE_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _moe_lora_targets(model_ref: str) -> list[str]:
    """'all-linear' without the routers: listed from the model's layers (built on the meta device in the training
    interpreter), else the generic projection names."""
    try:
        found = in_training(LORA_TARGETS_WITHOUT_ROUTERS, model_ref)
    except UserInputError:  # no training interpreter
        found = None
    return found or GENERIC_MOE_LORA_TARGETS


def trl_cli_rewards(recipe: Recipe, given: Given) -> Recipe:
    """`reward_funcs` for `trl grpo`: only when every reward is expressible as a dotted path with its defaults."""
    paths = []
    for spec in recipe.rewards:
        if spec.name in REGISTRY:
            dotted = REGISTRY[spec.name].info.dotted_path
            if spec.params or not dotted:
                return recipe
            paths.append(dotted)
        elif "." in spec.name and not spec.params:
            paths.append(spec.name)
        else:
            return recipe
    return recipe.with_value(FIELD.reward_funcs, paths,
                             "this run's rewards as import paths, so `trl grpo --config` runs them too", "rewards")


def overrides(recipe: Recipe, given: Given) -> Recipe:
    """The request's overrides win over every value before them; one that replaces a value says which, and from
    where (`config.recipe.SOURCES`)."""
    request = given.request
    said = "override: " + (request.override_reason or "set by the request's overrides")
    for key, value in request.overrides.items():
        before = recipe.setting(key)
        if before is not None and before.value != value:
            reason = f"{said} (instead of {before.value!r} from {SOURCES[before.source]})"
        elif before is None or not before.reason:
            reason = said
        else:
            reason = None  # the value the recipe chose, with its reason
        recipe = recipe.with_value(key, value, reason, "override")
    return recipe


def fit(recipe: Recipe, given: Given) -> Recipe:
    """On a GPU, the memory plan's levers when the run does not fit (emission.fit)."""
    if given.cpu:
        return recipe
    return fit_to_target(recipe, given.plan_of, given.request.num_gpus, set(given.request.overrides))


def batch(recipe: Recipe, given: Given) -> Recipe:
    return size_batch(recipe, given.plan_of, given.request, given.prompts, given.variant)


def vllm_share(recipe: Recipe, given: Given) -> Recipe:
    return recipe if given.cpu else grow_vllm_share(recipe, given.plan_of, given.request)


def learning_schedule(recipe: Recipe, given: Given) -> Recipe:
    plan = given.plan_of(recipe.values)
    return schedule(recipe, given.prompts, plan.launch.training_processes if plan else 1, given.request.overrides)


def rewards_follow_config(recipe: Recipe, given: Given) -> Recipe:
    """Each reward parameter declared to follow a config field (a reward factory's Follows: line, e.g. DAPO's L_max)
    written from the final config: a memory lever that shortened the length moves L_max with it."""
    return recipe.with_rewards(follow_config(list(recipe.rewards), recipe.values))


def installed_names(recipe: Recipe, given: Given) -> Recipe:
    """Every field under the name the installed transformers reads without a warning: a deprecated alias the recipe
    holds (an override, a lever) written as its replacement, and a replacement written out where TRL's default sets
    only the alias (TRL's gradient_checkpointing=True: transformers 5.25 copies it to activation_checkpointing with a
    FutureWarning at every start, so each sample, train and promote printed one)."""
    for old, new in given.aliases.items():
        said = (f"{old} is a deprecated alias of {new} in the installed transformers (TrainingArguments): the same "
                "setting under the name it reads without a FutureWarning")
        if old in recipe:  # where both are set the new one wins (TrainingArguments), so the old one goes
            setting, recipe = recipe.setting(old), recipe.without([old])
            if new not in recipe:
                recipe = recipe.with_value(new, setting.value, f"{setting.reason}; {said}".lstrip("; "),
                                           setting.source)
        default = given.defaults.get(old)
        if new not in recipe and default is not None and given.defaults.get(new) is None:
            recipe = recipe.with_value(new, default, f"TRL's default ({old}={default!r}); {said}", "trl_default")
    return recipe


STEPS: list[Step] = [
    seed, agentic_turns, target, thinking, off_policy, report_to, turn_budget, length, dapo_length_shaping,
    reward_weights, output_dir, data, model, trl_cli_rewards, overrides, fit, batch, vllm_share, learning_schedule,
    rewards_follow_config, installed_names,
]


def build(given: Given, steps: list[Step] = STEPS) -> Recipe:
    """The run's recipe: each step in order over the one before."""
    recipe = Recipe(rewards=given.request.rewards)
    for step in steps:
        recipe = step(recipe, given)
    return recipe
