"""Reward library: every reward in both completion formats, the registry and its errors, the hash, list_rewards;
and the survivors of issue 33's own mutation audit, scored as TRL calls the rewards (build_reward_funcs)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

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


# Plain-text replies SmolLM2-135M-Instruct gave at temperature 1 (issue 31), and their golds: a reader scores each by
# its final stated answer; a parser that takes the first number scores the first as 1.
REAL_PHRASING = [
    ("1 + 5 = 6 as we start in any context...", "6", True),
    ("7 + 7 = **8**", "14", False),
    ("7 + 7 = **8**", "8", True),
    ("The answer is 17.", "17", True),
    ("The answer is: **14**", "14", True),
    ("The answer is 7 + 7 = 14", "14", True),
    ("I think 12 or 13", "12", False),  # several numbers, none stated: a hedge, no answer
    ("12", "12.0", True),
    ("Sure! The answer is Paris.", "Paris", True),
]


@pytest.mark.parametrize("conversational", [False, True])
def test_correctness_without_a_tag_reads_the_final_stated_answer(conversational):
    (correct,) = build_reward_funcs([{"name": "correctness_reward", "params": {"tag": None}}])
    texts = [t for t, _, _ in REAL_PHRASING]
    completions = both_formats(texts)[1 if conversational else 0]
    scores = correct(completions, answer=[g for _, g, _ in REAL_PHRASING])
    assert scores == [2.0 if right else 0.0 for _, _, right in REAL_PHRASING], list(zip(texts, scores))


def test_final_answer_of_real_phrasing():
    from mcp_server.rewards.answers import final_answer

    assert [final_answer(t) for t, _, _ in REAL_PHRASING[:4]] == ["6", "8", "8", "17"]
    assert final_answer("so \\boxed{42}") == "42" and final_answer("noise") is None


def test_read_answer_reads_number_words_and_never_an_echoed_operand():
    """The review's reading of a reply's final answer (issue 49's walk): digits or English words, the whole reply
    or its last statement; an operand, a word-part ("base-10") or the question's own number is no answer; two
    candidates, a hedge or a lone word in passing ("no one") is unsure."""
    from mcp_server.rewards.answers import as_number, read_answer

    question = "What is three plus four? Answer with the number."
    answers = {"7": "7", "7.": "7", "Seven.": "Seven", "**7**": "7", "The answer is 7": "7", "3 + 4 = 7": "7",
               "Three plus four equals seven.": "seven", "Three plus four is seven, not four.": "seven",
               "One plus nine is equal to 11. In": "11", "The sum is twenty-one.": "twenty-one",
               "The answer is \"five\", but only": "five", "The number is 6 + 2, which equals seven": "seven"}
    assert {t: read_answer(t, question).answer for t in answers} == answers
    for text in ["Three plus four is 3 + 4", "Three plus seven is a base-10 expression,", "Zero plus two, as 2 + 2",
                 "Three plus four, that is four plus three", "Here's the step-by-step sequence"]:
        assert read_answer(text, question).how == "none", text
    for text in ["The answer is 7 or 8", "Eight. \n\n10, 2.", "This is one of them", "No one knows: 7, 9"]:
        assert read_answer(text, question).how == "unsure", text
    assert read_answer("To add 3 and 4 we combine", question).echoed == {3, 4}
    assert [as_number(w, words=True) for w in ["seven", "Twenty-one", "one hundred and five", "7"]] == [7, 21, 105, 7]
    assert as_number("seven") is None  # a reward's own parse (correctness_reward) stays digits only


def test_correctness_params():
    (c,) = build_reward_funcs(
        [
            {
                "name": "correctness_reward",
                "params": {"answer_column": "gold", "tag": "final", "value": 1.0, "ignore_case": True},
            }
        ]
    )
    assert c(["<final> Paris </final>", "<final>Lyon</final>", "Paris"], gold=["paris"] * 3) == [1.0, 0.0, 0.0]
    with pytest.raises(UserInputError, match="no column 'gold'"):
        c(["<final>x</final>"], answer=["x"])


def test_rewards_are_picklable_and_named_uniquely():
    funcs = build_reward_funcs(["format_reward", {"name": "format_reward", "params": {"tags": ["answer"]}}])
    assert [f.__name__ for f in funcs] == ["format_reward", "format_reward_1"]
    again = build_reward_funcs(["format_reward", "mcp_server.rewards.format_reward"])
    assert [f.__name__ for f in again] == ["format_reward", "format_reward_1"]
    from mcp_server.rewards import format_reward

    assert format_reward.__name__ == "format_reward"  # the module-level default is never renamed in place
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
    (tmp_path / "my_rewards.py").write_text("def short(completions, **kw):\n    return [1.0 if len(str(c)) < 5 else "
                                            "0.0 for c in completions]\n")
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


# ---------------------------------------------------------------- math_reward
@pytest.mark.parametrize(
    "completions",
    both_formats(
        [
            "<answer>0.5</answer>",
            "<answer>1/2</answer>",
            "<answer>\\frac{1}{2}</answer>",
            "<answer>0.3</answer>",
            "the answer is \\boxed{0.5}",
            "<answer>0.5</answer><answer>7</answer>",
        ]
    ),
)
def test_math_reward_equivalence_in_both_formats(completions):
    (math_tag, math_boxed) = build_reward_funcs(
        ["math_reward", {"name": "math_reward", "params": {"tag": None, "value": 1.0}}]
    )
    gold = ["\\frac{1}{2}"] * len(completions)
    assert math_tag(completions, answer=gold) == [2.0, 2.0, 2.0, 0.0, 0.0, 0.0]
    assert math_boxed(completions, answer=gold)[4] == 1.0  # TRL's LaTeX extraction over the whole text


def test_math_reward_unparseable_gold_scores_zero_not_none():
    from mcp_server.rewards import math_reward

    assert math_reward(["<answer>5</answer>", "<answer>5</answer>"], answer=["5", "not math at all ]]"]) == [2.0, 0.0]


# ---------------------------------------------------------------- json_schema_reward
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}
NUMBERS = {"type": "array", "items": {"type": "number"}}


@pytest.mark.parametrize(
    "completions", both_formats(['{"name": "Ana", "age": 3}', '```json\n{"name": "Bo"}\n```', '{"age": 3}', "not json"])
)
def test_json_schema_one_schema_for_the_batch(completions):
    (fixed,) = build_reward_funcs([{"name": "json_schema_reward", "params": {"schema": PERSON}}])
    assert fixed(completions) == [1.0, 1.0, 0.0, 0.0]
    from mcp_server.rewards import json_schema_reward

    assert json_schema_reward(completions, schema=PERSON) == [1.0, 1.0, 0.0, 0.0]  # a dict column: one for all


def test_json_schema_dict_is_never_zipped_by_keys():
    # Three completions and a three-key schema dict: zipping would pair completions with "type", "properties", ...
    from mcp_server.rewards import json_schema_reward

    texts = ['{"name": "a"}', '{"name": "b"}', '{"name": 1}']
    assert len(PERSON) == len(texts)
    assert json_schema_reward(texts, schema=PERSON) == [1.0, 1.0, 0.0]


@pytest.mark.parametrize("completions", both_formats(['{"name": "Ana"}', "[1, 2.5]", "[1, 2.5]"]))
def test_json_schema_one_per_example_from_a_column(completions):
    from mcp_server.rewards import json_schema_reward

    import json

    assert json_schema_reward(completions, schema=[PERSON, NUMBERS, PERSON]) == [1.0, 1.0, 0.0]
    as_strings = [json.dumps(s) for s in (PERSON, NUMBERS, PERSON)]  # the safe way to store schemas in Arrow
    (by_column,) = build_reward_funcs([{"name": "json_schema_reward", "params": {"schema_column": "spec"}}])
    assert by_column(completions, spec=as_strings) == [1.0, 1.0, 0.0]


def test_json_schema_errors():
    from mcp_server.rewards import json_schema_reward

    with pytest.raises(UserInputError, match="2 schemas for 3 completions"):
        json_schema_reward(["{}", "{}", "{}"], schema=[PERSON, PERSON])
    with pytest.raises(UserInputError, match="no 'schema' column"):
        json_schema_reward(["{}"])
    with pytest.raises(UserInputError) as info:
        build_reward_funcs([{"name": "json_schema_reward", "params": {"schema": {"type": "no-such-type"}}}])
    assert info.value.field == "rewards[0].params.schema"
    with pytest.raises(UserInputError, match="per-example schemas come from a column"):
        build_reward_funcs([{"name": "json_schema_reward", "params": {"schema": [PERSON]}}])


# ---------------------------------------------------------------- length_penalty
LONG_RIGHT = RIGHT + " " + "very " * 40
LONG_WRONG = WRONG + " " + "very " * 40


@pytest.mark.parametrize("completions", both_formats([RIGHT, LONG_RIGHT, WRONG, LONG_WRONG]))
def test_length_penalty_never_drives_a_right_answer_below_zero(completions):
    spec = {"name": "length_penalty", "params": {"reward": {"name": "correctness_reward"}, "target_tokens": 10,
                                                  "max_tokens": 20, "max_penalty": 5.0}}
    (penalised,) = build_reward_funcs([spec])
    assert penalised.__name__ == "length_penalty_correctness_reward"
    scores = penalised(completions, answer=["5"] * 4)
    assert scores[0] == 2.0  # short and right: untouched
    assert scores[1] == 0.0  # long and right: penalty 5 > 2, floored at 0, not -3
    assert scores[2] == 0.0  # short and wrong
    assert scores[3] == -5.0  # long and wrong: penalised in full


def test_length_penalty_counts_tokens_with_the_tokenizer(tiny_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    text = RIGHT + " 12345678901234567890"
    n_tokens = len(tok(text, add_special_tokens=False)["input_ids"])
    n_words = len(text.split())
    assert n_tokens > n_words + 3
    params = {
        "reward": {"name": "correctness_reward"},
        "target_tokens": n_words,
        "max_tokens": n_tokens,
        "max_penalty": 1.0,
    }
    (by_words,) = build_reward_funcs([{"name": "length_penalty", "params": params}])
    (by_tokens,) = build_reward_funcs([{"name": "length_penalty", "params": {**params, "tokenizer": str(tiny_model)}}])
    assert by_words([text], answer=["5"]) == [2.0]
    assert by_tokens([text], answer=["5"]) == [1.0]  # a full penalty at max_tokens
    assert by_words([text], answer=["5"], completion_ids=[[0] * n_tokens]) == [1.0]  # TRL's ids when no tokenizer


@pytest.mark.parametrize(
    "params, field",
    [
        ({}, "rewards[0].params.reward"),
        ({"reward": {"name": "corectness_reward"}}, "rewards[0].params.reward.name"),
        (
            {"reward": {"name": "correctness_reward"}, "target_tokens": 100, "max_tokens": 50},
            "rewards[0].params.max_tokens",
        ),
        ({"reward": {"name": "correctness_reward"}, "max_penalty": -1}, "rewards[0].params.max_penalty"),
        ({"reward": {"params": {}}}, "rewards[0].params.reward"),
        ({"reward": {"name": "correctness_reward", "params": {"colum": "a"}}}, "rewards[0].params.reward.params"),
    ],
)
def test_length_penalty_errors(params, field):
    with pytest.raises(UserInputError) as info:
        build_reward_funcs([{"name": "length_penalty", "params": params}])
    assert info.value.field == field


# ---------------------------------------------------------------- rubric_judge
def strict_judge(prompt: str) -> str:
    """A stand-in judge (the callable form): PASS when the graded response cites a source."""
    response = prompt.split("Response:\n", 1)[1]
    return "PASS" if "[source]" in response else "FAIL, no source"


@pytest.mark.parametrize("completions", both_formats(["Paris [source]", "Paris", "[source] but long"]))
def test_rubric_judge_callable_in_both_formats(completions):
    spec = {"name": "rubric_judge", "params": {"rubric": "Cites a source.", "judge": strict_judge,
                                                "judge_family": "llama", "policy_model": "Qwen/Qwen2.5-0.5B-Instruct"}}
    (judged,) = build_reward_funcs([spec])
    assert judged(completions, prompts=["Capital of France?"] * 3) == [1.0, 0.0, 1.0]


def test_rubric_judge_is_binary_only():
    from mcp_server.rewards.judge import parse_verdict

    assert [parse_verdict(r) for r in ("PASS", "fail.", "Verdict: pass", True, 1, 0)] == [
        True,
        False,
        True,
        True,
        True,
        False,
    ]
    assert [parse_verdict(r) for r in ("7/10", 0.7, "maybe", None, 8)] == [None] * 5
    replies = iter(["7/10", "PASS", "score: 1.0"])
    (judged,) = build_reward_funcs([{"name": "rubric_judge", "params": {
        "rubric": "r", "judge": lambda _: next(replies), "judge_family": "gpt", "policy_model": "Qwen/Qwen2.5-0.5B"}}])
    assert judged(["a", "b", "c"]) == [0.0, 1.0, 0.0]  # graded or unclear replies are not a pass


def test_rubric_judge_refuses_same_family_and_hub_names(tiny_model):
    base = {"rubric": "Cites a source.", "policy_model": "Qwen/Qwen2.5-1.5B-Instruct"}
    cases = [
        ({**base, "judge": str(tiny_model)}, "rewards[0].params.judge", "policy's model family ('qwen')"),
        ({**base, "judge": strict_judge, "judge_family": "Qwen"}, "rewards[0].params.judge", "model family"),
        ({**base, "judge": "meta-llama/Llama-3.1-8B-Instruct"}, "rewards[0].params.judge", "not downloaded"),
        ({**base, "judge": strict_judge}, "rewards[0].params.judge_family", "set judge_family"),
        (
            {**base, "judge": strict_judge, "judge_family": "llama", "policy_model": "my-model"},
            "rewards[0].params.policy_family",
            "",
        ),
        ({**base, "judge": strict_judge, "judge_family": "llama", "rubric": " "}, "rewards[0].params.rubric", ""),
        ({**base, "judge": "no_such_mod_q.judge", "judge_family": "llama"}, "rewards[0].params.judge", "cannot import"),
    ]
    for params, field, text in cases:
        with pytest.raises(UserInputError) as info:
            build_reward_funcs([{"name": "rubric_judge", "params": params}])
        assert info.value.field == field, params
        assert text in str(info.value)


def judge_that_says(tiny_model: Path, word: str, directory: Path) -> Path:
    """A copy of the tiny model whose greedy reply is `word` by construction: its generation_config biases each
    prefix of `word` + eos far above anything the untrained weights prefer (transformers' sequence_bias)."""
    from transformers import AutoTokenizer

    shutil.copytree(tiny_model, directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    ids = tokenizer(word, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    config_path = directory / "generation_config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    config["sequence_bias"] = [[ids[: i + 1], 1000.0 * (i + 1)] for i in range(len(ids))]
    config_path.write_text(json.dumps(config))
    return directory


def test_rubric_judge_with_a_local_model_directory(tiny_model, tmp_path):
    # The tiny model is Qwen2-architecture: as a judge it is allowed only for a policy of another family.
    # Its greedy reply decides the score: a judge model that says PASS passes both, one that says FAIL neither.
    completions = ["hello", [{"role": "assistant", "content": "bye"}]]
    for word, expected in (("PASS", [1.0, 1.0]), ("FAIL", [0.0, 0.0])):
        judge = judge_that_says(tiny_model, word, tmp_path / f"judge-says-{word}")
        spec = {"name": "rubric_judge", "params": {"rubric": "Says hello.", "judge": str(judge),
                                                    "policy_model": "meta-llama/Llama-3.2-1B-Instruct"}}
        (judged,) = build_reward_funcs([spec])
        assert judged(completions) == expected, word


# ---------------------------------------------------------------- list_rewards (core, CLI, MCP)
REGISTRY_NAMES = {"format_reward", "correctness_reward", "math_reward", "json_schema_reward", "code_execution_reward",
                  "length_penalty", "soft_overlong_punishment", "rubric_judge"}


def test_list_rewards_core_and_every_example_builds():
    from mcp_server.rewards import REGISTRY, list_rewards

    catalog = list_rewards()
    assert {r.name for r in catalog.rewards} == REGISTRY_NAMES == set(REGISTRY)
    for info in catalog.rewards:
        assert info.description and all(p.description for p in info.params)
        if info.name != "rubric_judge":  # its example names a judge directory that is not on this machine
            build_reward_funcs([info.example])
        if info.dotted_path:
            assert build_reward_funcs([info.dotted_path])[0].__name__ == info.name
    judge = next(r for r in catalog.rewards if r.name == "rubric_judge")
    assert {p.name for p in judge.params if p.required} == {"rubric", "judge", "policy_model"}


def test_list_rewards_cli():
    from conftest import run_cli, run_cli_json

    proc, data = run_cli_json("list-rewards")
    assert proc.returncode == 0
    assert {r["name"] for r in data["rewards"]} == REGISTRY_NAMES
    human = run_cli("list-rewards")
    assert human.returncode == 0 and "code_execution_reward" in human.stdout and "dotted path" in human.stdout


@pytest.mark.slow
def test_list_rewards_over_mcp():
    import asyncio

    from conftest import call_mcp

    async def calls(client):
        tools = {t.name for t in (await client.list_tools()).tools}
        return tools, await client.call_tool("list_rewards", {})

    tools, result = asyncio.run(call_mcp(calls))
    assert "list_rewards" in tools
    assert {r["name"] for r in result.structured_content["rewards"]} == REGISTRY_NAMES


# ---------------------------------------------------------------- inside TRL's GRPOTrainer
@pytest.mark.slow
def test_rewards_drive_a_real_grpo_step(tiny_model, tmp_path):
    """The registry's functions as GRPOTrainer gets them: conversational completions, dataset columns as kwargs."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from mcp_server.tiny import make_task

    specs = ["format_reward", "correctness_reward",
             {"name": "length_penalty", "params": {"reward": {"name": "math_reward"}, "tokenizer": str(tiny_model)}}]
    seen = {}

    def spy(completions, **kwargs):
        seen.update(kwargs, completions=completions)
        return [0.0] * len(completions)

    config = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        use_cpu=True,
        bf16=False,
    )
    trainer = GRPOTrainer(model=str(tiny_model), reward_funcs=build_reward_funcs(specs) + [spy], args=config,
                          train_dataset=Dataset.from_list(make_task(n=8)))
    trainer.train()
    logged = {k for entry in trainer.state.log_history for k in entry}
    for name in ("format_reward", "correctness_reward", "length_penalty_math_reward"):
        assert f"rewards/{name}/mean" in logged
    assert isinstance(seen["completions"][0], list) and seen["completions"][0][0]["role"] == "assistant"
    assert len(seen["answer"]) == len(seen["completions"])


# ---------------------------------------------------------------- survivors of issue 33's own mutation audit
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


# ---------------------------------------------------------------- which fenced block a reward scores
# m12-sandbox-first-block: the docs (references/reward-functions.md) score "the code_tag block, else the last
# ```python block, else the whole text"; json_schema_reward likewise its tag block, else the last ```json block,
# else the whole text (one reading of fences for both: rewards.text.fenced_blocks). Rows: every number (0-3) and
# order of fenced blocks, each tagged with one the reward reads (and a case of one) or one it does not; the block
# that must be scored holds the right answer, every other block a wrong one. tests/test_sandbox.py runs the code
# rows through the reward.
def fenced_rows(tags: tuple[str, ...], accepted: tuple[str, ...], right: str, wrong: str) -> list[tuple]:
    """(completion, the block that must be scored: None for the whole text), for every sequence of `tags`; a block
    is read where its tag (any case) is one of `accepted`."""
    import itertools

    rows = []
    for n in range(4):
        for sequence in itertools.product(tags, repeat=n):
            read = [i for i, tag in enumerate(sequence) if tag.lower() in accepted]
            scored = read[-1] if read else None
            blocks = [f"```{tag}\n{right if i == scored else wrong}```\n" for i, tag in enumerate(sequence)]
            text = "Here is my answer:\n" + "Or, better:\n".join(blocks) if blocks else right
            rows.append((text, right if read else None))
    return rows


# The fence tags each reward reads, written out as references/reward-functions.md gives them (not read from the
# code's PYTHON_TAGS or JSON_TAGS: a tag the code drops would drop out of the expectation too, m14 #10).
PYTHON_FENCES = ("", "python", "python3", "py")
JSON_FENCES = ("", "json")


def _code_rows():
    return fenced_rows((*PYTHON_FENCES, "PY", "js"), PYTHON_FENCES, RIGHT_CODE, WRONG_CODE)


def _json_rows():
    return fenced_rows((*JSON_FENCES, "JSON", "js", "python"), JSON_FENCES, RIGHT_JSON, WRONG_JSON)


RIGHT_CODE = "def add(a, b):\n    return a + b\n"
WRONG_CODE = "def add(a, b):\n    return a * b\n"
FENCED_ROWS = _code_rows()
RIGHT_JSON = '{"name": "x"}\n'
WRONG_JSON = '{"nope": 1}\n'
JSON_FENCED_ROWS = _json_rows()


@pytest.mark.parametrize("text,scored", FENCED_ROWS, ids=[f"row{i}" for i in range(len(FENCED_ROWS))])
def test_the_last_fenced_python_block_is_the_code_scored(text, scored):
    from mcp_server.rewards.code import extract_code

    assert extract_code(text) == (text if scored is None else scored), text
    assert extract_code(text + "<code>x = 1</code>", code_tag="code") == "x = 1"  # a tag set: its block, fences or not


@pytest.mark.parametrize("text,scored", JSON_FENCED_ROWS, ids=[f"row{i}" for i in range(len(JSON_FENCED_ROWS))])
def test_the_last_fenced_json_block_is_the_json_scored(text, scored):
    from mcp_server.rewards.json_schema import extract_json

    assert extract_json(text) == (text if scored is None else scored).strip(), text
    assert extract_json(text + '<json>{"a": 1}</json>', tag="json") == '{"a": 1}'  # a tag set: its block only


def test_the_json_reward_scores_the_table_of_fenced_blocks():
    """JSON_FENCED_ROWS through the reward itself: 1.0 only where the right object is the block the docs say is
    scored (the last ```json or untagged one; no such fence: the whole text, JSON only when it is nothing else)."""
    spec = {"name": "json_schema_reward", "params": {"schema": {"type": "object", "required": ["name"]}}}
    got = score(spec, [text for text, _ in JSON_FENCED_ROWS])
    want = [1.0 if scored == RIGHT_JSON or text == RIGHT_JSON else 0.0 for text, scored in JSON_FENCED_ROWS]
    assert got == want, [text for (text, _), g, w in zip(JSON_FENCED_ROWS, got, want, strict=True) if g != w]
