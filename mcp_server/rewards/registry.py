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
import inspect
import json
import sys
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from mcp_server.errors import UserInputError, closest_names, validation_message
from mcp_server.rewards.basic import make_correctness_reward, make_format_reward
from mcp_server.rewards.code import make_code_execution_reward
from mcp_server.rewards.declared import Reward, declared
from mcp_server.rewards.dotted import Unimported, import_dotted, local_definitions
from mcp_server.rewards.json_schema import make_json_schema_reward
from mcp_server.rewards.judge import make_rubric_judge
from mcp_server.rewards.length import make_length_penalty, make_soft_overlong_punishment
from mcp_server.rewards.math_equivalence import make_math_reward
from mcp_server.rewards.models import RewardCatalog
from mcp_server.rewards.named import NamedReward
from mcp_server.rewards.sources import installed_roots, local_file_pins, local_files, local_sources
from mcp_server.rewards.spec import RewardSpec
from mcp_server.workspace import files_digest

# The registry: each reward's factory, in the order list_rewards shows them. Everything else about a reward (its name,
# parameters, types, columns, docs, example, default dotted path) is read from the factory (rewards.declared).
FACTORIES = (
    make_format_reward,
    make_correctness_reward,
    make_math_reward,
    make_json_schema_reward,
    make_code_execution_reward,
    make_length_penalty,
    make_soft_overlong_punishment,
    make_rubric_judge,
)
REGISTRY: dict[str, Reward] = {reward.name: reward for reward in map(declared, FACTORIES)}


@functools.cache
def default_reward(name: str) -> Callable:
    """The default-parameter reward `mcp_server.rewards.<name>` (a dotted path TRL's CLI takes), built once."""
    reward = REGISTRY.get(name)
    if reward is None or reward.info.dotted_path is None:
        raise AttributeError(f"module 'mcp_server.rewards' has no attribute '{name}'")
    return reward.factory()


def _closest(name: str) -> str:
    close = closest_names(name, list(REGISTRY), cutoff=0.5)
    return f"did you mean {', '.join(close)}? " if close else ""


def follow_config(specs: list[RewardSpec], config: dict) -> list[RewardSpec]:
    """The specs with each parameter its reward declares as following a config field (declared.Reward.followed)
    set from `config`: what emission writes once the config is final."""
    out = []
    for spec in specs:
        reward = REGISTRY.get(spec.name)
        followed = reward.followed(spec.params, config) if reward and reward.follows else spec.params
        out.append(spec if followed == spec.params else spec.model_copy(update={"params": followed}))
    return out


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
        factory = REGISTRY[name].factory
        params = dict(spec.params)
        for param in REGISTRY[name].wrapped:  # a wrapper's reward is itself a spec: build it first
            where = f"{field}.params.{param}"
            if param not in params:
                raise UserInputError(where, "required: the reward spec to wrap, e.g. {'name': 'correctness_reward'}")
            params[param] = _build_one(_as_spec(params[param], where), where)
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
            raise ParamsRefused(
                f"{field}.params",
                f"params apply to registry rewards only; '{name}' is a dotted path to your own function, which TRL "
                f"calls with each data column as the keyword argument of the column's name: params "
                f"{', '.join(map(repr, spec.params))} cannot reach it (nor rename a column)",
                "drop params: name the function's parameter after the data column it reads (or rename the column "
                "to the parameter's name); a fixed value belongs in your module (a default, or functools.partial)",
            )
        return import_dotted(name, f"{field}.name")
    local = local_definitions(name) if name.isidentifier() else []
    if local:  # the user's own function beside their data, named without its module
        raise UserInputError(
            f"{field}.name", f"unknown reward '{name}'; did you mean {' or '.join(repr(d) for d in local)} (a module "
            f"in the workspace defines it)? A custom reward is named module.function; registry names: "
            f"{', '.join(REGISTRY)}",
        )
    raise UserInputError(
        f"{field}.name",
        f"unknown reward '{name}'; {_closest(name)}registry names: {', '.join(REGISTRY)}; "
        "or give a dotted import path like 'my_pkg.rewards.my_reward'",
    )


class ParamsRefused(UserInputError):
    """params given to a dotted-path reward: `fix` says what to do instead (validation's fix line)."""

    def __init__(self, field: str, message: str, fix: str):
        self.fix = fix
        super().__init__(field, f"{message}; {fix}")


