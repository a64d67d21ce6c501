"""Reward library: every reward in both completion formats, the registry and its errors, the hash, list_rewards."""

from __future__ import annotations

import pickle

import pytest

from mcp_server.errors import UserInputError
from mcp_server.rewards import build_reward_funcs, reward_code_sha256


def both_formats(texts: list[str]) -> list[list]:
    """The same completions as plain strings and as conversational message lists."""
    return [list(texts), [[{"role": "assistant", "content": t}] for t in texts]]


RIGHT = "<reasoning>2 + 3 = 5</reasoning><answer>5</answer>"
WRONG = "<reasoning>2 + 3 = 6</reasoning><answer>6</answer>"
MALFORMED_RIGHT = "the answer is <answer>5</answer>"
HEDGE = "<reasoning>r</reasoning><answer>5</answer><answer>6</answer>"


@pytest.mark.parametrize("completions", both_formats([RIGHT, WRONG, MALFORMED_RIGHT, HEDGE, "", "  " + RIGHT + "\n"]))
def test_format_and_correctness_in_both_formats(completions):
    fmt, correct = build_reward_funcs([{"name": "format_reward"}, {"name": "correctness_reward"}])
    gold = ["5"] * len(completions)
    assert fmt(completions, answer=gold) == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert correct(completions, answer=gold) == [2.0, 0.0, 2.0, 0.0, 0.0, 2.0]
    total = [f + c for f, c in zip(fmt(completions, answer=gold), correct(completions, answer=gold))]
    assert total[:3] == [3.0, 1.0, 2.0]  # right, well-formed-but-wrong, malformed: all apart


def test_module_level_defaults_are_trl_dotted_paths():
    import importlib

    for path in ("mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"):
        module, _, attr = path.rpartition(".")
        func = getattr(importlib.import_module(module), attr)  # exactly what `trl grpo --reward_funcs` does
        assert func.__name__ == attr
        assert len(func([RIGHT], answer=["5"])) == 1
    assert [f.__name__ for f in build_reward_funcs(["mcp_server.rewards.format_reward"])] == ["format_reward"]


def test_format_tags_and_strictness_configurable():
    (think,) = build_reward_funcs([{"name": "format_reward", "params": {"tags": ["think", "answer"]}}])
    (loose,) = build_reward_funcs([{"name": "format_reward", "params": {"strict": False}}])
    texts = ["<think>t</think>\n<answer>1</answer>", "Sure! " + RIGHT + " done", RIGHT]
    assert think(texts) == [1.0, 0.0, 0.0]
    assert loose(texts) == [0.0, 1.0, 1.0]


def test_correctness_params():
    (c,) = build_reward_funcs(
        [{"name": "correctness_reward", "params": {"answer_column": "gold", "tag": "final", "value": 1.0, "ignore_case": True}}]
    )
    assert c(["<final> Paris </final>", "<final>Lyon</final>", "Paris"], gold=["paris"] * 3) == [1.0, 0.0, 0.0]
    with pytest.raises(UserInputError, match="no column 'gold'"):
        c(["<final>x</final>"], answer=["x"])


def test_rewards_are_picklable_and_named_uniquely():
    funcs = build_reward_funcs(["format_reward", {"name": "format_reward", "params": {"tags": ["answer"]}}])
    assert [f.__name__ for f in funcs] == ["format_reward", "format_reward_1"]
    clone = pickle.loads(pickle.dumps(funcs[1]))  # TRL's async rollout worker pickles reward functions
    assert clone(["<answer>1</answer>"]) == [1.0]


@pytest.mark.parametrize(
    "specs, field, text",
    [
        ([{"name": "formt_reward"}], "rewards[0].name", "did you mean format_reward"),
        ([{"name": "format_reward"}, {"name": "corectness"}], "rewards[1].name", "correctness_reward"),
        ([{"name": "format_reward", "params": {"tag": "x"}}], "rewards[0].params", "accepted: tags, strict"),
        ([{"name": "format_reward", "params": {"tags": "answer"}}], "rewards[0].params.tags", "list of tag names"),
        ([{"name": "correctness_reward", "params": {"value": -1}}], "rewards[0].params.value", "positive"),
        ([{"name": "no_such_pkg_xyz.reward"}], "rewards[0].name", "cannot import module"),
        ([{"name": "json.no_such_function"}], "rewards[0].name", "has no 'no_such_function'"),
        ([{"name": "json.decoder", "params": {}}], "rewards[0].name", "not callable"),
        ([{"name": "os.path.join", "params": {"a": 1}}], "rewards[0].params", "registry rewards only"),
        ([{"params": {}}], "rewards[0]", "name"),
        ([], "rewards", "non-empty"),
    ],
)
def test_registry_errors_name_the_field(specs, field, text):
    with pytest.raises(UserInputError) as info:
        build_reward_funcs(specs)
    assert info.value.field == field
    assert text in str(info.value)


def test_user_reward_by_dotted_path(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text("def short(completions, **kw):\n    return [1.0 if len(str(c)) < 5 else 0.0 for c in completions]\n")
    monkeypatch.chdir(tmp_path)  # trl grpo puts the working directory on sys.path; so do we
    (f,) = build_reward_funcs([{"name": "my_rewards.short"}])
    assert f(["abc", "abcdefgh"]) == [1.0, 0.0]
    before = reward_code_sha256([{"name": "my_rewards.short"}])
    assert before == reward_code_sha256([{"name": "my_rewards.short"}])


def test_reward_code_hash_follows_specs_and_code(tmp_path, monkeypatch):
    base = reward_code_sha256(["format_reward", "correctness_reward"])
    assert base == reward_code_sha256([{"name": "format_reward"}, {"name": "correctness_reward", "weight": 1.0}])
    assert base != reward_code_sha256(["format_reward", {"name": "correctness_reward", "weight": 2.0}])
    assert base != reward_code_sha256(["format_reward", {"name": "correctness_reward", "params": {"value": 3.0}}])
    # A user reward's code change changes the hash (the source is read from disk).
    monkeypatch.chdir(tmp_path)
    module = tmp_path / "user_r1.py"
    module.write_text("def r(completions, **kw):\n    return [0.0 for _ in completions]\n")
    first = reward_code_sha256(["user_r1.r"])
    module.write_text("def r(completions, **kw):\n    return [1.0 for _ in completions]  # changed\n")
    assert reward_code_sha256(["user_r1.r"]) != first
