"""The drift budget's rule (promote_checkpoint, promotion_problems and the Markdown that states it read it here):
<= NOISE_POINTS is noise, over HARD_FAIL_POINTS a hard fail, between them a rerun with other seeds whose pooled
paired test tells a real drop from noise; a base model at the suite's floor cannot show a drop (unmeasured)."""

from __future__ import annotations

from dataclasses import dataclass

from mcp_server.evaluation.paired import compare_paired

NOISE_POINTS = 1.0
HARD_FAIL_POINTS = 5.0
DRIFT_ALPHA = 0.05  # the reruns' pooled paired test: a drop beyond noise at this two-sided p


@dataclass(frozen=True)
class RerunJudgement:
    drops: dict[str, float]  # drop in points per rerun seed
    mean_drop: float
    gained: int  # (item, seed) pairs the checkpoint passes and the base fails, over every rerun
    lost: int
    p_value: float  # exact McNemar, two-sided, over those pairs
    noise: bool  # the drift is within budget


def judge_drift(base_rate: float, ckpt_rate: float) -> str:
    if base_rate * 100 <= NOISE_POINTS + 1e-9:  # no drop beyond noise can show below the base's score
        return "unmeasured"
    drop = (base_rate - ckpt_rate) * 100
    if drop <= NOISE_POINTS + 1e-9:
        return "noise"
    return "rerun" if drop <= HARD_FAIL_POINTS + 1e-9 else "hard_fail"


def judge_rerun(base: dict[str, list[bool]], checkpoint: dict[str, list[bool]]) -> RerunJudgement:
    """The sampled reruns' per-item results, by seed: the drops, their mean and whether the drift is noise. Real only
    when the mean drop is over the noise budget (1 point) AND the (item, seed) pairs, pooled, show the checkpoint
    worse beyond noise (exact McNemar, lost > gained, p < 0.05). The same item under several seeds is not an
    independent pair, so pooling overstates the evidence: it errs toward calling a drop real, the gate's safe side."""
    drops = {seed: round((sum(base[seed]) - sum(checkpoint[seed])) / max(len(base[seed]), 1) * 100, 2)
             for seed in base}
    mean = round(sum(drops.values()) / max(len(drops), 1), 2)
    pooled = compare_paired([p for seed in base for p in base[seed]],
                            [p for seed in base for p in checkpoint[seed]])
    real = mean > NOISE_POINTS + 1e-9 and pooled.lost > pooled.gained and pooled.p_value < DRIFT_ALPHA
    return RerunJudgement(drops=drops, mean_drop=mean, gained=pooled.gained, lost=pooled.lost,
                          p_value=pooled.p_value, noise=not real)