def column_fix(reward: str, column: str, columns: list[str] | None = None) -> str:
    """What to do when `reward` reads a data column `column` the data set lacks (`columns`: those it has), true for
    that kind of reward: a registry reward's column is one of its params (a correctness reward's also
    --answer-column); a dotted-path reward (a person's own function) takes no params, and TRL fills each of its
    parameters from the column of the same name."""
    have = f" (its columns: {', '.join(columns)})" if columns else ""
    entry = REGISTRY.get(reward)
    if entry is None:
        short = reward.rpartition(".")[2]
        return (f"{short}'s parameter '{column}' is filled from the data column of that name: rename the column "
                f"that holds it to '{column}'{have}, or rename the parameter to that column's name (params and "
                "--answer-column apply to registry rewards only)")
    param = next((p for p, default in entry.column_params.items() if default == column), None) or \
        next(iter(entry.column_params), None)
    if param is None:
        return f"add the column '{column}' to the data set{have}"
    flag = " (emit-config --answer-column NAME)" if param == "answer_column" else ""
    return f"add the column '{column}', or name the column that holds it with {reward}'s params.{param}{flag}{have}"


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
    if isinstance(func, Unimported):  # the read-only mode: the same text, read from the file, not imported
        return func.source()
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
        module = func.__module__ if isinstance(func, Unimported) else getattr(
            inspect.getmodule(inspect.unwrap(func)), "__name__", None)
        for name, source in local_sources(module) if module else []:  # helpers it imports, followed through
            digest.update(name.encode() + b"\0" + source)
    for path in sorted(paths):
        digest.update(path.encode() + b"\0" + _path_digest(Path(path)).encode())
    return digest.hexdigest()


def reward_code_file_pins(specs: list[RewardSpec | dict | str]) -> dict[str, str]:
    """path -> sha256 of each local file the specs' rewards run (rewards.sources.local_file_pins): a baseline keeps
    its graders' so a refusal names the file that differs (issue 48, round 15)."""
    callables, _ = _reached(build_reward_funcs([_as_spec(s, f"rewards[{i}]") for i, s in enumerate(specs)]))
    pins: dict[str, str] = {}
    for func in callables:
        module = getattr(inspect.getmodule(inspect.unwrap(func)) or inspect.getmodule(type(func)), "__name__", None)
        if module and not _is_library(func) and not _is_installed(func):
            pins.update(local_file_pins(module))
    return pins


def reward_code_files(specs: list[RewardSpec | dict | str]) -> dict[str, bytes]:
    """The local modules (outside this package and the installation) the specs' rewards run, as relative paths
    and bytes (rewards.sources.local_files): what a copy must hold to import the code reward_code_sha256 hashed."""
    callables, _ = _reached(build_reward_funcs([_as_spec(s, f"rewards[{i}]") for i, s in enumerate(specs)]))
    files: dict[str, bytes] = {}
    for func in callables:
        module = getattr(inspect.getmodule(inspect.unwrap(func)) or inspect.getmodule(type(func)), "__name__", None)
        if module and not _is_library(func) and not _is_installed(func):
            files.update(local_files(module))
    return files


def _is_library(func: Callable) -> bool:
    module = getattr(inspect.getmodule(inspect.unwrap(func)), "__name__", "") or ""
    return module == "mcp_server.rewards" or module.startswith("mcp_server.rewards.")


def _is_installed(func: Callable) -> bool:
    module = inspect.getmodule(inspect.unwrap(func)) or inspect.getmodule(type(func))
    origin = str(func.file) if isinstance(func, Unimported) else getattr(module, "__file__", None)
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
    return RewardCatalog(
        rewards=[reward.info for reward in REGISTRY.values()],
        user_rewards="Put a dotted import path as the spec's name (e.g. {'name': 'my_pkg.rewards.my_reward'}): a "
        "function (completions, **columns) -> list[float], completions being strings or message lists. Keep "
        "its module in the directory you run the commands from (or installed): every command imports it from "
        "there, and the verdict copies the module and the local modules it imports into the run "
        "(inspection/reward_code/), which the trainer imports, so it trains on exactly the reviewed code.",
    )
