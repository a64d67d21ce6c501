"""The tokens one tool-calling turn costs, for sizing an agentic run's max_completion_length at emission.

TRL 1.16 gives the whole rollout one budget (grpo_trainer._tool_call_loop): every assistant turn and every tool
result appended after it count against `max_completion_length`, and a result that would pass it is rolled back
without a warning. One turn costs the call the model writes (rendered by the chat template from the tool's
schema), the template's wrapper around the result, and the result itself. The result's size is the tool's
`max_result_tokens` attribute when it declares one; otherwise one probe call with placeholder arguments (0, "",
False) on a fresh environment reset with the data set's first row, doubled (another argument may return more);
otherwise an assumed DEFAULT_RESULT_TOKENS. Everything is measured with the run's tokenizer.
Runs in the training interpreter (imports transformers).

Emission sizes max_completion_length with it (emission.agentic.budget_length); validation's rule
(`turn_budget_findings`) says on any config, emitted or hand-written, whether its max_completion_length holds the
turns.
"""

from __future__ import annotations

from mcp_server.agentic.checks import placeholder_arguments, round_trip_tokens, with_result_tokens
from mcp_server.agentic.spec import AgenticRecord, load, public_methods
from mcp_server.config import FIELD, GRPOView, trl_default
from mcp_server.errors import one_line, short

DEFAULT_RESULT_TOKENS = 64  # assumed when a tool neither declares its size nor answers a probe
MIN_RESULT_TOKENS = 16  # a probe's result is doubled, and never counted below this


def result_tokens(tokenizer, name: str, content: str) -> int:
    """Tokens `content` adds to the tool message TRL appends (the wrapper itself not counted)."""
    return max(0, with_result_tokens(tokenizer, name, {}, content) - with_result_tokens(tokenizer, name, {}, ""))


def _result_size(tokenizer, fn, probe: str | None) -> tuple[int, str]:
    """(result tokens, where the number comes from) for one tool; `probe`: why no probe call can be made."""
    name = fn.__name__
    declared = getattr(fn, "max_result_tokens", None)
    if isinstance(declared, int) and not isinstance(declared, bool) and declared > 0:
        return declared, f"{declared} declared by {name}.max_result_tokens"
    if probe is None:
        arguments = placeholder_arguments(fn)
        try:
            content = str(fn(**arguments))  # TRL appends str(result)
        except Exception as exc:  # noqa: BLE001 - the user's tool
            probe = f"the probe call raised {type(exc).__name__}: {one_line(short(exc))}"
        else:
            measured = result_tokens(tokenizer, name, content)
            shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
            return (max(2 * measured, MIN_RESULT_TOKENS),
                    f"twice the {measured} tokens a probe call {name}({shown}) returned, at least {MIN_RESULT_TOKENS}")
    return DEFAULT_RESULT_TOKENS, f"{DEFAULT_RESULT_TOKENS} assumed ({probe}; declare {name}.max_result_tokens)"


def _tools(record: AgenticRecord, rows: list[dict]) -> tuple[list, str | None]:
    """(every tool TRL exposes, why a probe call cannot be made or None), the environment's methods bound to a
    fresh instance reset with the first row."""
    factory, tools = load(record)
    if factory is None:
        return list(tools), None
    instance = factory()
    methods = [getattr(instance, name) for name in public_methods(type(instance))]
    if not rows:
        return [*tools, *methods], "no local data set row to reset the environment with"
    try:
        instance.reset(**rows[0])
    except Exception as exc:  # noqa: BLE001 - the user's reset
        return [*tools, *methods], f"reset on the first row raised {type(exc).__name__}: {one_line(short(exc))}"
    return [*tools, *methods], None


def turn_cost(record: dict, model: str, revision: str | None = None, rows: list[dict] | None = None) -> dict:
    """The costliest tool-calling turn of the run's tools: {'tokens', 'tool', 'call', 'wrapper', 'result',
    'result_source'}, each measured with the model's tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model), revision=revision)
    fns, no_probe = _tools(AgenticRecord(**record), rows or [])
    worst: dict = {}
    for fn in fns:
        call, wrapper = round_trip_tokens(tokenizer, fn.__name__, placeholder_arguments(fn))
        result, source = _result_size(tokenizer, fn, no_probe)
        if call + wrapper + result > worst.get("tokens", -1):
            worst = {"tokens": call + wrapper + result, "tool": fn.__name__, "call": call, "wrapper": wrapper,
                     "result": result, "result_source": source}
    return worst


def describe_turn(cost: dict) -> str:
    return (f"{cost['tokens']} tokens per tool-calling turn ({cost['tool']}: a call of {cost['call']}, the result's "
            f"wrapper {cost['wrapper']}, a result of {cost['result_source']}; the run's tokenizer)")


LENGTH = FIELD.max_completion_length


def _counted(cost: dict | None, turns) -> bool:
    return bool(cost) and isinstance(turns, int) and not isinstance(turns, bool) and turns >= 1


def sized_reason(base: int, turns: int, cost: dict) -> str:
    """Why max_completion_length is `base` + `turns` turns of `cost`: config.yaml's comment and the rule's finding."""
    return (f"{base} tokens for the model's own text + {turns} tool-calling turns x {describe_turn(cost)}: TRL's one "
            "budget holds every turn and tool result, and drops a result that would pass it, silently")


def budget_finding(cost: dict | None, turns, length) -> dict | None:
    """How `length` (max_completion_length) holds `turns` tool-calling turns of `cost` tokens each: what is left for
    the model's own text (info), or how many of the turns it holds (a warning); None where nothing is counted."""
    if not _counted(cost, turns) or not isinstance(length, int) or isinstance(length, bool):
        return None  # a single-turn run, an unmeasured turn, or a bad value (validation names it)
    needed = turns * cost["tokens"]
    if length > needed:
        return {"code": "agentic_completion_budget", "field": LENGTH, "severity": "info",
                "message": f"{LENGTH} {length} = {sized_reason(length - needed, turns, cost)}", "fix": None}
    held = max(0, (length - 1) // cost["tokens"])
    return {
        "code": "agentic_budget_below_turns", "field": LENGTH, "severity": "warning",
        "message": f"{LENGTH} {length} holds {held} of the {turns} tool-calling turns of {describe_turn(cost)}: "
                   f"{turns} turns need {needed} tokens and the answer after them; TRL drops a tool result that "
                   "would pass the budget, silently (the trajectory ends on its call)",
        "fix": f"set {LENGTH} to at least {needed} plus the answer (leave it unset and emission sizes it), or "
               f"max_tool_calling_iterations to {held or 1} with shorter results"}


def turn_budget_findings(record: dict, values: dict, rows: list[dict] | None = None) -> list[dict]:
    """The validation rule for an agentic run: the config's max_completion_length (else TRL's default) against
    max_tool_calling_iterations turns of the costliest tool, measured with the config's model's tokenizer and `rows`
    (the data set's first row, to reset the environment with). Nothing where the tokenizer or the tools cannot be
    read here: the agentic checks name that."""
    given = GRPOView.given(values)
    try:
        cost = turn_cost(record, given.model_name_or_path, given.model_revision, rows)
    except Exception:  # noqa: BLE001 - no tokenizer offline, the person's environment broken: check_agentic says so
        return []
    length = given.max_completion_length if given.max_completion_length is not None else trl_default(LENGTH)
    found = budget_finding(cost, given.max_tool_calling_iterations, length)
    return [found] if found else []
