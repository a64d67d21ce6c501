"""GRPO's learning rate, written once: the recipe's rate by fine-tuning mode and model size, from published GRPO/RLVR
recipes, and the settled range the validator, the emitted comment, diagnosis and the skill all quote.

Full fine-tune, published (AdamW, constant rate after warm-up):
  DeepSeekMath (GRPO, 7B): 1e-6; DAPO (Qwen2.5-32B): 1e-6 with 20 warm-up rollout steps; Dr.GRPO (Qwen2.5-Math-7B,
  "Understanding R1-Zero-Like Training"): 1e-6; DeepScaleR (1.5B): 1e-6.
Above 40B no open GRPO recipe states a rate; the recipe halves it (5e-7), as larger models take smaller steps.
LoRA: "LoRA Without Regret" (Schulman et al., Thinking Machines, 2025) finds LoRA's best rate about 10x the full
fine-tune's: 1e-5 (5e-6 above 40B).
"""

from __future__ import annotations

# (largest size in billions of parameters, full fine-tune rate, the recipes it stands on)
FULL_RATE_BY_SIZE: tuple[tuple[float, float, str], ...] = (
    (40.0, 1e-6, "DeepSeekMath 7B, Dr.GRPO 7B, DAPO 32B and DeepScaleR 1.5B all train GRPO at 1e-6"),
    (float("inf"), 5e-7, "no open GRPO recipe above 40B states its rate: half the 1e-6 of the 1.5B-32B recipes"),
)
LORA_FACTOR = 10  # LoRA Without Regret: LoRA's best rate is about 10x the full fine-tune's
UNKNOWN_SIZE_B = 7.0  # when the model's size is unknown offline: the most common recipe size

# The settled range per mode: outside it the validator warns, LR_FAR_FACTOR beyond it it refuses (unless an override
# reason is stated). Full: a tenth of the recipe's rate up to 10x (TRL's GRPOConfig default is 1e-6); LoRA: 1e-6 (a
# tenth of its recipe) to 2e-4 (the largest rate LoRA RL recipes use).
LR_RANGE = {"full": (1e-7, 1e-5), "lora": (1e-6, 2e-4)}
LR_FAR_FACTOR = 3.0


def recipe_rate(mode: str, params_b: float | None) -> tuple[float, str]:
    """(the recipe's learning rate, why) for a fine-tuning mode ('full' or 'lora'/'qlora') and a size in billions."""
    size = params_b if params_b else UNKNOWN_SIZE_B
    limit, rate, source = next(row for row in FULL_RATE_BY_SIZE if size <= row[0])
    what = f"{size:.1f}B" if params_b else f"size unknown offline, planned as {UNKNOWN_SIZE_B:g}B"
    low, high = LR_RANGE["full" if mode == "full" else "lora"]
    if mode == "full":
        return rate, (f"full fine-tune of a {what} model: {rate:g} ({source}); GRPO's settled range for a full "
                      f"fine-tune is {low:g} to {high:g}, supervised rates such as 5e-5 collapse the policy")
    lora = float(f"{rate * LORA_FACTOR:.3g}")
    return lora, (f"LoRA on a {what} model: {lora:g}, 10x the full fine-tune's {rate:g} (LoRA Without Regret, 2025; "
                  f"{source}); the settled LoRA range is {low:g} to {high:g}")


def recipe_text(mode: str) -> str:
    """The recipe's rates by size as one phrase, e.g. '1e-06 up to 40B, 5e-07 above'."""
    factor = 1 if mode == "full" else LORA_FACTOR
    parts = [f"{rate * factor:g} " + (f"up to {limit:g}B" if limit != float("inf") else "above")
             for limit, rate, _ in FULL_RATE_BY_SIZE]
    return ", ".join(parts)
