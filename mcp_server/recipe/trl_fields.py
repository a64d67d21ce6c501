"""What the installed TRL accepts: its config fields, defaults, help texts and choices.

"The installed TRL" is the one that will train: when LLM_FINETUNING_PYTHON names another interpreter, the
probe runs there (`python -m mcp_server.recipe.trl_fields`) and answers in JSON; otherwise in-process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from functools import lru_cache

from mcp_server.errors import UserInputError

# Where each YAML key of `trl grpo --config` comes from (the four dataclasses TRL's grpo script parses).
SECTIONS = ("GRPOScriptArguments", "GRPOConfig", "ModelConfig", "DatasetMixtureConfig")

# Enumerated fields and the values known for them; the installed TRL's help text narrows or extends these.
KNOWN_CHOICES: dict[str, list[str]] = {
    "loss_type": ["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"],
    "vllm_mode": ["server", "colocate"],
    "vllm_model_impl": ["transformers", "vllm"],
    "importance_sampling_level": ["token", "sequence"],
    "scale_rewards": ["group", "batch", "none"],
    "multi_objective_aggregation": ["sum_then_normalize", "normalize_then_sum"],
    "vllm_importance_sampling_mode": ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"],
}


def training_python() -> str:
    """The interpreter that will train (LLM_FINETUNING_PYTHON), default: this one."""
    return os.environ.get("LLM_FINETUNING_PYTHON") or sys.executable


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def _choices_from_help(name: str, help_text: str) -> list[str]:
    """Values named in the sentence of the help text that lists them ('Supported values are ...')."""
    match = re.search(r"(Supported (?:values|options) are:?|Must be one of)(.{0,400}?)(\.\s|$)", help_text, re.S)
    if not match:
        return []
    found = re.findall(r"[`']([a-z_]+)['`]", match.group(2))
    known = KNOWN_CHOICES.get(name, [])
    # Keep only tokens that look like this field's values (help texts also quote other field names).
    return [v for v in dict.fromkeys(found) if v in known or "_" not in v or name == "loss_type"]


def probe_installed_trl() -> dict:
    """Introspect the installed TRL: version, every config key with owner, default, type and help."""
    import dataclasses

    import trl
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig
    from trl.scripts.grpo import GRPOScriptArguments

    fields: dict[str, dict] = {}
    for owner in (GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig):
        for f in dataclasses.fields(owner):
            if not f.init or f.name in fields:
                continue
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                default = f.default_factory()  # type: ignore[misc]
            else:
                default = None
            help_text = f.metadata.get("help", "") or ""
            fields[f.name] = {
                "owner": owner.__name__,
                "default": _jsonable(default),
                "type": str(f.type),
                "help": help_text,
                "deprecated": "deprecated" in help_text.lower()[:200],
            }
    choices = {}
    for name, known in KNOWN_CHOICES.items():
        if name in fields:
            parsed = _choices_from_help(name, fields[name]["help"])
            choices[name] = parsed if len(parsed) >= 2 else known
    return {"trl_version": trl.__version__, "fields": fields, "choices": choices}


@lru_cache(maxsize=4)
def _probe_cached(python: str) -> dict:
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        try:
            return probe_installed_trl()
        except ImportError as exc:
            raise UserInputError("trl", f"TRL is not importable in {python}: {exc}. Install it: pip install trl") from None
    proc = subprocess.run([python, "-m", "mcp_server.recipe.trl_fields"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise UserInputError(
            "LLM_FINETUNING_PYTHON",
            f"could not introspect TRL with {python}: {proc.stderr.strip()[-400:]}. "
            "Point it at a Python that has trl and this package installed.",
        )
    return json.loads(proc.stdout)


def installed_trl() -> dict:
    return _probe_cached(training_python())


def trl_defaults() -> dict:
    return {name: meta["default"] for name, meta in installed_trl()["fields"].items()}


def instantiate_grpo_config(values: dict, world_size: int) -> str | None:
    """Build a real GRPOConfig from the GRPOConfig part of `values`, as if on the target: the local bf16/GPU
    check is neutralised and `world_size` is the target's. Returns TRL's error message, or None when accepted."""
    import tempfile
    import warnings
    from unittest import mock

    import transformers.training_args as targs
    from trl import GRPOConfig

    class TargetGRPOConfig(GRPOConfig):
        @property
        def world_size(self):  # the target's, not this machine's
            return world_size

    values = dict(values)
    values.setdefault("output_dir", tempfile.gettempdir())
    values["report_to"] = "none"
    with mock.patch.object(targs, "is_torch_bf16_gpu_available", lambda *a, **k: True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            TargetGRPOConfig(**values)
        except (ValueError, TypeError, AssertionError) as exc:
            return str(exc)
    return None


if __name__ == "__main__":  # the probe, run in the training interpreter
    print(json.dumps(probe_installed_trl()))
