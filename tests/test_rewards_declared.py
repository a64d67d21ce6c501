"""One declaration per reward: its factory. What the registry, list_rewards and emission know of a reward is read from
the factory's name, signature, type hints and docstring (rewards/declared.py), and a factory whose declaration lacks a
part is refused with what is missing."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Callable
import re

import pytest

from mcp_server.rewards.declared import Column, WrappedReward, declared
from mcp_server.rewards.named import NamedReward


def score_probe(completions, columns, gold_column="gold", cutoff=0.5):
    return [1.0 if str(c) == str(g) else 0.0 for c, g in zip(completions, columns[gold_column], strict=True)]


def make_probe_reward(gold_column: Column = "gold", cutoff: float = 0.5, tag: str | None = None,
                      wrapped: WrappedReward | None = None) -> NamedReward:
    """1.0 when the completion is the gold,
    else 0.0.

    Reads: prompts

    Role: task, scores 0 to
        cutoff

    Args:
        gold_column: Column with
            the gold.
        cutoff: A number.
        tag: A tag or null.
        wrapped: Another reward.

    Example: {"cutoff": 0.25}
    """
    return NamedReward("probe_reward", score_probe, gold_column=gold_column, cutoff=cutoff)


def test_a_factory_is_the_whole_declaration():
    reward = declared(make_probe_reward)
    info = reward.info
    assert info.name == "probe_reward" and reward.factory is make_probe_reward
    assert info.description == "1.0 when the completion is the gold, else 0.0."
    assert [(p.name, p.type, p.default, p.required) for p in info.params] == [
        ("gold_column", "str", "gold", False), ("cutoff", "float", 0.5, False), ("tag", "str | null", None, False),
        ("wrapped", "RewardSpec dict | null", None, False)]
    assert info.params[0].description == "Column with the gold."
    assert info.columns == ["gold", "prompts"] and reward.column_params == {"gold_column": "gold"}
    assert info.dotted_path == "mcp_server.rewards.probe_reward"  # no required parameter, a NamedReward
    assert info.example == {"name": "probe_reward", "params": {"cutoff": 0.25}, "weight": 1.0}
    # Its role and range (issue 46): what the review's success rate and threshold checks read, a bound naming a
    # parameter read from the spec, else its default.
    assert reward.role == info.role == "task" and info.scores == "0 to cutoff"
    assert reward.score_range({}) == (0.0, 0.5) and reward.score_range({"cutoff": 3}) == (0.0, 3.0)


def test_the_registry_reads_every_reward_from_its_factory():
    from mcp_server.emission.emit import COLUMN_PARAMS
    from mcp_server.rewards import REGISTRY

    for name, reward in REGISTRY.items():
        assert reward.factory.__name__ == f"make_{name}"
    assert REGISTRY["length_penalty"].wrapped == ("reward",)
    assert COLUMN_PARAMS == {"answer": "answer_column", "tests": "tests_column", "schema": "schema_column"}
    code = REGISTRY["code_execution_reward"].info
    assert code.columns == ["tests"]  # entry_point_column (str | None) is read only when the data set has it
    # A factory returning TRL's own function has no default reward under our name; one needing a parameter neither.
    assert [n for n, r in REGISTRY.items() if r.info.dotted_path is None] == [
        "length_penalty", "soft_overlong_punishment", "rubric_judge"]


def test_default_rewards_are_attributes_of_the_package():
    import mcp_server.rewards as rewards
    from mcp_server.rewards import build_reward_funcs, format_reward

    assert format_reward is rewards.format_reward and format_reward.__name__ == "format_reward"
    assert build_reward_funcs(["mcp_server.rewards.math_reward"])[0] is rewards.math_reward
    for missing in ("length_penalty", "no_such_reward"):
        with pytest.raises(AttributeError, match=missing):
            getattr(rewards, missing)
    from mcp_server.rewards import harness  # submodules still import by name

    assert harness.__name__ == "mcp_server.rewards.harness"


def _factory(doc: str, name: str = "make_bad_reward", column: bool = False):
    def make(value: float = 1.0) -> NamedReward:
        return NamedReward("bad", score_probe)

    def make_with_column(value: Column) -> NamedReward:
        return NamedReward("bad", score_probe)

    make = make_with_column if column else make

    make.__name__, make.__doc__ = name, doc
    return make


@pytest.mark.parametrize("doc, name, says", [
    ("Scores.\n\nArgs:\n    value: A value.", "bad_reward", "named make_"),
    ("Scores.", "make_bad_reward", "['value']"),
    ("Scores.\n\nArgs:\n    value: A value.\n    other: Not a parameter.", "make_bad_reward", "['other']"),
    ("\n\nArgs:\n    value: A value.", "make_bad_reward", "says what the reward scores"),
    ("Scores.\n\nArgs:\n    value: A column.", "make_bad_reward", "Column parameter value has no default"),
    ("Scores.\n\nArgs:\n    value: A value.", "make_bad_reward", "needs a `Role:` line: one of task, format, shape"),
    ("Scores.\n\nRole: magic\n\nArgs:\n    value: A value.", "make_bad_reward", "(got 'magic"),
    ("Scores.\n\nRole: task, scores 0 to top\n\nArgs:\n    value: A value.", "make_bad_reward",
     "bound 'top' is neither a number nor a parameter"),
])
def test_a_declaration_lacking_a_part_is_refused_naming_it(doc, name, says):
    with pytest.raises(TypeError, match=re.escape(says)):
        declared(_factory(doc, name, column="Column" in says))



def test_the_worked_example_in_the_docs_is_the_real_factory():
    """docs/development.md "Adding a reward" shows math_reward's declaration: every line it shows is in the source."""
    from conftest import ROOT

    from mcp_server.rewards import math_equivalence

    section = (ROOT / "docs" / "development.md").read_text(encoding="utf-8").split("## Adding a reward", 1)[1]
    shown = section.split("```python\n", 1)[1].split("```", 1)[0]
    source = set(inspect.getsource(math_equivalence).splitlines())
    lines = [line for line in shown.splitlines() if line.strip() and line.strip() != "..."]
    assert len(lines) > 10 and [line for line in lines if line not in source] == []


