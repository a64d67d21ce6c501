"""Family 'sampler': the sampler/trainer mismatch. vLLM's log-probs against the trainer's, policy ratios clipped in
off-policy updates, MoE routing. Metric names are TRL 1.16's (trl/trainer/grpo_trainer.py)."""

from __future__ import annotations


from mcp_server.config import FIELD
from mcp_server.diagnosis.context import (
    AUX_LOSS_RISE,
    CLIP_SEQUENCE_MAX,
    Ctx,
    IS_RATIO_BAND,
    IS_RATIO_ERROR_BAND,
    IS_RATIO_MAX_WARN,
    LOGP_DIFF_ERROR,
    LOGP_DIFF_WARN,
    finding,
    first_last,
    late_mean,
    peak,
)
from mcp_server.diagnosis.models import DiagnosisFinding, Evidence
from mcp_server.model_ref import is_moe


LOGP_MEAN, LOGP_MAX = "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max"


IS_MIN, IS_MEAN, IS_MAX = ("sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
                           "sampling/importance_sampling_ratio/max")


def rule_sampler_mismatch(ctx: Ctx) -> list[DiagnosisFinding]:
    diff, diff_max = late_mean(ctx, LOGP_MEAN), peak(ctx, LOGP_MAX)
    ratio, ratio_max, ratio_min = late_mean(ctx, IS_MEAN), peak(ctx, IS_MAX), peak(ctx, IS_MIN, lowest=True)
    if diff is None and ratio is None:
        return []
    reasons, severe = [], False
    if diff is not None and diff >= LOGP_DIFF_WARN:
        reasons.append(f"the trainer's log-probs differ from vLLM's by {diff:.3g} nats/token on average")
        severe |= diff >= LOGP_DIFF_ERROR
    if ratio is not None and not IS_RATIO_BAND[0] <= ratio <= IS_RATIO_BAND[1]:
        reasons.append(f"the mean importance-sampling ratio is {ratio:.3g} (1 when they agree)")
        severe |= not IS_RATIO_ERROR_BAND[0] <= ratio <= IS_RATIO_ERROR_BAND[1]
    if ratio_max is not None and ratio_max.value >= IS_RATIO_MAX_WARN:
        reasons.append(f"an importance-sampling ratio reached {ratio_max.value:.3g}")
    if not reasons:
        return []
    mode = ctx.get(FIELD.vllm_importance_sampling_mode)
    evidence = [
        e
        for e in (
            Evidence(metric=LOGP_MEAN + " (late mean)", value=round(diff, 6)) if diff is not None else None,
            diff_max,
            Evidence(metric=IS_MEAN + " (late mean)", value=round(ratio, 6)) if ratio is not None else None,
            ratio_max,
            ratio_min,
        )
        if e is not None
    ]
    dropped = ""
    if str(mode).endswith("_mask") and ratio_min is not None and ratio_min.value == 0:
        dropped = (f" The correction ({mode}) zeroes what falls outside its bounds, so sequences were dropped from the "
                   "update (importance_sampling_ratio/min 0): the run trains on fewer samples than it generates.")
    patch: dict = {}
    if ctx.get(FIELD.vllm_importance_sampling_correction, True) is False:
        patch[FIELD.vllm_importance_sampling_correction] = True
    if ctx.config.get(FIELD.fp16) and ctx.gpu_has_bf16 is not False:
        patch.update(fp16=False, bf16=True)
    return [
        finding(
            "sampler_mismatch",
            "error" if severe else "warning",
            evidence,
            "vLLM samples from a different distribution than the model being trained: "
            + "; ".join(reasons)
            + "."
            + dropped
            + " Updates computed on these samples are off-policy by an unknown amount, and "
            "this is the first suspect when entropy rises or the reward falls. Check that vLLM and training "
            "use the same dtype (bf16 both), that the vLLM version is inside TRL's window "
            "(check_environment), that weights are synced every step (LoRA merged before the sync), and "
            "the same chat template and sampling settings on both sides."
            + (
                " The patch turns TRL's importance-sampling correction back on."
                if FIELD.vllm_importance_sampling_correction in patch
                else ""
            ),
            patch,
        )
    ]


