"""A typed recipe: the GRPO config being built, each value with why it has it and where it came from.

Emission builds a run's config as ordered steps, each `Recipe -> Recipe` (emission.steps.STEPS). A Recipe is never
changed in place: a step returns a new one, so no step can reach into another's state, and what each step did is
the difference between the recipe it got and the one it returned. A value keeps the setting it replaced
(`Setting.replaced`), so a later step that overrides an earlier one is visible in the value itself.

Sources say where a value came from (SOURCES). Values the recipe chose are always written, so a later TRL with other
defaults runs the same recipe; values copied from the request's inputs (the data set's fields, the rewards' import
paths) are written only where they differ from the installed TRL's default (`Recipe.written`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from mcp_server.config.grpo_fields import GRPOView

# Where a value came from, as a reason names it: the seed recipe and its variant (recipe.variants); the target
# hardware; the model and the fine-tuning mode; the run's environment and tools; a field of the request other than
# overrides (report_to, thinking, rewards' weights); the data set; the rewards as import paths; TRL's default written
# out so that it is seen; the run's measured samples; the request's overrides; the memory plan and the data set's
# size; the run directory.
SOURCES = {
    "recipe": "the recipe", "target": "the target", "model": "the model", "agentic": "the tool-calling turns",
    "request": "the request", "data": "the data set", "rewards": "the rewards", "trl_default": "TRL's default",
    "measured": "the run's measurement", "override": "an override", "plan": "the memory plan",
    "run": "the run directory",
}
COPIED = frozenset({"data", "rewards"})  # written only where they differ from the installed TRL's default


@dataclasses.dataclass(frozen=True)
class Setting:
    """One value of the recipe: the value, why it has it (the comment above it in config.yaml; "" says nothing),
    where it came from, and the setting of an earlier step that it replaced (None when it replaced none)."""

    value: Any
    reason: str = ""
    source: str = "recipe"
    replaced: Setting | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown source {self.source!r}: one of {', '.join(SOURCES)}")


class Recipe:
    """An ordered, read-only mapping of config field -> Setting, and the run's rewards (train/rewards.json, which
    reward_weights and reward_funcs follow); every change returns a new Recipe."""

    __slots__ = ("_settings", "rewards")

    def __init__(self, settings: Mapping[str, Setting] | Iterable[tuple[str, Setting]] = (),
                 rewards: Iterable[Any] = ()) -> None:
        self._settings: dict[str, Setting] = dict(settings)
        self.rewards: tuple[Any, ...] = tuple(rewards)  # reward specs (rewards.spec.RewardSpec), in order

    def _with(self, settings: Mapping[str, Setting]) -> Recipe:
        return Recipe(settings, self.rewards)

    @classmethod
    def of(cls, values: Mapping[str, Any], reasons: Mapping[str, str] | None = None, source: str = "recipe"
           ) -> Recipe:
        return cls().with_values(values, reasons, source)

    # ------------------------------------------------------------------ reading
    def __contains__(self, key: object) -> bool:
        return key in self._settings

    def __iter__(self):
        return iter(self._settings)

    def __len__(self) -> int:
        return len(self._settings)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Recipe) and (self._settings, self.rewards) == (other._settings, other.rewards)

    __hash__ = None  # mutable-looking equality: not a dict key

    def __repr__(self) -> str:
        return f"Recipe({self.values!r})"

    def setting(self, key: str) -> Setting | None:
        return self._settings.get(key)

    def get(self, key: str, default: Any = None) -> Any:
        found = self._settings.get(key)
        return default if found is None else found.value

    @property
    def values(self) -> dict[str, Any]:
        """The config dict as `trl grpo --config` reads it, in the recipe's order."""
        return {key: s.value for key, s in self._settings.items()}

    @property
    def reasons(self) -> dict[str, str]:
        """{field: why} for every value that says why."""
        return {key: s.reason for key, s in self._settings.items() if s.reason}

    def view(self, defaults: Mapping[str, Any] | None = None) -> GRPOView:
        """The values by field, unset ones read as `defaults` (the generated TRL's when None)."""
        return GRPOView(self.values, defaults)

    @property
    def given(self) -> GRPOView:
        """The values by field, unset ones read as None."""
        return GRPOView.given(self.values)

    # ------------------------------------------------------------------ changing (each returns a new Recipe)
    def with_value(self, key: str, value: Any, reason: str | None = None, source: str = "recipe") -> Recipe:
        """`key` set to `value` by `source`; `reason` None keeps the reason the value had (a step that changes a
        value without a word of its own, such as the target's vLLM mode)."""
        return self.with_values({key: value}, None if reason is None else {key: reason}, source)

    def with_values(self, values: Mapping[str, Any], reasons: Mapping[str, str] | None = None,
                    source: str = "recipe", first: bool = False) -> Recipe:
        """Each of `values` set by `source`, with its reason from `reasons` (else the one it had). A key already set
        keeps its place; a new one goes after the others, or before them all with `first` (the model's and the data
        set's sections lead config.yaml)."""
        reasons = reasons or {}
        return self._laid({key: (value, reasons.get(key), source) for key, value in values.items()}, first)

    def merged(self, other: Recipe, first: bool = False) -> Recipe:
        """`other`'s settings laid over this recipe, each with its own source; one that says no reason keeps the
        reason the value had."""
        return self._laid({key: (s.value, s.reason or None, s.source) for key, s in other._settings.items()}, first)

    def _laid(self, new: Mapping[str, tuple[Any, str | None, str]], first: bool) -> Recipe:
        changed = {}
        for key, (value, reason, source) in new.items():
            before = self._settings.get(key)
            if reason is None:
                reason = before.reason if before else ""
            replaced = before if before is not None and before.value != value else (before.replaced if before else None)
            changed[key] = Setting(value, reason, source, replaced)
        if first:
            return self._with({**changed, **{k: s for k, s in self._settings.items() if k not in changed}})
        return self._with({**self._settings, **changed})

    def explained(self, reasons: Mapping[str, str]) -> Recipe:
        """The same values with new reasons (a key the recipe does not hold is passed over)."""
        settings = dict(self._settings)
        for key, reason in reasons.items():
            if key in settings:
                settings[key] = dataclasses.replace(settings[key], reason=reason)
        return self._with(settings)

    def with_rewards(self, rewards: Iterable[Any]) -> Recipe:
        return Recipe(self._settings, rewards)

    def without(self, keys: Iterable[str]) -> Recipe:
        dropped = set(keys)
        return self._with({k: s for k, s in self._settings.items() if k not in dropped})

    def written(self, trl_defaults: Mapping[str, Any]) -> Recipe:
        """What config.yaml holds: every value the recipe chose, and a value copied from the request's inputs only
        where it differs from the installed TRL's default (`trl_defaults`; empty when no TRL answered)."""
        return self._with({k: s for k, s in self._settings.items()
                           if s.source not in COPIED or k not in trl_defaults or trl_defaults[k] != s.value})
