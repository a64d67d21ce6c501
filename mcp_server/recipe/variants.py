"""The seed recipe and its loss variants, chosen only by name or by a stated symptom."""

from __future__ import annotations

from mcp_server.errors import UserInputError

# The seed recipe (values for one GPU; the emitter adapts vLLM mode, precision and LoRA to the target).
BASE_RECIPE: dict = {
    "use_vllm": True,
    "vllm_mode": "colocate",
    "num_generations": 8,
    "learning_rate": 5e-7,
    "beta": 0.01,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 4,
    "bf16": True,
    "logging_steps": 10,
    "seed": 3407,
    # Current TRL defaults loss_type to "dapo": the base recipe is plain GRPO, said explicitly.
    "loss_type": "grpo",
}

VARIANTS: dict[str, dict] = {
    "grpo": {},
    # DAPO: clip-higher, no KL term, truncated completions masked out of the loss.
    "dapo": {"loss_type": "dapo", "epsilon_high": 0.28, "beta": 0.0, "mask_truncated_completions": True},
    # Dr.GRPO: constant normaliser and no std scaling, which removes the length and difficulty biases.
    "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none"},
    # GSPO: sequence-level importance ratios with the paper's (much tighter) clip range.
    "gspo": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4, "beta": 0.0},
}

SYMPTOM_TO_VARIANT: dict[str, tuple[str, str]] = {
    "entropy_collapse": ("dapo", "entropy collapse: DAPO's clip-higher keeps low-probability tokens explorable"),
    "truncated_completions": ("dapo", "truncated completions: DAPO masks them out of the loss"),
    "length_bias": ("dr_grpo", "length bias: Dr.GRPO removes the per-sequence length normalisation"),
    "moe_instability": ("gspo", "MoE instability: GSPO's sequence-level ratios are stable under expert routing"),
}


def choose_variant(variant: str | None, symptom: str | None, moe: bool, override_reason: str | None) -> tuple[str, str]:
    """(variant, reason). A MoE model gets GSPO; another variant on MoE needs a stated reason."""
    if variant and symptom:
        sym_variant, _ = SYMPTOM_TO_VARIANT[symptom]
        if sym_variant != variant:

            raise UserInputError(
                "variant", f"'{variant}' contradicts symptom '{symptom}' (which calls for '{sym_variant}'); give one of them."
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
