"""The seed recipe and its loss variants, chosen only by name or by a stated symptom.

Every value carries the reason the emitted config.yaml prints beside it (WHY, VARIANT_WHY). A variant whose
mechanism is a clip bound also sets the off-policy structure that lets the clip act (`off_policy_fields`):
with one generation batch per optimizer step (TRL's default, steps_per_generation = gradient_accumulation_steps,
num_iterations = 1) every update is on-policy, the importance ratio is exactly 1 and no clip bound is reached.
"""

from __future__ import annotations

from mcp_server.config import FIELD
from mcp_server.config.recipe import Recipe
from mcp_server.errors import UserInputError
from mcp_server.recipe.learning_rate import recipe_rate

# The seed recipe for one GPU, each value with the reason config.yaml prints above it: the one place its values are
# written (the emitter adapts vLLM mode, precision and LoRA to the target). The learning rate is the one value that
# depends on the model: recipe.learning_rate's rate for the fine-tuning mode and size (RATE_BY_SIZE marks its place).
RATE_BY_SIZE = "recipe.learning_rate"
SEED: dict[str, tuple[object, str]] = {
    FIELD.use_vllm: (True, "generation is most of a GRPO step; vLLM samples several times faster than transformers "
                       "generate"),
    FIELD.vllm_mode: ("colocate", "one GPU: vLLM shares it with training (colocate)"),
    FIELD.num_generations: (8, "group size: 8 completions per prompt; with fewer, most groups have one reward value "
                                 "and no advantage"),
    FIELD.learning_rate: (RATE_BY_SIZE, ""),
    FIELD.beta: (0.01, "a small KL pull to the starting model (costs a reference model); TRL's 0 drops it"),
    FIELD.per_device_train_batch_size: (8, "8 completions per micro-batch: one prompt group"),
    FIELD.gradient_accumulation_steps: (4, "4 micro-batches per optimizer step: 32 completions, 4 prompt groups per "
                                       "GPU"),
    FIELD.bf16: (True, "bf16 autocast for the matmuls; the weights stay float32 (dtype), so small RL updates are not "
                   "rounded away"),
    FIELD.logging_steps: (10, "one progress line every 10 optimizer steps"),
    FIELD.seed: (3407, "the seed recipe's seed, so a rerun samples the same completions"),
    FIELD.loss_type: ("dapo", "token-level loss over the accumulated batch (DAPO's aggregation): no length bias. "
                                "'grpo' normalises per sequence, favouring short right and long wrong answers (TRL: "
                                "not recommended); written out so a TRL upgrade cannot change it"),
}
# Training's own samples, read as the inspection's were (max_completion_length comes from the inspection's length
# advice, sample_completions' `lengths.config_patch`).
LOGGED_COMPLETIONS = 8
TRAINING_SAMPLES: dict[str, tuple[object, str]] = {
    FIELD.log_completions: (True, "print and log a few (prompt, completion, rewards) rows every logging step: read "
                              "training's samples as the inspection's were read"),
    FIELD.num_completions_to_print: (LOGGED_COMPLETIONS, f"{LOGGED_COMPLETIONS} rows per logging step are enough to "
                                                     "read"),
}


def seed_recipe(finetune: str = "full", params_b: float | None = None) -> tuple[dict, dict]:
    """(values, why) of the seed recipe for a fine-tuning mode ('full', 'lora', 'qlora') and a model size in billions
    (None: unknown offline)."""
    values, why = {}, {}
    for key, (value, reason) in SEED.items():
        if value is RATE_BY_SIZE:
            value, reason = recipe_rate("full" if finetune == "full" else "lora", params_b)
        values[key], why[key] = value, reason
    return values, why


BASE_RECIPE, WHY = seed_recipe()
LORA_LEARNING_RATE = seed_recipe("lora")[0]["learning_rate"]  # the LoRA recipe's rate at the common size

