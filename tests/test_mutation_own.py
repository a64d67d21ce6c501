"""Issue 33's own mutation audit (20 small realistic bugs of this session's choosing, not the issue's): the
tests that kill its survivors, each a promise of the README checked at its boundary through the core API
(build_reward_funcs, the rewards as TRL calls them), with inputs whose scores are known by construction."""

from __future__ import annotations

from mcp_server.rewards import build_reward_funcs


def score(spec: dict, completions: list, **columns) -> list[float]:
    return build_reward_funcs([spec])[0](completions, **columns)


def test_correctness_collapses_whitespace_and_folds_case_only_when_asked():
    # "exactly (whitespace collapsed)": inner runs of spaces and newlines are one space.
    assert score({"name": "correctness_reward"}, ["<answer>New   York\n</answer>", "<answer>new york</answer>"],
                 answer=["New York", "New York"]) == [2.0, 0.0]
    assert score({"name": "correctness_reward", "params": {"ignore_case": True}}, ["<answer>new york</answer>"],
                 answer=["New York"]) == [2.0]


def test_a_conversation_is_scored_on_its_last_assistant_message():
    chat = [{"role": "assistant", "content": "<answer>1</answer>"}, {"role": "tool", "content": "hint"},
            {"role": "assistant", "content": "<answer>2</answer>"}]
    assert score({"name": "correctness_reward"}, [chat], answer=["2"]) == [2.0]


def test_the_json_reward_reads_the_last_json_block():
    text = 'Draft:\n```json\n{"nope": 1}\n```\nFinal:\n```json\n{"name": "x"}\n```'
    spec = {"name": "json_schema_reward", "params": {"schema": {"type": "object", "required": ["name"]}}}
    assert score(spec, [text]) == [1.0]
    assert score(spec, [text.replace('{"name": "x"}', '{"nope": 2}')]) == [0.0]


def test_format_refuses_a_repeated_opening_tag():
    right = "<reasoning>r</reasoning><answer>2</answer>"
    hedged = right + " <answer>3"  # a second answer opened: not the format
    assert score({"name": "format_reward", "params": {"strict": False}}, [right, hedged]) == [1.0, 0.0]
