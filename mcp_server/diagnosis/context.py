"""What the diagnosis rules read: the loaded run with the facts several rules share (Ctx), small numeric helpers
and the thresholds the rules apply."""

from __future__ import annotations

import math
import re
import statistics

from mcp_server.config import FIELD, GRPOView
from mcp_server.diagnosis.metrics import LoadedRun
from mcp_server.diagnosis.models import DiagnosisFinding, Evidence, Severity
from mcp_server.gpus import lookup_gpu
from mcp_server.recipe.learning_rate import LR_FAR_FACTOR, LR_RANGE
from mcp_server.recipe.trl_fields import trl_defaults
from mcp_server.recipe.variants import BASE_RECIPE, LORA_LEARNING_RATE
from mcp_server.recipe.variants import variant_values
from mcp_server.userfiles import read_json_if_present

# Thresholds (why each value: see the rule using it).
SPIKE_FACTOR = 10.0
SPIKE_FLOOR = 1.0
# KL (nats/token) at the recipe's beta 0.04; kl_bounds scales them to the run's beta.
KL_WARN, KL_ERROR = 1.0, 5.0
KL_REF_BETA, KL_WARN_FLOOR = 0.04, 0.1
ZERO_STD_ERROR, ZERO_STD_WARN = 0.9, 0.75
SIGNAL_LOST_LOGS = 2  # logs in a row with no spread and no gradient (after the first) that make a lost signal
# Share of completions cut at max_completion_length: healthy under 0.1 (references/trl-metrics.md).
CLIPPED_WARN, CLIPPED_ERROR = 0.1, 0.5
# Logged steps before completions_truncated judges at all: one log's share of a few cut completions is noise (issue
# 49: 62% at step 1 was an ERROR, 37.5% at step 2 "healthy", 38% over four steps a WARNING, the cut unchanged).
MIN_CUT_LOGS = 4
NEVER_TERMINATE = 0.95  # clipped share at which (with no terminated completion) nothing ends at all
FLAT_MIN_POINTS = 20
ENTROPY_DROP = 0.4  # late/early entropy: collapse (warning)
ENTROPY_COLLAPSE_ERROR = 0.1  # late/early: the policy is deterministic (error, a guard stop)
ENTROPY_RISE, ENTROPY_RISE_ERROR, ENTROPY_RISE_MIN = 1.5, 3.0, 0.3  # late/early ratios, and a rise in nats
LENGTH_COLLAPSE = 0.4  # late/early mean completion length
# vLLM sampler vs trainer (sampling/* metrics): mean |log-prob difference| per token, and importance ratios.
LOGP_DIFF_WARN, LOGP_DIFF_ERROR = 0.1, 0.5
IS_RATIO_BAND, IS_RATIO_ERROR_BAND = (0.8, 1.25), (0.5, 2.0)
IS_RATIO_MAX_WARN = 10.0
# Share of tokens whose policy ratio hit the clip bounds (clip_ratio/region_mean). On-policy it is exactly 0 (the
# ratio is 1); a run that reuses each generation (num_iterations 4) with 18-23% clipped in its second half and
# whole sequences clipped (clip_ratio/high_max 1.0) was called healthy at a 0.2 threshold (issue 34): one token in
# six or seven with its gradient discarded is already an update too large for the clip range.
CLIP_RATIO_WARN, CLIP_RATIO_ERROR = 0.15, 0.3
CLIP_SEQUENCE_MAX = 0.9  # clip_ratio/high_max (the largest per-sequence share): whole sequences clipped
# GSPO clips whole sequences at a 3e-4 range: its paper reports far more clipping than GRPO's (about 15% of
# tokens), so 20% is normal there; its bounds are higher.
GSPO_CLIP_WARN, GSPO_CLIP_ERROR = 0.4, 0.6
AUX_LOSS_RISE = 1.5  # late/early MoE router load-balancing loss
LENGTH_CORR, LENGTH_RISE = 0.8, 1.15
LOSS_ZERO = 0.01
CORRECTNESS_NAME = re.compile(r"correct|accura|math|answer|exact|verif|equiv|pass|solution|test", re.I)


