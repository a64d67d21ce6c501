"""What the installed TRL accepts: its config fields, defaults, help texts and choices.

"The installed TRL" is the one that will train: the probe and GRPOConfig run in the training interpreter
(mcp_server.worker.in_training: in-process when that is this Python, else in its persistent worker). The
fields are fetched once per interpreter and cached here, so later validations cost no round trip for them.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.interpreter import require_training_python
from mcp_server.worker import in_training
from mcp_server.worker_targets import GRPO_BATCH, INSTANTIATE_GRPO_CONFIG, PROBE_INSTALLED_TRL

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


_PLAIN = (str, int, float, bool, type(None))  # what json.dumps always takes (NaN and infinities included)


def _jsonable(value):
    if type(value) in _PLAIN:  # most config values: no trial dump
        return value
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


@functools.lru_cache(maxsize=1)  # the installed TRL does not change under a running interpreter
def probe_installed_trl() -> dict:
    """Introspect the installed TRL: version, every config key with owner, default, type and help. Kept on disk
    per install (`_probe_cache_path`): a later process reads it instead of importing TRL's experimental trainer
    and walking ~300 dataclass fields (about 2 s of a warm-up on a loaded 2-core machine)."""
    path = _probe_cache_path()
    if path is not None:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    text = json.dumps(_probe(), default=str)  # read back as the worker's answer and the cached file are
    if path is not None:
        _write_quietly(path, text)
    return json.loads(text)


def _probe_cache_path():
    """The probe's file for this interpreter and these installed TRL and transformers, named by a hash of their
    versions, the modification times of the files that declare the probed config classes (an edited editable
    install counts) and of this module; None when TRL is not installed here."""
    import hashlib
    import importlib.metadata
    import importlib.util
    import os
    import sys
    from pathlib import Path

    from mcp_server.tiny import cache_root

    try:
        trl_dir = Path(importlib.util.find_spec("trl").submodule_search_locations[0])
        transformers_dir = Path(importlib.util.find_spec("transformers").submodule_search_locations[0])
        parts = [sys.executable, importlib.metadata.version("trl"), importlib.metadata.version("transformers")]
    except (AttributeError, TypeError, IndexError, ImportError, ValueError, importlib.metadata.PackageNotFoundError):
        return None
    files = [__file__, transformers_dir / "training_args.py", *(trl_dir / name for name in (
        "trainer/grpo_config.py", "trainer/base_config.py", "trainer/model_config.py", "scripts/grpo.py",
        "scripts/utils.py", "experimental/async_grpo/async_grpo_config.py"))]
    for file in files:
        try:
            parts.append(f"{file}:{os.stat(file).st_mtime_ns}")
        except OSError:
            parts.append(f"{file}:-")
    key = hashlib.sha256("\n".join(map(str, parts)).encode()).hexdigest()[:20]
    return cache_root() / "trl-fields" / f"{key}.json"


def _write_quietly(path, text: str) -> None:
    """Write whole or not at all (a temporary file renamed into place); an unwritable cache is no error."""
    import os
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".probe-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass


def _probe() -> dict:
    import dataclasses

    import transformers
    import trl
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig
    from trl.scripts.grpo import GRPOScriptArguments

    fields: dict[str, dict] = {}
    aliases: dict[str, str] = {}
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
                "declared_in": _declared_in(owner, f.name),
                "default": _jsonable(default),
                "type": type_text(_annotation(owner, f)),
                "help": help_text,
                "deprecated": "deprecated" in help_text.lower()[:200],
            }
            alias = _alias_of(owner, f.name)
            if alias is not None:  # deprecated by a base class whatever the override's help says
                aliases[f.name] = alias[0]
                fields[f.name].update(deprecated=True, deprecation=alias[1], deprecated_in=alias[2])
    choices = {}
    for name, known in KNOWN_CHOICES.items():
        if name in fields:
            parsed = _choices_from_help(name, fields[name]["help"])
            choices[name] = parsed if len(parsed) >= 2 else known
    return {
        "trl_version": trl.__version__,
        "transformers_version": transformers.__version__,
        "fields": fields,
        "choices": choices,
        "async_fields": _async_only_fields(fields),
        "aliases": {old: new for old, new in aliases.items() if new in fields},
    }


def _alias_of(owner: type, name: str) -> tuple[str, str, str] | None:
    """(the field it aliases, the help that says so, the declaring class) where a dataclass in `owner`'s MRO declares
    `name` a deprecated alias ("Deprecated alias of `activation_checkpointing`, will be removed in v6": transformers
    5.25's TrainingArguments). TRL's base config re-declares gradient_checkpointing only to default it True, with a
    help that says nothing of it, and TrainingArguments.__post_init__ still warns (FutureWarning) and copies it to
    the new name: the alias is read from the declaration that makes it one, not from the most derived."""
    for cls in owner.__mro__:
        if name not in cls.__dict__.get("__annotations__", {}):  # only a class whose body declares it
            continue
        declared = cls.__dict__.get("__dataclass_fields__", {}).get(name)
        help_text = (declared.metadata.get("help", "") or "") if declared is not None else ""
        match = re.search(r"[Dd]eprecated alias of `(\w+)`", help_text)
        if match:
            return match[1], help_text, f"{cls.__module__}.{cls.__qualname__}"
    return None


def installed_aliases() -> dict[str, str]:
    """{deprecated field: the field that replaces it} in the training interpreter's TRL and transformers (transformers
    5.25: gradient_checkpointing -> activation_checkpointing; 5.17: none): what a written config names instead."""
    return dict(installed_trl().get("aliases") or {})


def type_text(declared) -> str:
    """A field's declared type as its source writes it: `float`, `int | None`, `dict | str | None`. A class is its
    name (str() of one is "<class 'float'>", which no annotation reads like); a union or generic is str() of it.
    transformers declares warmup_steps, logging_steps, save_steps and eval_steps `float` (a value below 1 is a
    fraction of the run, training_args.py), so what a field accepts is read from this, not from its default (0)."""
    if isinstance(declared, type):
        return declared.__name__
    return str(declared).replace("typing.", "")


def _annotation(owner: type, field) -> object:
    """The field's type as its class body declares it, not `field.type`: transformers' HfArgumentParser rewrites
    `field.type` in place (an `X | None` becomes `X`) for every dataclass it parses, so in a process where TrlParser
    ran first the probe read `str` for `str | None` (the suite under xdist, where files share a worker)."""
    for cls in owner.__mro__:
        declared = cls.__dict__.get("__annotations__", {})
        if field.name in declared:
            return declared[field.name]
    return field.type


def _declared_in(owner: type, name: str) -> str:
    """The class whose body declares field `name` (the most derived one that annotates it), as 'module.Class':
    gradient_checkpointing_kwargs is transformers.training_args.TrainingArguments's, use_liger_kernel TRL's
    trl.trainer.base_config.BaseConfig's override. A deprecation belongs to the library that declares the field."""
    for cls in owner.__mro__:
        if name in cls.__dict__.get("__annotations__", {}):
            return f"{cls.__module__}.{cls.__qualname__}"
    return f"{owner.__module__}.{owner.__qualname__}"


