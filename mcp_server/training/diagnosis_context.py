"""What the diagnosis rules read: the loaded run with the facts several rules share (Ctx), small numeric helpers
and the thresholds the rules apply."""

from __future__ import annotations

import math
import re
import statistics

from mcp_server.training.metrics import LoadedRun
from mcp_server.training.models import DiagnosisFinding, Evidence, Severity

# Thresholds (why each value: see the rule using it).
SPIKE_FACTOR = 10.0
SPIKE_FLOOR = 1.0
KL_WARN, KL_ERROR = 1.0, 5.0
ZERO_STD_ERROR, ZERO_STD_WARN = 0.9, 0.75
CLIPPED_WARN, CLIPPED_ERROR = 0.5, 0.9
FLAT_MIN_POINTS = 20
ENTROPY_DROP = 0.4
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



class Ctx:
    """The run plus derived facts several rules share."""

    def __init__(self, run: LoadedRun):
        self.run = run
        self.config = run.config or {}
        self._defaults: dict | None = None

    def get(self, key: str, fallback=None):
        """The config's value, else the installed TRL's default, else `fallback`."""
        if key in self.config:
            return self.config[key]
        if self._defaults is None:
            try:
                from mcp_server.recipe.trl_fields import trl_defaults

                self._defaults = trl_defaults()
            except Exception:  # no TRL here: the rules still run on the metrics alone
                self._defaults = {}
        value = self._defaults.get(key)
        return fallback if value is None else value

    def series(self, name: str) -> list[tuple[int, float]]:
        return self.run.series(name)

    def finite_series(self, name: str) -> list[tuple[int, float]]:
        return [(s, v) for s, v in self.series(name) if math.isfinite(v)]

    @property
    def fine_tune_mode(self) -> str | None:
        if not self.config:
            return None
        return "lora" if self.config.get("use_peft") or self.config.get("load_in_4bit") or self.config.get("load_in_8bit") else "full"

    @property
    def learning_rate(self) -> tuple[float | None, Evidence | None]:
        """The configured rate, else the peak logged one (after warm-up)."""
        lr = self.config.get("learning_rate")
        if isinstance(lr, (int, float)) and not isinstance(lr, bool):
            return float(lr), Evidence(metric="learning_rate (config)", value=float(lr))
        logged = self.finite_series("learning_rate")
        if logged:
            step, peak = max(logged, key=lambda p: p[1])
            return peak, Evidence(metric="learning_rate", step=step, value=peak)
        return None, None

    @property
    def gpu_has_bf16(self) -> bool | None:
        name = self.run.request.get("gpu")
        if not name or str(name).lower() == "cpu":
            return None
        try:
            from mcp_server.gpus import lookup_gpu

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
    def diverged(self) -> bool:
        kl = finite(v for _, v in self.series("kl"))
        return bool(self.first_nonfinite("loss") or self.first_nonfinite("grad_norm") or self.grad_spikes()
                    or (kl and max(kl) >= KL_WARN))

    def lr_range(self) -> tuple[float, float]:
        from mcp_server.recipe.rules import LR_RANGE

        mode = self.fine_tune_mode
        if mode is None:  # unknown: the union, so neither a full nor a LoRA run is flagged wrongly
            return LR_RANGE["full"][0], LR_RANGE["lora"][1]
        return LR_RANGE[mode]

    def recipe_lr(self) -> float:
        from mcp_server.recipe.variants import BASE_RECIPE

        if self.fine_tune_mode == "lora":
            from mcp_server.emission.emit import LORA_LEARNING_RATE

            return LORA_LEARNING_RATE
        return BASE_RECIPE["learning_rate"]

    def divergence_patch(self) -> dict:
        """The triage order's fix for a diverging run: precision first, then the learning rate, then clipping."""
        patch: dict = {}
        if self.config.get("fp16") and self.gpu_has_bf16 is not False:
            patch.update(fp16=False, bf16=True)
        lr, _ = self.learning_rate
        if lr is not None:
            low, high = self.lr_range()
            patch["learning_rate"] = self.recipe_lr() if lr > high else max(lr / 4, low)
        grad_clip = self.config.get("max_grad_norm")
        if isinstance(grad_clip, (int, float)) and (grad_clip <= 0 or grad_clip > 1.0):
            patch["max_grad_norm"] = 1.0
        return patch

    def variant_patch(self, variant: str) -> dict:
        """The variant as emit_grpo_config writes it (the base recipe's loss_type unless the variant sets its
        own, and the off-policy structure its clip needs), less what the run already has."""
        from mcp_server.recipe.variants import variant_values

        ga = self.config.get("gradient_accumulation_steps", 1)  # TRL's default is 1
        wanted = variant_values(variant, ga if isinstance(ga, int) else 1)
        own_structure = {"steps_per_generation", "generation_batch_size", "num_iterations"} & set(self.config)
        if own_structure:  # the run already goes off-policy its own way (and TRL rejects two of them together)
            wanted.pop("steps_per_generation", None)
        return {k: v for k, v in wanted.items() if self.config.get(k) != v}


def finding(code: str, severity: Severity, evidence: list[Evidence], explanation: str, patch: dict | None = None):
    return DiagnosisFinding(code=code, severity=severity, evidence=evidence, explanation=explanation, patch=patch or {})
