"""What counts as a success in the review: the default rule, or an explicit threshold on the weighted total,
refused when it cannot tell success from failure.

The base success rate routes a run (GRPO, or SFT first) and the gate trusts it, so a threshold that every
completion meets (at or below the lowest total the rewards can give), one a malformed completion (format reward
0) can reach, or one no completion can reach is an input error, not a rate.
A reward's role (task, format, shape) and range are what its factory declares (rewards.declared: the `Role:` line,
a range bound naming a parameter reads the spec's value); a reward of unknown range (a dotted path, or one whose
scores depend on the samples) is taken to reach from min(0, its lowest score on the samples) to max(0, its highest).
"""

from __future__ import annotations

import inspect
import math

from mcp_server.errors import UserInputError
from mcp_server.rewards.registry import REGISTRY
from mcp_server.rewards.spec import RewardSpec


def role_of(spec: RewardSpec) -> str | None:
    """The role its factory declares (task, format, shape); None for a reward outside the registry."""
    reward = REGISTRY.get(spec.name.strip())
    return reward.role if reward else None


def wrapped_spec(spec: RewardSpec) -> RewardSpec | None:
    """The reward a length_penalty wraps, as a spec."""
    inner = spec.params.get("reward") if spec.name == "length_penalty" else None
    if isinstance(inner, str):
        inner = {"name": inner}
    return RewardSpec.model_validate(inner) if isinstance(inner, dict) else None


def is_task_spec(spec: RewardSpec) -> bool:
    inner = wrapped_spec(spec)
    return role_of(spec) == "task" or (inner is not None and is_task_spec(inner))


def is_format_spec(spec: RewardSpec) -> bool:
    return role_of(spec) == "format"


def _default(name: str, param: str):
    return inspect.signature(REGISTRY[name].factory).parameters[param].default


def reward_range(spec: RewardSpec) -> tuple[float, float] | None:
    """(lowest, highest) score the reward can give before its weight; None when unknown (a dotted path)."""
    name = spec.name.strip()
    declared = REGISTRY[name].score_range(spec.params) if name in REGISTRY else None
    if declared is not None:
        return declared
    if name == "length_penalty":
        inner = wrapped_spec(spec)
        inner_range = reward_range(inner) if inner else None
        if inner_range is None:
            return None
        penalty = float(spec.params.get("max_penalty", _default(name, "max_penalty")))
        low, high = inner_range
        return (min(low, 0.0) - penalty if low <= 0 else 0.0), high
    return None


def _weighted(spec: RewardSpec, values: list[float]) -> tuple[float, float]:
    """(lowest, highest) weighted contribution of one reward."""
    known = reward_range(spec)
    if known is None:
        real = [v for v in values if not math.isnan(v)]
        known = (min([0.0, *real]), max([0.0, *real]))
    ends = (spec.weight * known[0], spec.weight * known[1])
    return min(ends), max(ends)


def check_threshold(specs: list[RewardSpec], scores: list[list[float]], threshold: float | None) -> None:
    """Refuse a threshold that cannot tell a success from a failure (UserInputError('success_threshold'))."""
    if threshold is None:
        return
    if not math.isfinite(threshold):
        raise UserInputError("success_threshold", f"must be a finite number, got {threshold}")
    ranges = [_weighted(s, v) for s, v in zip(specs, scores)]
    lowest, highest = sum(r[0] for r in ranges), sum(r[1] for r in ranges)
    if threshold <= lowest:
        raise UserInputError(
            "success_threshold",
            f"{threshold:g} is at or below the lowest total the rewards can give ({lowest:g}): every completion, "
            f"however wrong, would count as a success. Use a value in ({lowest:g}, {highest:g}], or leave it out "
            "for the default rule",
        )
    if threshold > highest:
        raise UserInputError(
            "success_threshold",
            f"{threshold:g} is above the highest total the rewards can give ({highest:g}): nothing could count as "
            f"a success. Use a value in ({lowest:g}, {highest:g}]",
        )
    formats = [i for i, s in enumerate(specs) if is_format_spec(s)]
    if formats:
        malformed_best = sum(r[1] for i, r in enumerate(ranges) if i not in formats)
        malformed_best += sum(min(0.0, r[1]) for i, r in enumerate(ranges) if i in formats)  # format scores 0
        if threshold <= malformed_best:
            raise UserInputError(
                "success_threshold",
                f"{threshold:g} counts malformed output as success: a completion the format reward scores 0 can "
                f"still total {malformed_best:g}. Use a value above {malformed_best:g} (at most {highest:g})",
            )


def is_success(
    specs: list[RewardSpec], scores: list[list[float]], i: int, total: float, threshold: float | None
) -> bool:
    if threshold is not None:
        return not math.isnan(total) and total >= threshold
    required = [r for r, spec in enumerate(specs) if is_task_spec(spec) or is_format_spec(spec)]
    if any(is_task_spec(s) for s in specs):
        return all(scores[r][i] > 0 for r in required)  # NaN > 0 is False
    return not math.isnan(total) and total > 0 and all(scores[r][i] > 0 for r in required)


def success_rule_text(specs: list[RewardSpec], threshold: float | None) -> str:
    if threshold is not None:
        return f"total reward >= {threshold:g}"
    task = [s.name for s in specs if is_task_spec(s)]
    form = [s.name for s in specs if is_format_spec(s)]
    if task:
        return "every task and format reward scores > 0 (" + ", ".join(task + form) + ")"
    rule = "total reward > 0" + (f" and {', '.join(form)} > 0" if form else "")
    own = list(dict.fromkeys(s.name.strip() for s in specs if role_of(s) is None))
    if own:  # a person's reward: not known to be a task reward, nor known not to be one (walk 9)
        return (f"{rule} (the rule for rewards of unknown role: {', '.join(own)} "
                f"{'is your own reward' if len(own) == 1 else 'are your own rewards'}, not declared task, format or "
                "shape; give success_threshold for another rule)")
    return f"{rule} (none of the rewards configured is a task reward: {', '.join(s.name for s in specs)})"