def _async_only_fields(fields: dict) -> list[str]:
    """Fields only the experimental AsyncGRPOConfig has (a config holding one was written for another trainer)."""
    import dataclasses
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TRL warns that experimental APIs may change
            from trl.experimental.async_grpo import AsyncGRPOConfig
    except Exception:  # not shipped in this TRL, or its optional dependencies are missing
        return []
    return sorted(f.name for f in dataclasses.fields(AsyncGRPOConfig) if f.init and f.name not in fields)


_cache: dict[str, dict] = {}
_cache_lock = threading.Lock()


def installed_trl() -> dict:
    """The training interpreter's TRL: {trl_version, fields, choices}. Without a training interpreter, a
    UserInputError naming prepare_environment and LLM_FINETUNING_PYTHON."""
    python = require_training_python()
    with _cache_lock:
        if python not in _cache:
            try:
                _cache[python] = in_training(PROBE_INSTALLED_TRL)
            except ImportError as exc:
                raise UserInputError(
                    "trl", f"TRL is not importable in {python}: {exc}. Install it: pip install trl"
                ) from None
        return _cache[python]


def trl_defaults() -> dict:
    return {name: meta["default"] for name, meta in installed_trl()["fields"].items()}


def grpo_batch(values: dict, world_size: int, capability: str | None = "9.0") -> dict:
    """grpo_batch_layout in the training interpreter: TRL's own batch fields of a config it accepts."""
    return in_training(GRPO_BATCH, values, world_size, capability)