VARIANTS: dict[str, dict] = {
    "grpo": {},
    # DAPO: clip-higher, no KL term, truncated completions masked out of the loss (+ soft overlong punishment,
    # a reward: see DAPO_LENGTH_SHAPING, and 16 mini-batches per rollout: see MINI_BATCHES_PER_GENERATION).
    "dapo": {FIELD.loss_type: "dapo", FIELD.epsilon_high: 0.28, FIELD.beta: 0.0,
             FIELD.mask_truncated_completions: True},
    # Dr.GRPO: constant normaliser and no std scaling, which removes the length and difficulty biases.
    "dr_grpo": {FIELD.loss_type: "dr_grpo", FIELD.scale_rewards: "none", FIELD.beta: 0.0},
    # GSPO: sequence-level importance ratios with the paper's (much tighter) clip range, per-sequence loss.
    "gspo": {FIELD.importance_sampling_level: "sequence", FIELD.loss_type: "grpo", FIELD.epsilon: 3e-4,
             FIELD.epsilon_high: 4e-4, FIELD.beta: 0.0},
}

VARIANT_WHY: dict[str, dict[str, str]] = {
    "grpo": {},
    "dapo": {
        FIELD.loss_type: "DAPO's token-level loss over the accumulated batch (no length bias)",
        FIELD.epsilon_high: "DAPO clip-higher (paper sec. 4.1: 0.2 low, 0.28 high): low-probability tokens can still "
                        "grow, which keeps entropy from collapsing",
        FIELD.beta: "DAPO drops the KL term (paper sec. 2.3): no reference model",
        FIELD.mask_truncated_completions: "DAPO overlong filtering: a truncated completion is not scored as wrong",
        FIELD.num_generations: "group size 8 (the recipe's); the DAPO paper samples 16 per prompt: set "
                           "num_generations: 16 in overrides to match it (the generation batch stays divisible)",
    },
    "dr_grpo": {
        FIELD.loss_type: "Dr.GRPO: a constant normaliser (max_completion_length) instead of each sequence's length",
        FIELD.scale_rewards: "Dr.GRPO: advantages are reward minus group mean, not divided by the group std (dividing "
                         "up-weights near-solved and near-impossible prompts); this is what differs from the base "
                         "in every step",
        FIELD.beta: "Dr.GRPO's setting (TRL paper index): no KL term",
    },
    "gspo": {
        FIELD.importance_sampling_level: "GSPO: one importance ratio per sequence (geometric mean of token ratios)",
        FIELD.loss_type: "GSPO's per-sequence objective: TRL warns that token-summing losses weight sequences by "
                         "length",
        FIELD.epsilon: "GSPO paper (v2) sec. 5.1: sequence ratios stay near 1, so the clip range is 3e-4 / 4e-4",
        FIELD.epsilon_high: "GSPO paper (v2) sec. 5.1",
        FIELD.beta: "GSPO sets the KL term to zero",
    },
}

# Off-policy structure: optimizer steps (mini-batches) per generation batch. The clip acts only on mini-batches
# sampled before the last update; TRL's paper index: GSPO "only has an effect when training goes slightly
# off-policy ... otherwise it is effectively equivalent to no modification". Dr.GRPO changes the normaliser and
# the advantages, not the clip, so it acts on-policy and keeps one mini-batch per generation.
MINI_BATCHES_PER_GENERATION: dict[str, tuple[int, str]] = {
    "dapo": (16, "DAPO paper sec. 4.1: 512 prompts x 16 samples per rollout, mini-batches of 32 prompts: 16 updates "
                 "per rollout. Mini-batches 2-16 are off-policy, which is where clip-higher acts"),
    "gspo": (4, "GSPO paper (v2) sec. 5.1: each rollout batch is split into 4 mini-batches. Mini-batches 2-4 are "
                "off-policy, which is where the sequence clip acts"),
}

