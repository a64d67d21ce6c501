"""Length advice from sampled completions: max_completion_length and vLLM's max model length, with the
truncation rate they imply, and the config patch that carries them (log_completions on, so training's own
samples can be read the same way)."""

from __future__ import annotations

import math

from mcp_server.config import FIELD, GRPOView

ROUND_TO = 64
# More truncation than this at the sampling limit and the length distribution is cut off: no honest suggestion.
CENSORED_SHARE = 0.01
COVER = 0.99  # the suggestion covers this share of the sampled completions


def _round_up(value: int) -> int:
    return max(ROUND_TO, -(-int(value) // ROUND_TO) * ROUND_TO)


def _quantile(sorted_values: list[int], q: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def length_advice(lengths: list[int], truncated: list[bool], limit: int, prompt_lengths: list[int]) -> dict:
    """Completion-length percentiles, the suggested max_completion_length (the 99th percentile rounded up to a
    multiple of 64) with the share of these samples it would cut off, and vllm_max_model_length (the longest
    measured prompt plus that length). With more than 1% cut off at the sampling limit the distribution is
    censored: the advice is to sample again with a larger max_new_tokens, and nothing is suggested."""
    n = len(lengths)
    values = sorted(lengths)
    cut = sum(truncated)
    advice: dict = {
        "completions": n,
        "max_new_tokens": limit,
        "completion_tokens": {q: _quantile(values, p) for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))} | {
            "max": values[-1]} if values else {},
        "truncated_share": round(cut / n, 4) if n else 0.0,
        "prompt_tokens_max": max(prompt_lengths) if prompt_lengths else None,
        "prompts_measured": len(prompt_lengths),
        "suggested_max_completion_length": None,
        "truncation_at_suggested": None,
        "suggested_vllm_max_model_length": None,
        "config_patch": {"log_completions": True},
    }
    if not n:
        advice["advice"] = "no completions to measure"
        return advice
    if cut / n > CENSORED_SHARE:
        advice["advice"] = (
            f"{cut} of {n} completions ({cut / n:.0%}) hit max_new_tokens={limit}: their true lengths are unknown. "
            f"Sample again with max_new_tokens={2 * limit} to see where completions end (that exploration cannot "
            "back a verdict), set max_completion_length in the config from it, then sample with the config."
        )
        return advice
    suggested = _round_up(_quantile(values, COVER))
    over = sum(1 for length, t in zip(lengths, truncated) if t or length > suggested)
    advice["suggested_max_completion_length"] = suggested
    advice["truncation_at_suggested"] = round(over / n, 4)
    patch = {FIELD.max_completion_length: suggested, FIELD.log_completions: True}
    if prompt_lengths:
        advice["suggested_vllm_max_model_length"] = _round_up(max(prompt_lengths) + suggested)
        patch[FIELD.vllm_max_model_length] = advice["suggested_vllm_max_model_length"]
    advice["config_patch"] = patch
    advice["advice"] = (
        f"max_completion_length {suggested} covers {1 - over / n:.0%} of these {n} completions (it would cut off "
        f"{over / n:.1%})" + (f"; vllm_max_model_length {advice['suggested_vllm_max_model_length']} holds the longest "
                              f"of {len(prompt_lengths)} prompts ({max(prompt_lengths)} tokens) plus that"
                              if prompt_lengths else "")
        + ". Set them (and log_completions: true) in the config; changing the sampling settings means sampling "
        "again before the verdict."
    )
    return advice


def for_config(advice: dict, config: dict) -> dict:
    """The advice for this run's config: no vLLM length where the config does not sample with vLLM (a CPU
    target), a patch of only what the config does not already hold, and the offer, said loudly, when the
    suggestion is not the config's max_completion_length (issue 31: TRL's 512 left in place for a task whose
    answers take a few dozen tokens)."""
    advice = dict(advice)
    if not GRPOView(config).use_vllm:
        advice["suggested_vllm_max_model_length"] = None
        advice["config_patch"] = {k: v for k, v in advice["config_patch"].items() if k != "vllm_max_model_length"}
    # only what the config does not hold already (walk 11: `{"log_completions": true}` offered to a config with it)
    advice["config_patch"] = {k: v for k, v in advice["config_patch"].items() if config.get(k) != v}
    if config.get(FIELD.log_completions) is True and isinstance(advice.get("advice"), str):
        advice["advice"] = advice["advice"].replace(" (and log_completions: true)", "")
    suggested = advice.get("suggested_max_completion_length")
    configured = GRPOView(config).max_completion_length
    advice["offer"] = None
    if suggested is not None and suggested != configured:
        given = FIELD.max_completion_length in config
        advice["offer"] = (
            f"LENGTH: train/config.yaml's max_completion_length is {configured}"
            + ("" if given else " (unset: TRL's default)")
            + f"; these {advice['completions']} completions suggest {suggested} (99th percentile "
            f"{advice['completion_tokens']['p99']} tokens, cutting {advice['truncation_at_suggested']:.1%}). Apply it: "
            "emit_grpo_config again into this run (run_dir, the same request) takes it from these samples, or set "
            f"max_completion_length: {suggested} in the config; then sample again at that limit.")
    return advice