def test_the_reference_table_names_each_reward_and_the_columns_it_reads():
    """references/reward-functions.md's registry table against what the factories declare."""
    from conftest import ROOT

    from mcp_server.rewards import REGISTRY

    page = (ROOT / "references" / "reward-functions.md").read_text(encoding="utf-8")
    table = page.split("## The registry", 1)[1].split("\n\n", 2)[1]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    reads = {re.fullmatch(r"`(\w+)`", name).group(1): re.findall(r"`(\w+)`", read) for name, _, read, *_ in rows}
    assert reads == {name: reward.info.columns for name, reward in REGISTRY.items()}


def test_the_review_reads_a_rewards_role_and_range_from_its_factory_alone(monkeypatch):
    """Issue 46: a new task reward added by its factory alone is what the review's success rule counts and what the
    threshold checks bound; before, a reward missing from inspection/success.py's tables was silently a shape."""
    from mcp_server.errors import UserInputError
    from mcp_server.inspection.success import check_threshold, is_success, is_task_spec, reward_range
    from mcp_server.rewards import REGISTRY
    from mcp_server.rewards.spec import RewardSpec

    monkeypatch.setitem(REGISTRY, "probe_reward", declared(make_probe_reward))
    probe, fmt = RewardSpec(name="probe_reward", params={"cutoff": 4}), RewardSpec(name="format_reward")
    assert is_task_spec(probe) and reward_range(probe) == (0.0, 4.0)
    scores = [[4.0, 0.0], [1.0, 1.0]]  # completion 0 does the task, completion 1 only the format
    assert is_success([probe, fmt], scores, 0, 5.0, None) and not is_success([probe, fmt], scores, 1, 1.0, None)
    with pytest.raises(UserInputError, match="above the highest total the rewards can give \\(5\\)"):
        check_threshold([probe, fmt], scores, 6.0)


def test_dapo_l_max_is_owned_by_its_reward_and_follows_the_final_length(workspace):
    """Issue 46: soft_overlong_punishment declares (Follows:) that its L_max is the config's max_completion_length
    and its L_cache DAPO's share of it unless a spec gives one; emission writes them from the final config, so an
    override (or a memory lever) that changes the length after DAPO added the reward moves L_max with it."""
    from mcp_server.rewards.registry import REGISTRY
    from support import emit_config

    shaping = REGISTRY["soft_overlong_punishment"]
    assert shaping.followed({}, {"max_completion_length": 1000}) == {"max_completion_len": 1000,
                                                                    "soft_punish_cache": 200}
    assert shaping.followed({"max_completion_len": 5, "soft_punish_cache": 50},
                            {"max_completion_length": 400}) == {"max_completion_len": 400, "soft_punish_cache": 50}
    result = emit_config(model="tiny", gpu="cpu", variant="dapo", overrides={"max_completion_length": 100})
    specs = {s["name"]: s for s in json.loads(Path(result.run_dir, "train", "rewards.json").read_text())}
    assert specs["soft_overlong_punishment"]["params"] == {"max_completion_len": 100, "soft_punish_cache": 20}
    assert result.validation.valid, result.validation.findings


def test_a_follows_line_naming_no_parameter_is_refused_at_import():
    from mcp_server.rewards.declared import declared

    def make_bad(limit: int = 3) -> Callable:
        """Scores nothing.

        Role: shape

        Follows: limt = max_completion_length

        Args:
            limit: a limit.
        """

    with pytest.raises(TypeError, match="Follows: entry 'limt = max_completion_length'"):
        declared(make_bad)
