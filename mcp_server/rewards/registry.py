"""The reward registry: names -> factories, building TRL reward functions from RewardSpecs, and the
hash of the reward code that the inspection gate records.

A config names rewards in `train/rewards.json` as RewardSpec dicts {name, params, weight}; `name` is a
registry name below or a dotted import path to a function in TRL's reward signature (as `trl grpo
--reward_funcs` accepts them).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from mcp_server.errors import UserInputError, closest_names, validation_message
from mcp_server.rewards.dotted import import_dotted
from mcp_server.rewards.models import RewardCatalog, RewardInfo, RewardParam
from mcp_server.rewards.named import NamedReward
from mcp_server.rewards.sources import installed_roots, local_sources
from mcp_server.rewards.spec import RewardSpec
from mcp_server.workspace import files_digest

# name -> (factory "module:function", default dotted path or None, columns read, description, {param: (type, doc)})
# Factories are imported only when a reward is built, so listing the registry stays light.
REGISTRY: dict[str, dict[str, Any]] = {
    "format_reward": dict(
        factory="mcp_server.rewards.basic:make_format_reward",
        dotted_path="mcp_server.rewards.format_reward",
        columns=[],
        description="1.0 when the completion is the tag blocks in order (default "
        "<reasoning>...</reasoning><answer>...</answer>), each exactly once, else 0.0.",
        params={
            "tags": ("list[str]", "Tag names in the order they must appear."),
            "strict": (
                "bool",
                "True: nothing but whitespace outside the blocks; False: the blocks may sit inside other text.",
            ),
        },
    ),
    "correctness_reward": dict(
        factory="mcp_server.rewards.basic:make_correctness_reward",
        dotted_path="mcp_server.rewards.correctness_reward",
        columns=["answer"],
        description="`value` (2.0) when the single <answer> block equals the gold answer column exactly "
        "(whitespace collapsed), else 0.0. Several <answer> blocks score 0 (no hedging). 2.0 against format's "
        "1.0 keeps malformed (0), well-formed-but-wrong (1) and right (3) apart in the total. With tag null, a "
        "plain-text reply is scored by its final stated answer ('1 + 5 = 6 as we start' -> 6, '7 + 7 = **8**' -> "
        "8, 'The answer is 17.' -> 17; several numbers and no statement -> no answer), as a number or as text.",
        params={
            "answer_column": ("str", "Data set column holding the gold answer."),
            "tag": ("str | null", "Tag whose body is the model's answer; null reads the final stated answer of "
                                  "the whole completion."),
            "value": ("float", "Reward for a right answer."),
            "ignore_case": ("bool", "Compare case-insensitively."),
        },
    ),
    "math_reward": dict(
        factory="mcp_server.rewards.math_equivalence:make_math_reward",
        dotted_path="mcp_server.rewards.math_reward",
        columns=["answer"],
        description="`value` (2.0) when math-verify finds the answer mathematically equivalent to the gold column "
        "(0.5 = \\frac{1}{2}, 1e3 = 1000), else 0.0; through TRL's trl.rewards.accuracy_reward. With `tag` the single "
        "tag block is the answer; with tag null, LaTeX (\\boxed{} or $...$) anywhere in the completion.",
        params={
            "answer_column": ("str", "Data set column holding the gold answer (LaTeX or plain)."),
            "tag": (
                "str | null",
                "Tag whose body is the answer; null reads \\boxed{}/$...$ from the whole completion.",
            ),
            "value": ("float", "Reward for an equivalent answer."),
        },
    ),
    "json_schema_reward": dict(
        factory="mcp_server.rewards.json_schema:make_json_schema_reward",
        dotted_path="mcp_server.rewards.json_schema_reward",
        columns=["schema"],
        description="`value` (1.0) when the completion (its tag block, else its last ```json block, else all of it) "
        "parses as JSON and validates against its JSON Schema, else 0.0. One schema for the batch (params.schema) "
        "or one per example (a data set column of schemas, best stored as JSON strings).",
        params={
            "schema": (
                "dict | null",
                "One JSON Schema for every example; null: read per-example schemas from schema_column.",
            ),
            "schema_column": ("str", "Data set column with one schema per example (dict or JSON string)."),
            "tag": ("str | null", "Tag whose body is the JSON; null: last ```json block, else the whole completion."),
            "value": ("float", "Reward for valid JSON."),
        },
        example={
            "name": "json_schema_reward",
            "params": {"schema": {"type": "object", "required": ["name"]}},
            "weight": 1.0,
        },
    ),
    "code_execution_reward": dict(
        factory="mcp_server.rewards.code:make_code_execution_reward",
        dotted_path="mcp_server.rewards.code_execution_reward",
        columns=["tests"],
        description="1.0 when the completion's Python code (its tag block, else its last ```python block, else all of "
        "it) passes its row's tests, run inside a bubblewrap sandbox (no network, read-only system, private /tmp, "
        "no host home/credentials/env, CPU/memory/process/output limits, wall-clock timeout), else 0.0. Tests are "
        "Python source: asserts, pytest-style test_* functions or Test classes, unittest.TestCase classes, or "
        "HumanEval's check(candidate) (called with the row's entry point), with the solution's names in scope; "
        "tests that run nothing fail, as pytest's 'no tests ran'. "
        "The tests run in a tester process the code cannot reach and call the solution with values that cross as "
        "data, so frame tricks, exit codes, printed tokens and always-equal objects cannot fake a pass. "
        "Completions run in parallel; a crash, hang, fork bomb or output flood scores 0 for that one only. "
        "Refuses to run (SandboxUnavailable) where bubblewrap does not work: never on the host.",
        params={
            "tests_column": ("str", "Data set column with each row's test code (a string, or a list of lines)."),
            "code_tag": (
                "str | null",
                "Tag whose body is the code; null: last fenced block, else the whole completion.",
            ),
            "timeout_s": ("float", "Wall-clock seconds per completion (interpreter start included)."),
            "cpu_s": ("float", "CPU seconds the solution's processes may use together, its imports included (at "
                      "most timeout_s): a busy loop stops here, not at the timeout. Raise it for heavy tests "
                      "or a `python` with slow-importing libraries."),
            "memory_mb": ("int", "Memory of the whole sandbox, MiB: each process's address space, and the resident "
                          "memory of all its processes together (a forked child shares it)."),
            "max_processes": ("int", "Processes and threads allowed inside one sandbox."),
            "max_output_bytes": ("int", "stdout+stderr cap; more scores 0."),
            "workers": ("int | null", "Sandboxes run at once; null: 4x the CPU count, at most 16 (a run still going "
                        "after 1 s gives its slot to the next)."),
            "python": ("str | null", "Interpreter to run inside; null: /usr/bin/python3 (stdlib-only tests)."),
            "entry_point_column": ("str | null", "Column naming the function HumanEval-style check(candidate) "
                                   "tests are called with (used when the data set has it)."),
        },
    ),
    "length_penalty": dict(
        factory="mcp_server.rewards.length:make_length_penalty",
        dotted_path=None,
        wraps=True,
        columns=[],
        description="Wraps another reward: its score minus a penalty rising linearly from 0 at target_tokens to "
        "max_penalty at max_tokens. A positive (correct) score is never pushed below 0. Token counts come from "
        "`tokenizer` when given, else TRL's completion_ids, else words.",
        params={
            "reward": ("RewardSpec dict", "The reward to wrap, e.g. {'name': 'correctness_reward'}."),
            "target_tokens": ("int", "Length with no penalty."),
            "max_tokens": ("int", "Length at which the penalty reaches max_penalty."),
            "max_penalty": ("float", "Largest penalty subtracted."),
            "tokenizer": ("str | null", "Tokenizer path (the policy model's directory) for exact token counts."),
        },
        example={
            "name": "length_penalty",
            "params": {"reward": {"name": "correctness_reward"}, "target_tokens": 200, "max_tokens": 512},
            "weight": 1.0,
        },
    ),
    "soft_overlong_punishment": dict(
        factory="mcp_server.rewards.length:make_soft_overlong_punishment",
        dotted_path=None,
        columns=["completion_ids"],
        description="DAPO's soft overlong punishment, TRL's get_soft_overlong_punishment: 0 up to "
        "max_completion_len - soft_punish_cache tokens, then falling linearly to -1 at max_completion_len. "
        "Set max_completion_len to the config's max_completion_length (the DAPO variant does).",
        params={
            "max_completion_len": ("int", "L_max: the config's max_completion_length."),
            "soft_punish_cache": (
                "int",
                "L_cache: tokens before L_max where the punishment ramps (DAPO: 4096 of 20480).",
            ),
        },
        example={
            "name": "soft_overlong_punishment",
            "params": {"max_completion_len": 1024, "soft_punish_cache": 205},
            "weight": 1.0,
        },
    ),
    "rubric_judge": dict(
        factory="mcp_server.rewards.judge:make_rubric_judge",
        dotted_path=None,
        columns=["prompts"],
        description="`pass_value` (1.0) when a judge model says PASS for the rubric, else 0.0 (binary only: no graded "
        "scales). Refuses a judge of the policy's model family. The judge is a local model directory or a dotted "
        "path to a callable judge(text) -> 'PASS'/'FAIL'/bool; nothing is downloaded from a hub.",
        params={
            "rubric": ("str", "What a passing response must do."),
            "judge": ("str", "Local judge model directory, or dotted path to a callable judge(text) -> 'PASS'/'FAIL'."),
            "policy_model": (
                "str",
                "The policy being trained (hub name or path): its family must differ from the judge's.",
            ),
            "judge_family": ("str | null", "The judge's model family when it cannot be read from a model directory."),
            "policy_family": ("str | null", "The policy's family when its name does not tell it."),
            "pass_value": ("float", "Reward for PASS."),
        },
        example={
            "name": "rubric_judge",
            "params": {
                "rubric": "Cites a source for every claim.",
                "judge": "/models/Llama-3.1-8B-Instruct",
                "policy_model": "Qwen/Qwen2.5-1.5B-Instruct",
            },
            "weight": 1.0,
        },
    ),
}


def _load_factory(name: str) -> Callable:
    module, _, attr = REGISTRY[name]["factory"].partition(":")
    return getattr(importlib.import_module(module), attr)


def _closest(name: str) -> str:
    close = closest_names(name, list(REGISTRY), cutoff=0.5)
    return f"did you mean {', '.join(close)}? " if close else ""


def _as_spec(spec: Any, field: str) -> RewardSpec:
    if isinstance(spec, RewardSpec):
        return spec
    if isinstance(spec, str):  # a bare name is a spec with default parameters
        spec = {"name": spec}
    try:
        return RewardSpec.model_validate(spec)
    except ValidationError as exc:
        raise UserInputError(field, f"not a reward spec {{name, params, weight}}: "
                             f"{validation_message(exc, RewardSpec, 'spec')}") from None


def _build_one(spec: RewardSpec, field: str) -> Callable:
    name = spec.name.strip()
    if name in REGISTRY:
        factory = _load_factory(name)
        params = dict(spec.params)
        entry = REGISTRY[name]
        if entry.get("wraps"):  # a wrapper's `reward` param is itself a spec: build it first
            if "reward" not in params:
                raise UserInputError(f"{field}.params.reward", "required: the reward spec to wrap, e.g. {'name': "
                                                               "'correctness_reward'}")
            params["reward"] = _build_one(
                _as_spec(params["reward"], f"{field}.params.reward"), f"{field}.params.reward"
            )
        accepted = list(inspect.signature(factory).parameters)
        unknown = [p for p in params if p not in accepted]
        if unknown:
            raise UserInputError(
                f"{field}.params", f"{name} has no parameter {', '.join(map(repr, unknown))}; accepted: "
                                   f"{', '.join(accepted)}"
            )
        try:
            return factory(**params)
        except UserInputError as exc:  # factories name their param; prefix where it sits in the config
            raise UserInputError(f"{field}.{exc.field}", str(exc).split(": ", 1)[-1]) from None
        except TypeError as exc:
            raise UserInputError(f"{field}.params", f"{name}: {exc}") from None
    if "." in name:
        if spec.params:
            raise UserInputError(
                f"{field}.params",
                f"params apply to registry rewards only; '{name}' is a dotted path to a ready reward function",
            )
        return import_dotted(name, f"{field}.name")
    raise UserInputError(
        f"{field}.name",
        f"unknown reward '{name}'; {_closest(name)}registry names: {', '.join(REGISTRY)}; "
        "or give a dotted import path like 'my_pkg.rewards.my_reward'",
    )


def build_reward_funcs(specs: list[RewardSpec | dict | str]) -> list[Callable]:
    """TRL reward functions for `specs`, in order (pass to GRPOTrainer(reward_funcs=...)).

    Each has a `__name__` (TRL logs `rewards/<name>/mean`); a registry name used twice gets a suffix
    so the two do not share a log line.
    """
    if not isinstance(specs, (list, tuple)) or not specs:
        raise UserInputError("rewards", "expected a non-empty list of reward specs like [{'name': 'format_reward'}]")
    funcs, seen = [], set()
    for i, raw in enumerate(specs):
        spec = _as_spec(raw, f"rewards[{i}]")
        func = _build_one(spec, f"rewards[{i}]")
        name = getattr(func, "__name__", None) or type(func).__name__
        if name in seen and isinstance(func, NamedReward):  # ours: rename a copy (it may be a module-level default)
            func = copy.copy(func)
            func.__name__ = f"{name}_{i}"
        seen.add(getattr(func, "__name__", name))
        funcs.append(func)
    return funcs


def reward_weights(specs: list[RewardSpec | dict | str]) -> list[float]:
    """The weights of `specs`, in order (GRPOConfig.reward_weights)."""
    return [_as_spec(s, f"rewards[{i}]").weight for i, s in enumerate(specs)]


def _library_sources() -> list[Path]:
    # The library is small and its modules share helpers: hashing all of it never misses a change
    # that could alter a score (an upgrade re-opens the gate, which is the safe direction).
    return sorted(Path(__file__).parent.glob("*.py"))


def _source_of(func: Callable) -> str:
    target = inspect.unwrap(func)
    while isinstance(target, functools.partial):
        target = target.func
    module = inspect.getmodule(target) or inspect.getmodule(type(target))
    try:
        return inspect.getsource(module) if module else inspect.getsource(target)
    except (OSError, TypeError):
        return f"<no source: {getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}>"


def reward_code_sha256(specs: list[RewardSpec | dict | str]) -> str:
    """sha256 of the specs and of the source of every function they resolve to.

    Registry rewards hash this package's source. Every other callable a reward reaches (a dotted-path reward, a
    user module's NamedReward, the reward a length_penalty wraps, a rubric_judge's dotted judge), found by
    walking the built functions, hashes its whole module and every local module it imports (rewards.sources,
    relative imports included); a local directory or file a reward reads (a judge model, a tokenizer) hashes its
    files. Changing a parameter, a weight, a line of code or a judge's weights changes the hash.
    """
    digest = hashlib.sha256()
    parsed = [_as_spec(s, f"rewards[{i}]") for i, s in enumerate(specs)]
    digest.update(json.dumps([s.model_dump() for s in parsed], sort_keys=True, default=repr).encode())
    funcs = build_reward_funcs(parsed)
    callables, paths = _reached(funcs)
    if any(s.name.strip() in REGISTRY for s in parsed) or any(_is_library(c) for c in callables):
        for path in _library_sources():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    for func in callables:
        if _is_library(func) or _is_installed(func):  # installed packages are no part of a verdict (pins' doc)
            continue
        digest.update(_qualified(func).encode() + b"\0" + _source_of(func).encode())
        module = getattr(inspect.getmodule(inspect.unwrap(func)), "__name__", None)
        for name, source in local_sources(module) if module else []:  # helpers it imports, followed through
            digest.update(name.encode() + b"\0" + source)
    for path in sorted(paths):
        digest.update(path.encode() + b"\0" + _path_digest(Path(path)).encode())
    return digest.hexdigest()


def _is_library(func: Callable) -> bool:
    module = getattr(inspect.getmodule(inspect.unwrap(func)), "__name__", "") or ""
    return module == "mcp_server.rewards" or module.startswith("mcp_server.rewards.")


def _is_installed(func: Callable) -> bool:
    module = inspect.getmodule(inspect.unwrap(func)) or inspect.getmodule(type(func))
    origin = getattr(module, "__file__", None)
    if not origin:
        return module is not None and module.__name__ in sys.builtin_module_names
    resolved = Path(origin).resolve()
    return any(resolved.is_relative_to(root) for root in installed_roots())


def _qualified(func: Callable) -> str:
    target = inspect.unwrap(func)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__name__)}"


def _reached(funcs: list[Callable]) -> tuple[list[Callable], set[str]]:
    """Every callable the reward functions reach (NamedReward scores and params, partials, wrapped rewards), in
    order found, and every existing local path among their parameters."""
    found: list[Callable] = []
    paths: set[str] = set()
    stack = list(reversed(funcs))
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, NamedReward):
            stack += [item.score, *item.params.values()]
        elif isinstance(item, functools.partial):
            stack += [item.func, *item.args, *item.keywords.values()]
        elif isinstance(item, (list, tuple)):
            stack += list(item)
        elif isinstance(item, dict):
            stack += list(item.values())
        elif isinstance(item, str):
            if len(item) < 4096 and ("/" in item or "\\" in item) and Path(item).expanduser().exists():
                paths.add(str(Path(item).expanduser().resolve()))
        elif callable(item):
            found.append(item)
    return found, paths


def _path_digest(path: Path) -> str:
    """A local file's content, or a directory's files (name and content; size and mtime above 64 MiB, as model
    pins do: workspace.files_digest)."""
    if path.is_file():
        return files_digest(path.parent, [path])
    return files_digest(path, sorted(p for p in path.rglob("*") if p.is_file()))


def list_rewards() -> RewardCatalog:
    """Every registry reward: what it scores, the columns it reads, its parameters and defaults."""
    infos = []
    for name, entry in REGISTRY.items():
        signature = inspect.signature(_load_factory(name))
        params = []
        for pname, (ptype, doc) in entry["params"].items():
            default = signature.parameters[pname].default
            required = default is inspect.Parameter.empty
            params.append(
                RewardParam(
                    name=pname, type=ptype, default=None if required else _jsonable(default),
                    required=required, description=doc,
                )
            )
        example = entry.get("example") or {"name": name, "params": {}, "weight": 1.0}
        infos.append(
            RewardInfo(
                name=name, description=entry["description"], columns=entry["columns"], params=params,
                dotted_path=entry.get("dotted_path"), example=example,
            )
        )
    return RewardCatalog(
        rewards=infos,
        user_rewards="Put a dotted import path as the spec's name (e.g. {'name': 'my_pkg.rewards.my_reward'}): a "
        "function (completions, **columns) -> list[float], completions being strings or message lists. Its "
        "module must be importable by the training interpreter (the working directory is on sys.path).",
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)