def finite(values) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def shown(value: float) -> float | str:
    """A number for evidence: non-finite values as text (JSON has no NaN)."""
    return value if math.isfinite(value) else str(value)


def ends(values: list[float], fraction: float = 1 / 3) -> tuple[float, float]:
    """Mean of the first and of the last `fraction` of the values (at least one each)."""
    k = max(1, int(len(values) * fraction))
    return statistics.fmean(values[:k]), statistics.fmean(values[-k:])


def correlation(xs: list[float], ys: list[float]) -> float | None:
    try:
        return statistics.correlation(xs, ys)
    except (statistics.StatisticsError, ValueError):  # constant input or too few points
        return None


def slope(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares slope of value over step, and its standard error."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if not var or len(points) < 3:
        return 0.0, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var
    residual = sum((y - my - b * (x - mx)) ** 2 for x, y in zip(xs, ys)) / (len(points) - 2)
    return b, math.sqrt(residual / var)



def kl_bounds(beta: float | None) -> tuple[float, float]:
    """(warning, error) KL in nats/token for a run's beta: 1.0 and 5.0 at the recipe's 0.04, proportionally
    lower for a weaker pull to the reference (beta 0.01: 0.25 and 1.25), never under 0.1 / 0.5. A small beta
    restrains the policy less, so the same KL means it has run further on its own."""
    if not beta or beta <= 0 or beta >= KL_REF_BETA:
        return KL_WARN, KL_ERROR
    warn = max(KL_WARN * beta / KL_REF_BETA, KL_WARN_FLOOR)
    return warn, warn * KL_ERROR / KL_WARN


def significant_change(points: list[tuple[int, float]]) -> float:
    """The fitted change over the span when it is beyond two standard errors, else 0."""
    if len(points) < 4:
        return 0.0
    span = points[-1][0] - points[0][0]
    b, se = slope(points)
    return b * span if abs(b) > 2 * se else 0.0

# The share of the base model's inspected samples cut at the limit from which truncation is the task's or the
# limit's (it was there before any update), not a symptom of training.
BASE_CUT = 0.5


def _share(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


class Ctx:
    """The run plus derived facts several rules share."""

    def __init__(self, run: LoadedRun):
        self.run = run
        self.config = run.config or {}
        self._defaults: dict | None = None
        self.too_early: list[str] = []  # what a rule saw while it had too few points to judge (the summary says it)

    def review_truncated(self) -> str:
        """"; the review measured N% (c of n) before training" when the run's inspection review says how many of
        its samples were cut at the limit, else "": the share the run started from, beside the training one."""
        review = read_json_if_present(self.run.home.review) if self.run.home is not None else None
        result = review.get("result") if isinstance(review, dict) else None
        cut = result.get("truncated") if isinstance(result, dict) else None
        ids = review.get("reviewed_ids") if isinstance(review, dict) else None
        if not isinstance(cut, int) or not isinstance(ids, list) or not ids:
            return ""
        return f"; the review measured {cut / len(ids):.0%} ({cut} of {len(ids)}) before training"

    def review_success(self) -> tuple[float, float | None, int | None] | None:
        """(base success: the share of prompts with a paid completion, the share of completions paid, prompts) as
        the run's inspection review measured them before training; None when it has none (walk 13: diagnose-run
        said "base success 0" of a run whose review measured 12% of 16 prompts)."""
        review = read_json_if_present(self.run.home.review) if self.run.home is not None else None
        result = review.get("result") if isinstance(review, dict) else None
        result = result if isinstance(result, dict) else {}
        base, paid, prompts = (result.get(k) for k in ("base_success_rate", "mean_success_rate", "rate_prompts"))
        if not _share(base):
            return None
        return float(base), float(paid) if _share(paid) else None, prompts if isinstance(prompts, int) else None

    def get(self, key: str, fallback=None):
        """The config's value, else the installed TRL's default (the generated table's when no training
        interpreter answers: config.GRPOView), else `fallback`."""
        if key in self.config:
            return self.config[key]
        value = self._trl_defaults().get(key)
        return fallback if value is None else value

    @property
    def view(self) -> GRPOView:
        """The config read by attribute, as `get` reads it: the config's value, else the installed TRL's default."""
        return GRPOView(self.config, self._trl_defaults())

    def _trl_defaults(self) -> dict:
        if self._defaults is None:
            try:
                self._defaults = trl_defaults()
            except Exception:  # no TRL here: the rules still run on the metrics and the generated defaults
                self._defaults = dict(GRPOView.DEFAULTS)
        return self._defaults

    def completion_limit(self) -> tuple[int, str]:
        """max_completion_length and how it is known: "config", "observed" (the longest completion logged), or
        "assumed" (TRL's default: no config was found beside the metrics)."""
        value = GRPOView.given(self.config).max_completion_length
        if isinstance(value, int) and not isinstance(value, bool):
            return value, "config"
        observed = finite(v for _, v in self.series("completions/max_length"))
        if observed:
            return int(max(observed)), "observed"
        return int(self.view.max_completion_length), "assumed"

    def limit_text(self) -> str:
        """The limit as a finding states it: measured, or said to be assumed."""
        value, how = self.completion_limit()
        if how == "config":
            return f"max_completion_length ({value})"
        if how == "observed":
            return f"max_completion_length ({value}, the longest completion logged: no config was found)"
        return (f"max_completion_length (assuming TRL's default {value}: no config was found beside the file; pass "
                "config for the run's value)")

    def overlong_punishment(self) -> dict | None:
        """DAPO's soft overlong punishment of train/rewards.json (its params), None when the run has none."""
        for spec in self.run.reward_specs or []:
            if isinstance(spec, dict) and spec.get("name") == "soft_overlong_punishment":
                return spec.get("params") or {}
        return None

    def signal_gone(self) -> bool:
        """Most groups have no reward spread late in the run: nothing left to learn from."""
        zero = [v for _, v in self.finite_series("frac_reward_zero_std")]
        return bool(zero) and ends(zero, 0.5)[1] >= ZERO_STD_WARN

    def series(self, name: str) -> list[tuple[int, float]]:
        return self.run.series(name)

    def finite_series(self, name: str) -> list[tuple[int, float]]:
        return [(s, v) for s, v in self.series(name) if math.isfinite(v)]

    @property
    def fine_tune_mode(self) -> str | None:
        if not self.config:
            return None
        return (
            "lora"
            if any(self.config.get(name) for name in (FIELD.use_peft, FIELD.load_in_4bit, FIELD.load_in_8bit))
            else "full"
        )

    @property
    def learning_rate(self) -> tuple[float | None, Evidence | None]:
        """The configured rate, else the peak logged one (after warm-up)."""
        lr = self.config.get(FIELD.learning_rate)
        if isinstance(lr, (int, float)) and not isinstance(lr, bool):
            return float(lr), Evidence(metric="learning_rate (config)", value=float(lr))
        logged = self.finite_series("learning_rate")
        if logged:
            step, peak = max(logged, key=lambda p: p[1])
            return peak, Evidence(metric="learning_rate", step=step, value=peak)
        return None, None

    @property
    def gpu_has_bf16(self) -> bool | None:
        name = self.run.request.gpu
        if not name or str(name).lower() == "cpu":
            return None
        try:

            return bool(lookup_gpu(str(name)).bf16)
        except Exception:
            return None

    def first_nonfinite(self, name: str) -> tuple[int, float] | None:
        return next(((s, v) for s, v in self.series(name) if not math.isfinite(v)), None)

    def grad_spikes(self) -> list[tuple[int, float, float]]:
        """(step, value, running level) where grad_norm exceeds SPIKE_FACTOR x the median of the previous
        (up to 10) non-zero values; a zero grad_norm (a batch with no advantage) is not a level."""
        out, history = [], []
        for step, value in self.finite_series("grad_norm"):
            level = statistics.median(history[-10:]) if len(history) >= 2 else None
            if level and value >= SPIKE_FLOOR and value > SPIKE_FACTOR * level:
                out.append((step, value, level))
            if value > 0:
                history.append(value)
        return out

    @property
    def kl_bounds(self) -> tuple[float, float]:
        """The run's bounds; the recipe's (beta 0.04) when the config does not say (TRL's own default is not
        looked up: it costs a TRL import, and a run that logs kl has a beta above 0 anyway)."""
        beta = self.config.get(FIELD.beta)
        return kl_bounds(float(beta) if isinstance(beta, (int, float)) and not isinstance(beta, bool) else None)

    def ratio(self, name: str, fraction: float = 0.25) -> tuple[float, float] | None:
        """(early, late) means of a positive series (first and last `fraction`), None when too short or zero."""
        values = [v for _, v in self.finite_series(name)]
        if len(values) < 2:
            return None
        early, late = ends(values, fraction)
        return (early, late) if early > 0 else None

    def entropy_exploded(self) -> bool:
        ends_ = self.ratio("entropy")
        return bool(ends_ and ends_[1] >= ENTROPY_RISE * ends_[0] and ends_[1] - ends_[0] >= ENTROPY_RISE_MIN)

    @property
    def diverged(self) -> bool:
        kl = finite(v for _, v in self.series("kl"))
        clip = finite(v for _, v in self.series("clip_ratio/region_mean"))
        return bool(self.first_nonfinite("loss") or self.first_nonfinite("grad_norm") or self.grad_spikes()
                    or (kl and max(kl) >= self.kl_bounds[0]) or self.entropy_exploded()
                    or (clip and max(clip) >= self.clip_bounds[1]))

    @property
    def clip_bounds(self) -> tuple[float, float]:
        """(warning, error) share of clipped tokens: GRPO's, or GSPO's (sequence-level ratios) higher ones."""
        if self.get("importance_sampling_level") == "sequence":
            return GSPO_CLIP_WARN, GSPO_CLIP_ERROR
        return CLIP_RATIO_WARN, CLIP_RATIO_ERROR

    def cut_before_training(self) -> bool:
        """Most of the base model's inspected samples were cut at the limit already (BASE_CUT): a truncation
        finding then has no cause in the update."""
        base = self.base_truncation()
        return base is not None and base[0] >= BASE_CUT

    def base_truncation(self) -> tuple[float, int | None] | None:
        """(share, max_new_tokens) of the base model's samples cut at the limit, as the run's inspection measured
        them before any training (inspection/samples.meta.json's lengths); None when the run has none."""
        home = getattr(self.run, "home", None)
        if home is None:
            return None
        from mcp_server.userfiles import read_json_if_present

        try:
            lengths = (read_json_if_present(home.samples_meta) or {}).get("lengths") or {}
        except (OSError, ValueError):
            return None
        share, limit = lengths.get("truncated_share"), lengths.get("max_new_tokens")
        if not isinstance(share, (int, float)) or isinstance(share, bool):
            return None
        return float(share), limit if isinstance(limit, int) and not isinstance(limit, bool) else None

    def cause_above(self) -> list[str]:
        """What another finding ranks above a completion-length symptom as its cause: the run diverges, its rate is
        far above the range, or its KL, entropy or length moves. Empty: nothing logged explains it."""
        causes = ["the run diverges"] if self.diverged else []
        if self.rate_far_above():
            causes.append(f"learning_rate={self.learning_rate[0]:g} is far above the range")
        return causes + [r for r in self.moving_away() if not r.endswith(" is falling")]

    def moving_away(self) -> list[str]:
        """Why raising the learning rate would make this run worse: the reward falls, KL grows, entropy moves.
        Empty when none of them does."""
        reasons = []
        for name in ["reward"] + [k for k in sorted(self.run.metric_names())
                                   if k.startswith("rewards/") and k.endswith("/mean") and CORRECTNESS_NAME.search(k)]:
            if significant_change(self.finite_series(name)) < 0:
                reasons.append(f"{name} is falling")
        kl = [v for _, v in self.finite_series("kl")]
        if len(kl) >= 2:  # KL starts at exactly 0 (policy == reference): compare the late level, not a ratio
            early, late = ends(kl, 0.25)
            if late >= self.kl_bounds[0] or (late >= 3 * early and late >= 0.1 * self.kl_bounds[0]):
                reasons.append(f"kl grows ({early:.3g} -> {late:.3g})")
        entropy = self.ratio("entropy")
        if entropy and not ENTROPY_DROP * 1.5 < entropy[1] / entropy[0] < ENTROPY_RISE:
            reasons.append(f"entropy moves ({entropy[0]:.3g} -> {entropy[1]:.3g})")
        length = self.ratio("completions/mean_length")
        if length and length[1] <= LENGTH_COLLAPSE * length[0]:
            reasons.append(f"completion length collapsed ({length[0]:.3g} -> {length[1]:.3g} tokens)")
        return reasons

    def lr_range(self) -> tuple[float, float]:

        mode = self.fine_tune_mode
        if mode is None:  # unknown: the union, so neither a full nor a LoRA run is flagged wrongly
            return LR_RANGE["full"][0], LR_RANGE["lora"][1]
        return LR_RANGE[mode]

    def rate_far_above(self) -> bool:
        """The learning rate is LR_FAR_FACTOR or more above the settled range (the validator's error threshold)."""
        lr, _ = self.learning_rate
        return lr is not None and lr >= LR_FAR_FACTOR * self.lr_range()[1]

    def recipe_lr(self) -> float:
        if self.fine_tune_mode == "lora":
            return LORA_LEARNING_RATE
        return BASE_RECIPE["learning_rate"]

    def divergence_patch(self) -> dict:
        """The triage order's fix for a diverging run: precision first, then the learning rate, then clipping."""
        patch: dict = {}
        if self.config.get(FIELD.fp16) and self.gpu_has_bf16 is not False:
            patch.update(fp16=False, bf16=True)
        lr, _ = self.learning_rate
        if lr is not None:
            low, high = self.lr_range()
            lower = self.recipe_lr() if lr > high else max(lr / 4, low)
            if lower < lr:  # never a higher rate on a diverging run (below the range already: leave it)
                patch[FIELD.learning_rate] = lower
        grad_clip = self.config.get(FIELD.max_grad_norm)
        if isinstance(grad_clip, (int, float)) and (grad_clip <= 0 or grad_clip > 1.0):
            patch[FIELD.max_grad_norm] = 1.0
        return patch

    def variant_patch(self, variant: str) -> dict:
        """The variant as emit_grpo_config writes it (the base recipe's loss_type unless the variant sets its
        own, and the off-policy structure its clip needs), less what the run already has."""

        ga = self.config.get(FIELD.gradient_accumulation_steps, 1)  # TRL's default is 1
        wanted = variant_values(variant, ga if isinstance(ga, int) else 1)
        own_structure = {"steps_per_generation", "generation_batch_size", "num_iterations"} & set(self.config)
        if own_structure:  # the run already goes off-policy its own way (and TRL rejects two of them together)
            wanted.pop("steps_per_generation", None)
        return {k: v for k, v in wanted.items() if self.config.get(k) != v}


def finding(code: str, severity: Severity, evidence: list[Evidence], explanation: str, patch: dict | None = None):
    """A finding; its evidence each once (walk 11: a run's first and last log, one log, printed twice)."""
    once = list({(e.metric, e.step, repr(e.value)): e for e in reversed(evidence)}.values())[::-1]
    return DiagnosisFinding(code=code, severity=severity, evidence=once, explanation=explanation, patch=patch or {})


def first_last(ctx: Ctx, name: str) -> list[Evidence]:
    points = ctx.series(name)
    if not points:
        return []
    out = [Evidence(metric=name, step=points[0][0], value=shown(points[0][1]))]
    if len(points) > 1:
        out.append(Evidence(metric=name, step=points[-1][0], value=shown(points[-1][1])))
    return out


def peak(ctx: Ctx, name: str, lowest: bool = False) -> Evidence | None:
    points = ctx.finite_series(name)
    if not points:
        return None
    step, value = (min if lowest else max)(points, key=lambda p: p[1])
    return Evidence(metric=name, step=step, value=value)


# ---------------------------------------------------------------- shared by several families
def log_hits(text: str, pattern: re.Pattern) -> list[tuple[int, str]]:
    lines = text.splitlines()
    return [(i + 1, line.strip()) for i, line in enumerate(lines) if pattern.search(line)]


def log_line(number: int, line: str) -> Evidence:
    return Evidence(metric="log", value=f"line {number}: {line[:300]}")


TRL_ALL_NONE = "All reward functions returned None"


def late_mean(ctx: Ctx, name: str) -> float | None:
    values = [v for _, v in ctx.finite_series(name)]
    return ends(values, 0.5)[1] if values else None
