"""The rehearsal, in the training interpreter (issue 44; recipe.rehearsal asks for it through the worker): the run
built as train/train.py builds it (TRL's parser, the run's data set, its real reward functions, PEFT, the scheduler,
GRPOTrainer.__init__ or, with dynamic sampling, its subclass's), then trained for one optimizer step on the CPU, on
a miniature of the run's model: its own config.json with two small layers (the real tokenizer and chat template
where they are on disk, else the tiny model's as a stand-in).

What it returns is evidence, not a verdict (recipe.rehearsal maps it to findings): the stage that failed and the
exception TRL, transformers, peft, accelerate or a reward raised (its type, message and innermost frames), and what
the step showed (the completions of each group, their lengths, each reward's scores). Nothing is written outside a
temporary folder, and nothing is downloaded: the hub is switched off while it runs.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import io
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
from pathlib import Path
from unittest import mock

import yaml

MINI = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16)
MOE_MINI = dict(num_experts=4, num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
# While it runs: the hub switched off, and REHEARSAL_ENV set, so a reward can tell a rehearsal from training.
REHEARSAL_ENV = "LLM_FINETUNING_REHEARSAL"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", REHEARSAL_ENV: "1"}
# A reward that blocks (or crawls) must not hold a validation or a launch: the rehearsal stops after this long.
TIMEOUT_ENV, TIMEOUT_S = "LLM_FINETUNING_REHEARSAL_TIMEOUT_S", 180


class RehearsalTimeout(Exception):
    """The rehearsal ran past TIMEOUT_S (a reward that blocks or crawls, most likely)."""
_MINIATURES: dict[str, str] = {}  # config hash -> miniature directory, for this process's life


def rehearse_here(values: dict, model: dict, rewards: list | None, prompt_column: str, base_dir: str | None,
                  rows: int, dynamic_sampling: dict | None = None) -> dict:
    """Rehearse the (already miniaturised) config `values`: `model` says where the miniature comes from
    ({"config": config.json's dict, "tokenizer": a directory or None}); `rows`: prompts to keep;
    `dynamic_sampling`: the run's option (train/dynamic_sampling.json), which chooses the trainer class as
    train/train.py does (dynamic_sampling_trainer.trainer_class)."""
    started = time.monotonic()
    evidence: dict = {"stage": None, "error": None, "observed": {}}
    quiet = io.StringIO()  # the trainer's progress and logs: never on a stdio server's protocol channel
    with tempfile.TemporaryDirectory(prefix="rehearsal-") as tmp, _offline(), contextlib.chdir(base_dir or tmp), \
            contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), \
            _deadline(int(os.environ.get(TIMEOUT_ENV) or TIMEOUT_S)):
        stage = "model"
        try:
            values = dict(values, model_name_or_path=_miniature(model, Path(tmp)), output_dir=str(Path(tmp) / "out"),
                          disable_tqdm=True)
            config = Path(tmp) / "config.yaml"
            config.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
            stage = "parse"
            from mcp_server.config.loader import parse_config

            script_args, training_args, model_args, dataset_args = parse_config(["--config", str(config)])
            stage = "data"
            dataset = _rows(script_args, dataset_args, prompt_column, Path(tmp) / "datasets", rows)
            evaluation = _rows(script_args, dataset_args, prompt_column, Path(tmp) / "eval", rows,
                               training_args=training_args)
            stage = "rewards"
            seen: dict = {}
            funcs = _recorded(_reward_funcs(rewards, script_args), seen)
            stage = "init"
            from trl import get_peft_config

            from mcp_server.recipe.dynamic_sampling_trainer import trainer_class

            cls, extra = trainer_class(dynamic_sampling)  # the class train/train.py builds
            trainer = cls(model=model_args.model_name_or_path, reward_funcs=funcs, args=training_args,
                          train_dataset=dataset, eval_dataset=evaluation, peft_config=get_peft_config(model_args),
                          **extra)
            stage = "train"
            trainer.train()
            stage = None
            evidence["observed"] = {**seen, "logged": [sorted(entry) for entry in trainer.state.log_history]}
        except BaseException as exc:  # noqa: BLE001 - every failure is evidence, mapped to a field by the server
            if isinstance(exc, KeyboardInterrupt):
                raise
            evidence["error"] = _error(exc)
            evidence["observed"] = seen if stage in ("init", "train") else {}
        evidence["stage"] = stage
    evidence["seconds"] = round(time.monotonic() - started, 2)
    return evidence


@contextlib.contextmanager
def _deadline(seconds: int):
    """RehearsalTimeout after `seconds` (SIGALRM, on the main thread: a worker's call and a test's both are; on
    another thread there is no deadline)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise RehearsalTimeout(f"the rehearsal ran past {seconds} s")

    before = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


@contextlib.contextmanager
def _offline():
    """The hub switched off (a rehearsal never downloads) and transformers' notices silenced (they describe the
    miniature, not the run), then both as they were."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with mock.patch.dict(os.environ, OFFLINE):
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


def _miniature(model: dict, tmp: Path) -> str:
    """A directory holding the miniature: config.json with MINI's sizes (the vocabulary kept), random weights, the
    run's tokenizer (else the tiny model's). Built once per config in this process."""
    config = dict(model["config"])
    key = hashlib.sha256(json.dumps([config, model.get("tokenizer")], sort_keys=True).encode()).hexdigest()[:16]
    if key in _MINIATURES and Path(_MINIATURES[key]).is_dir():
        return _MINIATURES[key]
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from mcp_server.tiny import ensure_tiny_model

    for name, value in MINI.items():
        if name in config or name == "head_dim":
            config[name] = value
    for name, value in MOE_MINI.items():
        if name in config:
            config[name] = value
    for name in ("layer_types", "mlp_only_layers", "rope_scaling"):
        config.pop(name, None)
    model_type = config.pop("model_type")
    mini = AutoConfig.for_model(model_type, **{k: v for k, v in config.items() if k not in ("architectures",
                                                                                            "transformers_version")})
    out = Path(tempfile.mkdtemp(prefix="rehearsal-model-"))
    AutoModelForCausalLM.from_config(mini).save_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(model.get("tokenizer") or str(ensure_tiny_model()))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.save_pretrained(out)
    if not _MINIATURES:
        atexit.register(cleanup)
    _MINIATURES[key] = str(out)
    return str(out)


def _rows(script_args, dataset_args, prompt_column: str, cache: Path, rows: int, training_args=None):
    """The run's training split as train.py loads it (with `training_args`: its evaluation split, None when the
    config does not evaluate), cut to `rows` prompts."""
    from mcp_server.config.loader import eval_dataset, train_dataset

    cache.mkdir()
    dataset = (train_dataset(script_args, dataset_args, prompt_column, cache) if training_args is None
               else eval_dataset(script_args, training_args, dataset_args, prompt_column, cache))
    if dataset is None:
        return None
    if hasattr(dataset, "select"):
        return dataset.select(range(min(rows, len(dataset))))
    return dataset.take(rows)  # a streamed data set


def _reward_funcs(rewards: list | None, script_args) -> list:
    """The run's reward functions: train/rewards.json's specs as train.py builds them, else the config's
    reward_funcs as `trl grpo` reads them (a name of TRL's reward registry, else ours or an import path)."""
    from trl.rewards import (accuracy_reward, get_soft_overlong_punishment, reasoning_accuracy_reward,
                             think_format_reward)

    from mcp_server.rewards.registry import build_reward_funcs

    reward_funcs_registry = {  # trl/scripts/grpo.py main()'s registry (local there, so restated, names only)
        "accuracy_reward": accuracy_reward, "reasoning_accuracy_reward": reasoning_accuracy_reward,
        "think_format_reward": think_format_reward,
        "get_soft_overlong_punishment": get_soft_overlong_punishment(max_completion_len=1280, soft_punish_cache=256)}

    if rewards:
        return build_reward_funcs(rewards)
    names = list(script_args.reward_funcs or [])
    ours = build_reward_funcs([n for n in names if n not in reward_funcs_registry]) if any(
        n not in reward_funcs_registry for n in names) else []
    return [reward_funcs_registry[n] if n in reward_funcs_registry else ours.pop(0) for n in names]


def _recorded(funcs: list, seen: dict) -> list:
    """Each reward function, recording what TRL passed it (the completions, their ids) and what it scored."""
    seen.setdefault("completions", [])
    seen.setdefault("lengths", [])
    seen.setdefault("scores", {})

    def wrap(func):
        name = getattr(func, "__name__", type(func).__name__)

        @functools.wraps(func)
        def recorded(*args, **kwargs):
            scores = func(*args, **kwargs)
            seen["scores"].setdefault(name, []).extend(
                None if s is None else float(s) for s in (scores if isinstance(scores, (list, tuple)) else []))
            if not seen["completions"]:  # every reward sees the same completions: keep them once, as token ids
                seen["completions"] = [list(ids)[:64] for ids in kwargs.get("completion_ids") or []]
                seen["lengths"] = [len(ids) for ids in kwargs.get("completion_ids") or []]
            return scores

        return recorded

    return [wrap(f) for f in funcs]


def _error(exc: BaseException) -> dict:
    frames = traceback.extract_tb(exc.__traceback__)
    return {"type": type(exc).__name__, "message": str(exc)[:2000],
            "frames": [f"{Path(f.filename).name}:{f.name}" for f in frames[-8:]]}


def cleanup() -> None:
    """Remove this process's miniatures (a worker's exit)."""
    for path in _MINIATURES.values():
        shutil.rmtree(path, ignore_errors=True)
    _MINIATURES.clear()