# DAPO's dynamic sampling (sec. 3.2: over-sample, drop the groups whose rewards are all equal, refill the batch) is
# not in TRL 1.16; this project's trainer adds it (recipe.dynamic_sampling, recipe/dynamic_sampling_trainer.py), on
# by default for DAPO's single-turn runs.


SYMPTOM_TO_VARIANT: dict[str, tuple[str, str]] = {
    "entropy_collapse": ("dapo", "entropy collapse: DAPO's clip-higher keeps low-probability tokens explorable"),
    "truncated_completions": ("dapo", "truncated completions: DAPO masks them out of the loss"),
    "length_bias": ("dr_grpo", "length bias: Dr.GRPO removes the per-sequence length normalisation"),
    "moe_instability": ("gspo", "MoE instability: GSPO's sequence-level ratios are stable under expert routing"),
}


def off_policy_fields(variant: str, gradient_accumulation_steps: int) -> Recipe:
    """The generation structure the variant's clip needs: steps_per_generation = mini-batches per rollout x
    gradient_accumulation_steps, so each optimizer step takes one mini-batch."""
    if variant not in MINI_BATCHES_PER_GENERATION:
        return Recipe()
    mini_batches, reason = MINI_BATCHES_PER_GENERATION[variant]
    steps = mini_batches * gradient_accumulation_steps
    why = (f"{mini_batches} optimizer steps per generation batch ({mini_batches} x gradient_accumulation_steps "
           f"{gradient_accumulation_steps}). {reason}. With one step per generation the ratio is exactly 1 and "
           "the clip never acts (num_iterations > 1 is the other way to go off-policy)")
    return Recipe.of({FIELD.steps_per_generation: steps}, {FIELD.steps_per_generation: why}, "recipe")


def recipe_values(variant: str, finetune: str = "full", params_b: float | None = None) -> Recipe:
    """The recipe for a variant, fine-tuning mode and model size: the seed recipe, the variant's values and
    training's logged samples, each with its reason (the emitter then adapts them to the target and the request)."""
    values, why = seed_recipe(finetune, params_b)
    samples = {key: value for key, (value, _) in TRAINING_SAMPLES.items()}
    # a variant's reason may be for a seed value it keeps (DAPO's word on the group size)
    return (Recipe.of(values, why).with_values(VARIANTS[variant]).explained(VARIANT_WHY[variant])
            .with_values(samples, {key: reason for key, (_, reason) in TRAINING_SAMPLES.items()}))


def variant_values(variant: str, gradient_accumulation_steps: int) -> dict:
    """The values that make the variant what it is, as emit_grpo_config writes them (diagnosis patches use it)."""
    values = {FIELD.loss_type: BASE_RECIPE["loss_type"], **VARIANTS[variant]}
    values.update(off_policy_fields(variant, gradient_accumulation_steps).values)
    return values


def choose_variant(variant: str | None, symptom: str | None, moe: bool, override_reason: str | None) -> tuple[str, str]:
    """(variant, reason). A MoE model gets GSPO; another variant on MoE needs a stated reason."""
    if variant and symptom:
        sym_variant, _ = SYMPTOM_TO_VARIANT[symptom]
        if sym_variant != variant:

            raise UserInputError(
                "variant", f"'{variant}' contradicts symptom '{symptom}' (which calls for '{sym_variant}'); give one "
                           "of them."
            )
    if variant:
        chosen, reason = variant, f"named: {variant}"
    elif symptom:
        chosen, reason = SYMPTOM_TO_VARIANT[symptom]
    elif moe:
        chosen, reason = "gspo", "mixture-of-experts model: GSPO (sequence-level importance sampling)"
    else:
        chosen, reason = "grpo", "base recipe (no variant named and no symptom given)"
    if moe and chosen != "gspo":
        if not override_reason:

            raise UserInputError(
                "variant", f"the model is a mixture-of-experts model, which gets GSPO; '{chosen}' needs "
                "override_reason saying why (token-level ratios are unstable under expert routing)."
            )
        reason += f" (MoE override: {override_reason})"
    return chosen, reason
