"""TRL 1.16's start-up requirements for tools and environments, checked before any model loads.

GRPOTrainer checks them only after loading the model (grpo_trainer.py: transformers >= 5.0 for tools, >= 5.2 for
`environment_factory`, jmespath below transformers 5.13, a chat template that renders a tool-calling
conversation, a response parser for that template (`add_response_schema`), a `reset` on the environment). Here
each is one finding naming what to install or change, read from the tokenizer alone; plus what TRL does not
check: tools typed and documented (transformers' `get_json_schema`), a budget that holds one round trip, a
turn limit, an environment that samples its own data.
Runs in the training interpreter (imports transformers and TRL).
"""

from __future__ import annotations

import functools
import inspect
import pickle
import types
from pathlib import Path

from mcp_server.config import FIELD, GRPOView, trl_default
from mcp_server.agentic.spec import AgenticRecord, load, public_methods, resolve
from mcp_server.errors import UserInputError, one_line, short
from mcp_server.interpreter import user_code_allowed


def _finding(code: str, field: str | None, severity: str, message: str, fix: str | None = None) -> dict:
    return {"code": code, "field": field, "severity": severity, "message": message, "fix": fix}


def _versions(record: AgenticRecord) -> list[dict]:
    import transformers
    from packaging.version import Version

    from trl.chat_template_utils import _SUPPORTS_RESPONSE_TEMPLATE
    from trl.import_utils import is_jmespath_available

    have = Version(transformers.__version__)
    found = []
    need = Version("5.2.0") if record.environment else Version("5.0.0")
    if have < need:
        what = "environment_factory" if record.environment else "tools"
        found.append(_finding("agentic_transformers_too_old", "environment" if record.environment else "tools",
                              "error", f"TRL's {what} needs transformers >= {need}; installed {have}",
                              f"pip install 'transformers>={need}'"))
    if not _SUPPORTS_RESPONSE_TEMPLATE and not is_jmespath_available():
        found.append(_finding("agentic_jmespath_missing", "tools", "error",
                              f"transformers {have} (< 5.13) parses tool calls with jmespath, which is not installed",
                              "pip install jmespath (or transformers >= 5.13)"))
    return found


@functools.cache
def parseable_templates() -> tuple[str, ...]:
    """The chat templates the installed TRL parses tool calls from, by their file name in trl/chat_templates:
    every `<name>_chat_template` of trl.chat_template_utils that its `add_response_schema` accepts, tried on a
    stand-in holding only that template (so a TRL upgrade changes the list, never a copy kept here)."""
    from trl import chat_template_utils

    names = []
    for attribute, template in vars(chat_template_utils).items():
        if not attribute.endswith("_chat_template") or not isinstance(template, str):
            continue
        try:
            chat_template_utils.add_response_schema(types.SimpleNamespace(chat_template=template))
        except ValueError:  # unrecognised, or a parser the installed transformers cannot run
            continue
        names.append(attribute.removesuffix("_chat_template"))
    return tuple(names)


def supported_text() -> str:
    """The parseable templates as one line for a finding or an error."""
    import trl

    return (f"TRL {trl.__version__} parses tool calls only from these chat templates (trl/chat_templates/<name>.jinja):"
            f" {', '.join(parseable_templates())}")


TEMPLATE_FIX = ("use a model trained on one of them (an instruct model of that family), or set the tokenizer's "
                "response_template to a parser for this template (transformers' chat response parsing)")


def template_findings(tokenizer) -> list[dict]:
    """Is the chat template one TRL can render tool calls with and parse them from?"""
    from trl.chat_template_utils import (add_response_schema, is_chat_template_prefix_preserving,
                                         supports_tool_calling)

    if not supports_tool_calling(tokenizer):
        return [_finding("agentic_template_no_tools", FIELD.model_name_or_path, "error",
                         "the model's chat template cannot render a tool-calling conversation (user -> assistant "
                         f"with tool_calls -> tool), so GRPOTrainer refuses it when it starts. {supported_text()}",
                         TEMPLATE_FIX)]
    has_parser = any(getattr(tokenizer, a, None) is not None for a in ("response_template", "response_schema"))
    if not has_parser:
        try:
            add_response_schema(tokenizer)
        except ValueError:
            return [_finding("agentic_template_unparsed", FIELD.model_name_or_path, "error",
                             "TRL cannot parse tool calls from this chat template (add_response_schema does not "
                             f"recognise it): every tool call would be read as plain text. {supported_text()}",
                             TEMPLATE_FIX)]
    if not is_chat_template_prefix_preserving(tokenizer):
        return [_finding("agentic_template_replaced", FIELD.model_name_or_path, "info",
                         "the chat template is not prefix-preserving: TRL trains with its training copy of it "
                         "(get_training_chat_template)")]
    return []