def grpo_config_error(values: dict, world_size: int, capability: str | None = "9.0") -> str | None:
    """TRL's own verdict on the GRPOConfig part of `values` for the target world size and GPU (its CUDA compute
    capability; None for a CPU target), in the training interpreter (see instantiate_grpo_config)."""
    return in_training(INSTANTIATE_GRPO_CONFIG, values, world_size, capability)


# transformers' device queries, answered as the target would answer them. TrainingArguments.__post_init__ calls
# these by name (is_torch_bf16_gpu_available: bf16 needs compute capability 8.0; is_torch_tf32_available: `.major
# < 8` is False in transformers/utils/import_utils.py); an NVIDIA target is none of the other accelerators the
# queries ask about (XLA, MPS, NPU, ...). tests/test_target_checks.py lists every is_torch_*_available the
# installed __post_init__ calls and fails on one this table does not answer.
def target_answers(capability: str | None) -> dict[str, bool]:
    """{query name: the target's answer} for a compute capability ('8.6'), or None for a CPU target."""
    major = int(str(capability).split(".")[0]) if capability else 0
    return {
        "is_torch_available": True,
        "is_torch_cuda_available": capability is not None,
        "is_torch_bf16_gpu_available": major >= 8,
        "is_torch_tf32_available": major >= 8,
        **{name: False for name in OTHER_ACCELERATORS},
    }


OTHER_ACCELERATORS = ("is_torch_hpu_available", "is_torch_mlu_available", "is_torch_mps_available",
                      "is_torch_musa_available", "is_torch_neuron_available", "is_torch_neuroncore_available",
                      "is_torch_npu_available", "is_torch_tpu_available", "is_torch_xla_available",
                      "is_torch_xpu_available")


def instantiate_grpo_config(values: dict, world_size: int, capability: str | None = "9.0") -> str | None:
    """Build a real GRPOConfig from the GRPOConfig part of `values`, as if on the target: transformers' device
    queries answer for the target's GPU (`target_answers`: a T4 rejects bf16 and tf32, an H100 accepts them, on
    any host) and `world_size` is the target's. Returns TRL's error message, or None when accepted."""
    try:
        _target_grpo_config(values, world_size, capability)
    except (ValueError, TypeError, AssertionError) as exc:
        return str(exc)
    except Exception as exc:  # TRL's own code fails on a value it takes from a YAML (a mapping for an object): so
        return _failed_on(exc, values)  # would `trl grpo --config`; named by the fields its failing line reads
    return None


def _failed_on(exc: Exception, values: dict) -> str:
    """TRL's (or transformers') crash building its config, naming the fields of `values` its failing line reads
    (`self.parallelism_config.cp_enabled` -> parallelism_config) and where that line is."""
    import traceback

    frame = traceback.extract_tb(exc.__traceback__)[-1]
    line = (frame.line or "").strip()
    named = [name for name in dict.fromkeys(re.findall(r"self\.(\w+)", line)) if name in values]
    where = "/".join(Path(frame.filename).parts[-3:])
    return (f"{', '.join(named) or 'a field'}: {type(exc).__name__}: {exc}, in {where} line {frame.lineno} "
            f"(`{line}`): TRL cannot build its GRPOConfig from {'this value' if len(named) < 2 else 'these values'}")


