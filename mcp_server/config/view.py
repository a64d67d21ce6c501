"""A typed, read-only view of a GRPO config dict, generated from TRL's fields.

A config travels as the dict `trl grpo --config` reads (config.yaml's keys). `GRPOView(values)` reads it by
attribute: `view.num_generations` is the dict's value, else TRL's default, typed as TRL declares the field (mapped to
what YAML holds: an enum is its string). The fields, their types and defaults are generated from TRL's four config
dataclasses (recipe.trl_fields.probe_installed_trl) into config/grpo_fields.py, checked in so that the server, which
never imports TRL, reads them for free; tests/test_config_view.py fails when the installed TRL drifts from it
(regenerate: `python -m mcp_server.recipe.config_view --write`).

Three readings of the same dict:
- `GRPOView(values)`: unset fields read as the generated TRL's defaults;
- `GRPOView(values, defaults)`: unset fields read as these defaults (validation passes the installed TRL's, or none
  when no training interpreter answered);
- `GRPOView.given(values)`: only what the config says; unset fields read as None.
A deprecated field and the one that replaces it (`ALIASES`, read from the declaration that deprecates it: transformers
5.25's gradient_checkpointing -> activation_checkpointing) read as one value, either name, as TrainingArguments
resolves them.
A value is returned as the dict holds it: the annotation is what TRL accepts, and validation (recipe.rules) is what
checks a value has it. Keys that are not fields of this TRL (removed or renamed ones) have no attribute; read them
from the dict.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar


def _field(name: str) -> property:
    def read(self: ConfigView) -> Any:
        if name in self._values:
            return self._values[name]
        return copy.copy(self._defaults.get(name))  # a list default is the caller's to change

    return property(read, doc=f"the config's {name}, else the default")


def _aliased(name: str, new: str, old: str) -> property:
    """A field of a deprecated pair (ALIASES: old -> new) read as TrainingArguments.__post_init__ resolves it: the new
    name's value when set, else the old one's, and after that both hold it; unset, the same rule over the defaults
    (TRL's gradient_checkpointing default True, activation_checkpointing's None: True)."""
    def read(self: ConfigView) -> Any:
        for where in (self._values, self._defaults):
            for key in (new, old):
                if where.get(key) is not None:
                    return copy.copy(where[key])
        return None

    return property(read, doc=f"the config's {name} (or {old if name == new else new}, its alias), else the default")


class ConfigView:
    """Attribute access to a config dict; each annotated class attribute of a subclass is a field and its default."""

    __slots__ = ("_values", "_defaults")
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    ALIASES: ClassVar[dict[str, str]] = {}  # {deprecated field: its replacement}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        defaults = {}
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if "ClassVar" in str(annotation):
                continue
            defaults[name] = cls.__dict__.get(name)
            setattr(cls, name, _field(name))
        cls.DEFAULTS = defaults
        for old, new in cls.ALIASES.items():
            if old in defaults and new in defaults:
                for name in (old, new):
                    setattr(cls, name, _aliased(name, new, old))

    def __init__(self, values: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> None:
        self._values = values
        self._defaults = self.DEFAULTS if defaults is None else defaults

    @classmethod
    def given(cls, values: Mapping[str, Any]):
        """The view of only what `values` says: an unset field reads as None."""
        return cls(values, {})