def model_template_findings(model: str, revision: str | None = None) -> list[dict]:
    """template_findings for a model by name, from its tokenizer alone (no weights load)."""
    from transformers import AutoTokenizer

    return template_findings(AutoTokenizer.from_pretrained(str(model), revision=revision))


def _tool_findings(fns: list, where: str) -> list[dict]:
    from transformers.utils import get_json_schema

    found = []
    for fn in fns:
        try:
            get_json_schema(fn)
        except Exception as exc:  # noqa: BLE001 - transformers raises its own parsing errors
            found.append(_finding("agentic_tool_undescribed", where, "error",
                                  f"tool {fn.__name__}: {one_line(short(exc))}",
                                  "give every argument a type hint and the docstring an Args: line for each"))
    return found


def _call_turn(name: str, arguments: dict) -> list[dict]:
    """A user message and the assistant turn that calls `name` with `arguments`."""
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [call]}]


def with_result_tokens(tokenizer, name: str, arguments: dict, content: str) -> int:
    """Tokens of a call turn followed by the tool message holding `content`, up to the next assistant turn."""
    messages = [*_call_turn(name, arguments), {"role": "tool", "name": name, "content": content}]
    return len(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def round_trip_tokens(tokenizer, name: str, arguments: dict) -> tuple[int, int]:
    """(tokens of one assistant turn that calls `name`, tokens TRL appends for an empty result of it)."""
    turn = _call_turn(name, arguments)
    prompt = tokenizer.apply_chat_template(turn[:1], add_generation_prompt=True, tokenize=True, return_dict=False)
    with_call = tokenizer.apply_chat_template(turn, tokenize=True, return_dict=False)
    return len(with_call) - len(prompt), with_result_tokens(tokenizer, name, arguments, "") - len(with_call)


def placeholder_arguments(fn) -> dict:
    """An argument for each parameter: 0, 0.0 or False by its type hint, else ""."""
    values = {int: 0, float: 0.0, bool: False}
    try:
        signature = inspect.signature(fn, eval_str=True)  # hints written as strings (from __future__ annotations)
    except Exception:  # noqa: BLE001 - a hint that names something not importable here
        signature = inspect.signature(fn)
    params = [p for p in signature.parameters.values() if p.name != "self"]
    return {p.name: values.get(p.annotation, "") for p in params}


def _budget_findings(tokenizer, tools: list, values: dict) -> list[dict]:
    limit = GRPOView.given(values).max_completion_length or trl_default(FIELD.max_completion_length)
    found = []
    if values.get(FIELD.max_tool_calling_iterations) is None:
        found.append(_finding("agentic_unlimited_turns", FIELD.max_tool_calling_iterations, "warning",
                              "TRL's default is no limit on tool-calling turns: a model that keeps calling runs "
                              "until the completion budget is spent", "set max_tool_calling_iterations (e.g. 4)"))
    worst = None
    for fn in tools:
        call, result = round_trip_tokens(tokenizer, fn.__name__, placeholder_arguments(fn))
        if worst is None or call + result > sum(worst[1:]):
            worst = (fn.__name__, call, result)
    if worst and worst[1] + worst[2] + 1 > limit:
        name, call, result = worst
        found.append(_finding(
            "agentic_budget_below_round_trip", FIELD.max_completion_length, "error",
            f"max_completion_length {limit} cannot hold one round trip: a call to {name} is {call} tokens, an empty "
            f"result adds {result}, and the answer after it at least 1 ({call + result + 1} > {limit}); TRL drops "
            "a result that does not fit, silently", f"set max_completion_length to at least {call + result + 1} "
            "plus the longest tool result and answer"))
    return found


def _reset_findings(instance, name: str, values: dict) -> list[dict]:
    """A reset that cannot read the row samples its own task (or none): with G > 1 the members of one group would
    start from different tasks, and GRPO compares them as answers to one prompt."""
    try:
        params = inspect.signature(instance.reset).parameters.values()
    except (TypeError, ValueError):
        return []
    reads_row = any(p.kind in (p.VAR_KEYWORD, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)
    group = values.get(FIELD.num_generations) or 8
    if reads_row or group <= 1:
        return []
    return [_finding("agentic_reset_ignores_row", "environment", "warning",
                     f"{name}.reset takes no row: if it draws its own task, the {group} members of a group start "
                     "from different tasks and their advantages compare unrelated answers",
                     "take the row (reset(self, **row)) and derive the task, and any randomness, from it")]


def _pickle_findings(spec: AgenticRecord, values: dict) -> list[dict]:
    """An async run (a config holding an AsyncGRPOConfig field): TRL's AsyncRolloutWorker pickles
    `environment_factory` and `tools` into a spawned child (async_rollout_worker.py, `pickle.dumps(loop_kwargs)`).
    The user's raw class and functions are checked, not this plugin's timed wrappers."""
    import dataclasses
    import warnings

    from trl import GRPOConfig, ModelConfig

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TRL warns that experimental APIs may change
            from trl.experimental.async_grpo import AsyncGRPOConfig
    except Exception:  # noqa: BLE001 - not shipped in this TRL, or its optional dependencies are missing
        return []
    known = {f.name for config in (GRPOConfig, ModelConfig) for f in dataclasses.fields(config)}
    keys = sorted(set(values) & {f.name for f in dataclasses.fields(AsyncGRPOConfig) if f.init} - known)
    if not keys:
        return []
    root, found = Path(spec.source_root), []
    for field, path in [*([("environment", spec.environment)] if spec.environment else []),
                        *((f"tools[{i}]", t) for i, t in enumerate(spec.tools))]:
        try:
            pickle.dumps(resolve(path, root, field))
        except Exception as exc:  # noqa: BLE001 - pickle raises PicklingError, AttributeError or TypeError
            found.append(_finding(
                "agentic_not_picklable", field, "error",
                f"{path} cannot be pickled ({type(exc).__name__}: {one_line(short(exc))}), and this async run "
                f"({', '.join(keys)}) sends it to TRL's spawned rollout worker",
                "define it at module level (not in a function, not a lambda or closure)"))
    return found


def check_agentic(record: dict, values: dict) -> list[dict]:
    """Every start-up requirement for the run's environment/tools with the config `values`, as findings."""
    from transformers import AutoTokenizer

    spec = AgenticRecord(**record)
    found = _versions(spec)
    if not user_code_allowed():  # the environment and tools are the person's code
        return [*found, _finding("agentic_not_checked", "environment" if spec.environment else "tools", "warning",
                                 "the environment and tools were not imported: the read-only server runs no user "
                                 "code", "validate with a server or CLI that is not read-only to check them")]
    try:
        factory, tools = load(spec)
    except UserInputError as exc:
        return [*found, _finding("agentic_import_failed", exc.field, "error", str(exc).removeprefix(f"{exc.field}: "))]
    methods = []
    if factory is not None:
        if not callable(getattr(factory, "reset", None)):
            found.append(_finding("agentic_no_reset", "environment", "error",
                                  f"{spec.environment} has no reset(**row): TRL resets each pooled instance with the "
                                  "data set row before every rollout", "define reset(self, **row)"))
        try:
            instance = factory()
        except Exception as exc:  # noqa: BLE001 - the user's constructor
            return [*found, _finding("agentic_environment_init_failed", "environment", "error",
                                     f"{spec.environment}() raised {type(exc).__name__}: {one_line(short(exc))}")]
        methods = [getattr(instance, name) for name in public_methods(type(instance))]
        found += _reset_findings(instance, spec.environment, values)
        found += _tool_findings(methods, "environment")
        if not methods:
            found.append(_finding("agentic_no_tools", "environment", "error",
                                  f"{spec.environment} has no public method for the model to call"))
    found += _tool_findings(tools, "tools")
    found += _pickle_findings(spec, values)
    if any(f["severity"] == "error" for f in found):
        return found
    model = values.get(FIELD.model_name_or_path)
    if model:
        tokenizer = AutoTokenizer.from_pretrained(str(model), revision=values.get(FIELD.model_revision))
        found += template_findings(tokenizer)
        if not any(f["severity"] == "error" for f in found):
            found += _budget_findings(tokenizer, [*tools, *methods], values)
    return found


def describe(record: dict) -> dict:
    """The tool names and the modules the record's code comes from (for the run's record and the gate)."""
    spec = AgenticRecord(**record)
    factory, tools = load(spec)
    names = [fn.__name__ for fn in tools]
    if factory is not None:
        names += public_methods(factory)
    return {"tools": names, "source_root": str(Path(spec.source_root))}


def schema_tokens(record: dict, model: str, revision: str | None = None) -> int:
    """Tokens the tool schema adds to every prompt (the template's tool block), for the memory plan."""
    from transformers import AutoTokenizer

    factory, tools = load(AgenticRecord(**record))
    if factory is not None:
        instance = factory()
        tools = [*tools, *(getattr(instance, name) for name in public_methods(type(instance)))]
    tokenizer = AutoTokenizer.from_pretrained(str(model), revision=revision)
    user = [{"role": "user", "content": "x"}]
    with_tools = tokenizer.apply_chat_template(user, tools=tools, add_generation_prompt=True, tokenize=True,
                                               return_dict=False)
    plain = tokenizer.apply_chat_template(user, add_generation_prompt=True, tokenize=True, return_dict=False)
    return max(0, len(with_tools) - len(plain))