def rule_importance_ratio(ctx: Ctx) -> list[DiagnosisFinding]:
    """Policy ratios clipped on many tokens. On-policy (one update per generation) the ratio is exactly 1, so a
    large clipped share means the updates move the policy too far from the one that generated. GSPO's bounds are
    its own (ctx.clip_bounds), and a variant whose clip acts off-policy (GSPO, DAPO's clip-higher) keeps at least
    two mini-batches per generation: one would switch its mechanism off."""
    region = ctx.finite_series("clip_ratio/region_mean")
    if not region:
        return []
    warn, error = ctx.clip_bounds
    late = late_mean(ctx, "clip_ratio/region_mean")
    top = max(region, key=lambda p: p[1])
    if late < warn and top[1] < error:
        return []
    evidence = [Evidence(metric="clip_ratio/region_mean (late mean)", value=round(late, 6)),
                Evidence(metric="clip_ratio/region_mean", step=top[0], value=top[1])]
    evidence += [e for e in (peak(ctx, "clip_ratio/high_mean"), peak(ctx, "clip_ratio/low_mean")) if e]
    # TRL's clip_ratio/high_max is the largest per-sequence share of high-clipped tokens (grpo_trainer.py:
    # nanmax over the gathered masked_seq_mean): at 1.0 some sequence had every token clipped.
    whole = peak(ctx, "clip_ratio/high_max")
    whole_text = ""
    if whole is not None and whole.value >= CLIP_SEQUENCE_MAX:
        evidence.append(whole)
        whole_text = (f" clip_ratio/high_max reached {whole.value:.2g} at step {whole.step}: at least one sequence had "
                      f"{whole.value:.0%} of its tokens clipped at the high bound, so none of its gradient counted.")
    beta = ctx.get(FIELD.beta)
    unanchored = (" With beta 0 nothing else holds the policy near the one that sampled." if beta == 0 else "")
    sequence = ctx.get(FIELD.importance_sampling_level) == "sequence"
    clip_higher = float(ctx.get(FIELD.epsilon_high, 0.0) or 0.0) > float(ctx.get(FIELD.epsilon) or 0.2)
    off_policy_variant = "GSPO" if sequence else "DAPO's clip-higher" if clip_higher else None
    iterations = int(ctx.get(FIELD.num_iterations, 1) or 1)
    accumulation = int(ctx.get(FIELD.gradient_accumulation_steps, 1) or 1)
    per_generation = ctx.config.get(FIELD.steps_per_generation)
    patch: dict = {}
    if iterations > 1:
        patch[FIELD.num_iterations] = 1
        evidence.append(Evidence(metric="num_iterations (config)", value=iterations))
    if isinstance(per_generation, int) and per_generation > accumulation:
        target = max(per_generation // 2, 2 * accumulation) if off_policy_variant else accumulation
        if target < per_generation:
            patch[FIELD.steps_per_generation] = target
        evidence.append(Evidence(metric="steps_per_generation (config)", value=per_generation))
    lr, _ = ctx.learning_rate
    if not patch and lr is not None and max(lr / 2, ctx.lr_range()[0]) < lr:
        patch[FIELD.learning_rate] = max(lr / 2, ctx.lr_range()[0])
    keeps = (f" {off_policy_variant} acts only off-policy, so the patch keeps at least two mini-batches per "
             "generation." if off_policy_variant and FIELD.steps_per_generation in patch else "")
    return [finding("importance_ratio_blowup", "error" if late >= error or top[1] >= 2 * error else "warning",
                    evidence,
                    f"{late:.0%} of tokens had their policy ratio clipped recently (peak {top[1]:.0%} at step "
                    f"{top[0]}; healthy is under {warn:.0%}" + (" for GSPO, whose tight sequence clip acts far more "
                                                                 "often than GRPO's" if sequence else "") + "): "
                    "each generation is reused for updates that move the policy far from the one that sampled it, "
                    "and the clip discards their gradient." + whole_text + unanchored + " The patch makes the updates "
                    "less off-policy or, already as on-policy as the variant allows, halves the learning rate." + keeps,
                    patch)]


def rule_moe_router(ctx: Ctx) -> list[DiagnosisFinding]:
    """TRL logs `aux_loss` (the router's load-balancing loss) when the model has output_router_logits on."""
    ends_ = ctx.ratio("aux_loss")
    if not ends_ or len(ctx.finite_series("aux_loss")) < 4 or ends_[1] < AUX_LOSS_RISE * ends_[0]:
        return []
    sequence = ctx.get(FIELD.importance_sampling_level) == "sequence"
    patch = {} if sequence else ctx.variant_patch("gspo")
    return [finding("moe_router_instability", "warning", first_last(ctx, "aux_loss"),
                    f"The router's load-balancing loss rose from {ends_[0]:.3g} to {ends_[1]:.3g}: experts are "
                    "being chosen more and more unevenly, so a token's expert (and its log-prob) changes between "
                    "generation and update. "
                    + ("The run already uses sequence-level ratios (GSPO): raise router_aux_loss_coef (a "
                       "GRPOConfig field in TRL 1.16) or lower the learning rate." if sequence else
                       "GSPO's sequence-level ratios tolerate routing changes (emit_grpo_config with "
                       "symptom=moe_instability); the patch switches to it."), patch)]


def rule_moe(ctx: Ctx) -> list[DiagnosisFinding]:
    model = ctx.config.get(FIELD.model_name_or_path)
    if not model:
        return []

    if not is_moe(str(model)) or ctx.get(FIELD.importance_sampling_level) == "sequence":
        return []
    reason = ctx.run.request.override_reason
    evidence = [
        Evidence(metric="model_name_or_path (config)", value=str(model)),
        Evidence(metric="importance_sampling_level (config)", value=str(ctx.get(FIELD.importance_sampling_level))),
    ]
    if reason:
        return [finding("moe_without_gspo", "info", evidence, "Mixture-of-experts model without GSPO, overridden: "
                                                              f"{reason}")]
    return [finding("moe_without_gspo", "error" if ctx.diverged else "warning", evidence,
                    "The policy is a mixture-of-experts model trained with token-level importance ratios: expert "
                    "routing changes between generation and training make those ratios noisy"
                    + (", and this run diverged" if ctx.diverged else "")
                    + ". GSPO's sequence-level ratios are stable under routing (emit_grpo_config with "
                      "symptom=moe_instability).",
                    ctx.variant_patch("gspo"))]
