"""Is the checkpoint better than its base on the same goldens? The exact conditional McNemar test.

Only the goldens the two models disagree on carry evidence: `gained` (the checkpoint passes, the base failed)
and `lost` (the reverse). Under "no difference" each of the d = gained + lost disagreements is a fair coin, so
`gained` ~ Binomial(d, 1/2) given d. The two-sided p-value is exact for every count, small ones included,
where the normal approximations are not: a paired Wald interval calls 4 gained / 0 lost "better beyond noise"
although a fair coin gives 4 of 4 one way or the other with probability 0.125.

The interval reported beside it inverts the same test: the Clopper-Pearson interval of pi = P(gain | a
disagreement), mapped to the difference in pass rate, (d / n) * (2 pi - 1). Its lower end lies above 0 exactly
when the two-sided exact test rejects at 5% (p < 0.05: 6 of 6, 8 of 9, ...), so the verdict and the interval
always agree. It is conditional on the number of disagreements (d / n is taken as observed); with no
disagreements it is 0 to 0: these goldens cannot tell the two models apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PairedComparison:
    n: int  # goldens compared
    gained: int  # checkpoint passes, base failed
    lost: int  # base passed, checkpoint fails
    difference: float  # (gained - lost) / n, in percentage points
    low: float  # ends of the 95% interval of the difference, in points (see the module docstring)
    high: float
    p_value: float  # two-sided exact conditional McNemar p-value


def mcnemar_exact_p(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value: twice the binomial(d, 1/2) tail beyond the larger count, at most 1.
    Integer arithmetic, so the value is exact up to the final division."""
    d = gained + lost
    if d == 0:
        return 1.0
    tail = sum(math.comb(d, k) for k in range(max(gained, lost), d + 1))
    return min(1.0, 2 * tail / 2**d)


def _tail_at_least(k: int, d: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(d, p), summed in log space (no overflow for large d)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    logs = [math.lgamma(d + 1) - math.lgamma(i + 1) - math.lgamma(d - i + 1) + i * log_p + (d - i) * log_q
            for i in range(k, d + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))


def clopper_pearson(k: int, d: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a binomial proportion, k successes of d, by bisection."""
    if d == 0:
        return 0.0, 1.0

    def solve(target, increasing) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(200):  # far past double precision; stops early once the bracket cannot shrink
            mid = (lo + hi) / 2
            if mid in (lo, hi):
                break
            value = increasing(mid)
            if value < target:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    # Lower end: P(X >= k | p) = alpha/2 (increasing in p). Upper end: P(X <= k | p) = alpha/2, i.e.
    # P(X >= k + 1 | p) = 1 - alpha/2 (also increasing in p).
    low = 0.0 if k == 0 else solve(alpha / 2, lambda p: _tail_at_least(k, d, p))
    high = 1.0 if k == d else solve(1 - alpha / 2, lambda p: _tail_at_least(k + 1, d, p))
    return low, high


def compare_paired(base: list[bool], other: list[bool]) -> PairedComparison:
    """Pass/fail of the base and of the other model on the same goldens, in the same order."""
    n = len(base)
    if n == 0 or n != len(other):
        raise ValueError("paired comparison needs the same items on both sides")
    gained = sum(1 for b, o in zip(base, other) if o and not b)
    lost = sum(1 for b, o in zip(base, other) if b and not o)
    d = gained + lost
    share = d / n * 100
    pi_low, pi_high = clopper_pearson(gained, d)
    low, high = (share * (2 * pi_low - 1), share * (2 * pi_high - 1)) if d else (0.0, 0.0)
    return PairedComparison(n=n, gained=gained, lost=lost, difference=(gained - lost) / n * 100, low=low, high=high,
                            p_value=mcnemar_exact_p(gained, lost))
