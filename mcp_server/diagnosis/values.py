"""One logged value as diagnosis reads it: a number (NaN and infinities kept), None, or bad input named."""

from __future__ import annotations

import math

# TRL computes its metrics in float32 tensors: a logged value beyond float32's range is an overflow, read as an
# infinity (a divergence finding), never as a number the rules' sums and fits would overflow on.
FLOAT32_MAX = 3.4028234663852886e38
# Metric names the rules read, and the prefixes of TRL's metric families: a value of another type there (a list,
# an object, a word) is bad input, named, never skipped into a clean bill.
METRIC_NAMES = {"loss", "grad_norm", "learning_rate", "reward", "reward_std", "frac_reward_zero_std", "kl",
                "entropy", "aux_loss"}
METRIC_PREFIXES = ("rewards/", "completions/", "clip_ratio/", "sampling/", "dynamic_sampling/")


def to_number(value) -> float | None:
    """A logged value as a float; None when missing or not numeric ('nan'/'inf' stay non-finite floats). A value
    beyond float32's range (1e308, a 4000-digit integer) is an infinity of its sign."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text or text.lower() in ("none", "null"):
            return None
        try:
            value = float(text)
        except ValueError:
            return None
    if isinstance(value, int):
        if abs(value) <= FLOAT32_MAX:
            return float(value)
        return math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        return value if not math.isfinite(value) or abs(value) <= FLOAT32_MAX else math.copysign(math.inf, value)
    return None


def is_metric(name: str) -> bool:
    return name in METRIC_NAMES or name.startswith(METRIC_PREFIXES)


def wrong_type(value) -> str | None:
    """What is wrong with a metric's value, None when it is a number, a numeric text, NaN/inf or null."""
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return None
    if isinstance(value, str) and (to_number(value) is not None or value.strip().lower() in ("", "none", "null")):
        return None
    shown = repr(value)
    return f"{type(value).__name__} {shown[:40] + ('...' if len(shown) > 40 else '')}"
