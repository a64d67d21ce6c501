"""The GRPO config's one home, on the ground floor so that every floor reads it the same way.

- `grpo_fields.GRPOView`: a config dict read by attribute, typed and defaulted as TRL declares each field (generated
  from the installed TRL's dataclasses; `view.ConfigView` is the mechanism);
- `trl_default(name)`: the one answer to "TRL's default for field `name` in the installed TRL". No other module
  writes a TRL default as a literal (tests/test_config_home.py reads the source to hold that);
- `FIELD`: a TRL field's name, checked: `FIELD.max_completion_length` is "max_completion_length", and a name that is
  no field of the generated TRL raises AttributeError where it is written (at import, for a module-level use), so a
  misspelt or renamed field fails loudly instead of never matching. Modules that name a field (a finding's field, a
  patch's key, a lever) use it; modules that read a value read it through `GRPOView`.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from mcp_server.config.grpo_fields import TRL_VERSION, GRPOView

__all__ = ["FIELD", "GRPOView", "TRL_VERSION", "key_for", "trl_default"]


class _FieldNames:
    """The names of the generated TRL's GRPO config fields, by attribute (see the module's docstring)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> str:
        if name in GRPOView.DEFAULTS:
            return name
        raise AttributeError(f"{name!r} is not a GRPO config field of TRL {TRL_VERSION}")


FIELD = _FieldNames()


def trl_default(name: str) -> Any:
    """TRL's default for the config field `name`. In an interpreter that has imported TRL (the training
    interpreter: sampling, the trainer, the agentic checks) it is read from TRL's own dataclasses, so a TRL other
    than the generated one answers for itself; elsewhere (the server, which never imports TRL) it is the generated
    table's, which tests/test_config_view.py holds equal to the installed TRL. A name that is no field raises
    KeyError: a caller asking for a field TRL does not have is a bug, not a None."""
    trl = sys.modules.get("trl")
    if trl is not None and getattr(trl, "__version__", TRL_VERSION) != TRL_VERSION:
        from trl import GRPOConfig, ModelConfig

        for config in (GRPOConfig, ModelConfig):
            field = config.__dataclass_fields__.get(name)
            if field is not None:
                if field.default is not dataclasses.MISSING:
                    return field.default
                if field.default_factory is not dataclasses.MISSING:
                    return field.default_factory()
    if name not in GRPOView.DEFAULTS:
        raise KeyError(f"{name!r} is not a GRPO config field of TRL {TRL_VERSION}")
    value = GRPOView.DEFAULTS[name]
    return list(value) if isinstance(value, list) else value


def key_for(values: Any, name: str) -> str:
    """The key that sets field `name` in the config `values`: the field that replaces it (GRPOView.ALIASES) where
    `values` already holds that one, since TrainingArguments reads the new name first and a patch of the old name
    would change nothing there; else `name` itself. A patch (a memory lever, a diagnosis' fix) names its key so."""
    new = GRPOView.ALIASES.get(name)
    return new if new is not None and new in values else name
