"""Validation of the rewards: a reward source exists, each reward builds or imports where training runs, and the
weights match them."""

from __future__ import annotations

from pathlib import Path

from mcp_server.config import FIELD
from mcp_server.errors import UserInputError
from mcp_server.interpreter import user_code_allowed
from mcp_server.recipe.context import Context, Rule, finding
from mcp_server.recipe.models import Finding
from mcp_server.recipe.scoped import scoped
from mcp_server.rewards import build_reward_funcs  # resolves names and dotted paths, clear errors
from mcp_server.rewards.dotted import find_dotted, nearest_rewards
from mcp_server.rewards.registry import ParamsRefused
from mcp_server.rewards.source_only import import_user
from mcp_server.worker import in_training
from mcp_server.worker_targets import REWARD_PROBLEMS


def rule_rewards(ctx: Context) -> list[Finding]:
    names = [s["name"] if isinstance(s, dict) else s.name for s in (ctx.reward_specs or [])]
    config_funcs = ctx.given.reward_funcs or []
    if isinstance(config_funcs, str):
        config_funcs = [config_funcs]
    if not names and not config_funcs and not ctx.given.reward_model_name_or_path:
        return [finding("no_reward", FIELD.reward_funcs, "error", "no reward source: GRPO has nothing to optimise.",
                        "add reward_funcs (registry names or dotted paths) or a rewards.json beside the config")]
    specs = [s if isinstance(s, dict) else s.model_dump() for s in (ctx.reward_specs or [])]
    if ctx.trl["fields"]:
        # Rewards import what training has (math-verify, transformers, the person's modules): resolve them in
        # the training interpreter, which answered for TRL's fields above.
        problems = in_training(REWARD_PROBLEMS, specs, config_funcs)
    else:
        problems = reward_problems(specs, config_funcs)
    out = [finding("reward_unresolvable", field, "error", message, fix) for field, message, fix in problems]
    weights = ctx.given.reward_weights
    count = len(ctx.reward_specs or config_funcs)
    if weights is not None and count and len(weights) != count:
        out.append(finding("reward_weights_mismatch", FIELD.reward_weights, "error",
                           f"{len(weights)} reward_weights for {count} rewards.", "give one weight per reward"))
    numbers = [w for w in weights or [] if isinstance(w, (int, float)) and not isinstance(w, bool)]
    if weights and len(numbers) == len(weights) and not any(numbers):
        # grpo_trainer.py: rewards = (rewards_per_func * reward_weights).nansum(dim=1): all zero, every advantage 0
        out.append(finding("reward_weights_all_zero", FIELD.reward_weights, "error",
                           "every reward weight is 0: TRL sums the weighted rewards, so every completion scores 0, "
                           "every group has zero spread and no advantage: nothing trains.",
                           "give the reward to optimise a positive weight"))
    return out


RULES = (Rule(rule_rewards),)  # topic "rewards"


@scoped  # the lever search asks once per validation of one run's rewards
def reward_problems(specs: list[dict], config_funcs: list[str]) -> list[tuple[str, str, str]]:
    """(field, message, fix) for each reward that cannot be built or imported here."""
    out, reported = [], set()
    if specs:
        for i, spec in enumerate(specs):
            try:
                build_reward_funcs([spec])
            except Exception as exc:  # any failure to build is a finding, never a crash
                reported.add(spec.get("name") if isinstance(spec, dict) else spec)
                fix = exc.fix if isinstance(exc, ParamsRefused) else None
                if fix:  # the problem is the params, not the name: said on its field, its own fix
                    out.append((f"rewards[{i}].params", str(exc).removesuffix(f"; {fix}"), fix))
                    continue
                out.append((f"rewards[{i}].name", str(exc), "use a registry name (list_rewards) or an importable "
                                                            "dotted path"))
    for i, name in enumerate(config_funcs):
        if name in TRL_REWARDS or name in reported:  # a reward already named above is not a second error
            continue
        error = _resolve_dotted(name)
        if error:
            near = nearest_rewards(name, TRL_REWARDS)  # TRL's names only when close (issue 49)
            out.append((f"reward_funcs[{i}]", error,
                        f"did you mean {' or '.join(repr(n) for n in near)}?" if near else
                        "use a TRL reward name or an importable dotted path (module.function)"))
    return out


TRL_REWARDS = ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward", "get_soft_overlong_punishment")


def _resolve_dotted(name: str) -> str | None:
    import sys

    if "." not in name:
        return f"'{name}' is neither a TRL reward name nor a dotted import path"
    module_name, attr = name.rsplit(".", 1)
    if not user_code_allowed():  # the read-only mode: found in its source, never imported
        try:
            find_dotted(name, "reward_funcs")
        except UserInputError as exc:
            return str(exc).removeprefix("reward_funcs: ")
        return None
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = import_user(module_name)
    except Exception as exc:
        return f"cannot import '{module_name}' for reward '{name}': {exc}"
    finally:
        sys.path.pop(0)
    if not callable(getattr(module, attr, None)):
        return f"'{module_name}' has no callable '{attr}'"
    return None