BATCH_FIELDS = ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations",
                "generation_batch_size", "steps_per_generation", "num_iterations")


def grpo_batch_layout(values: dict, world_size: int, capability: str | None = "9.0") -> dict:
    """The batch fields of the GRPOConfig TRL builds from `values` on the target (BATCH_FIELDS, and world_size):
    generation_batch_size and steps_per_generation as TRL's __post_init__ derives them, never restated here."""
    config = _target_grpo_config(values, world_size, capability)
    return {**{name: getattr(config, name) for name in BATCH_FIELDS}, "world_size": world_size}


def _target_grpo_config(values: dict, world_size: int, capability: str | None):
    """TRL's GRPOConfig of `values` as the target would build it (instantiate_grpo_config); raises TRL's error."""
    import tempfile
    import warnings
    from contextlib import ExitStack
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
    if values.get("deepspeed"):
        import importlib.util

        if importlib.util.find_spec("deepspeed") is None:
            # transformers cannot even parse a DeepSpeed config without the package (PackageNotFoundError):
            # the rest is checked; DeepSpeed itself checks its config on the training machine
            values.pop("deepspeed")
    with ExitStack() as stack, warnings.catch_warnings():
        for name, answer in target_answers(capability).items():
            if hasattr(targs, name):
                stack.enter_context(mock.patch.object(targs, name, lambda *a, _answer=answer, **k: _answer))
        # tf32 on the target: the host's torch flags stay as they are
        stack.enter_context(mock.patch.object(targs, "enable_tf32", lambda *a, **k: None))
        # TrainingArguments exports ACCELERATE_* / FSDP_* (torch_compile, deepspeed, fsdp): put back after, so a
        # validation never changes the launch environment the verdict pins (inspection.loader_env)
        stack.enter_context(mock.patch.dict("os.environ"))
        warnings.simplefilter("ignore")
        return TargetGRPOConfig(**values)


@functools.lru_cache(maxsize=1)
def _trl_parser():
    """TRL's parser for `trl grpo` (about 235 fields: building it costs most of a validation), built once per
    interpreter, and the action that sets each field (the first one of its dest, as argparse converts it)."""
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser
    from trl.scripts.grpo import GRPOScriptArguments

    parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig), exit_on_error=False)
    actions: dict = {}
    for action in parser._actions:
        actions.setdefault(action.dest, action)
    return parser, actions


def parse_like_trl(values: dict) -> dict:
    """The values `trl grpo --config` would end up with: TrlParser sets the YAML values as argparse defaults, and
    argparse converts a string default with the field's type (PyYAML reads `5e-7` as the string '5e-7'; TRL
    reads it as the float 5e-07). Returns {"values": converted, "errors": {key: TRL's parse error}}; a key that
    fails keeps its raw value. Runs in the training interpreter.

    Each field is converted on its own, as argparse does for a default it was given (`_get_value` on a string,
    nothing on any other value), so a validation costs the fields it has, not the parser's ~235 (the lever
    search validates a dozen configs a plan)."""
    import argparse

    parser, actions = _trl_parser()
    converted: dict = {}
    errors: dict[str, str] = {}
    for key, value in values.items():
        action = actions.get(key)
        if action is None or not isinstance(value, str):
            converted[key] = value
            continue
        try:
            converted[key] = parser._get_value(action, value)
        except argparse.ArgumentError as exc:
            errors[key] = str(exc)
            converted[key] = value
    return {"values": {k: _jsonable(v) for k, v in converted.items()}, "errors": errors}


def warm_trl() -> None:
    """Import TRL and build what validations use (its fields, its parser, a GRPOConfig), so the first
    validation costs what later ones do. The server's and the CLI's warm workers call it at start."""
    probe_installed_trl()
    parse_like_trl({})
    instantiate_grpo_config({}, 1)
