"""Issue 12, "The gate pins everything it vouched for", and issue 13's precise "likely mis-scored" list, through
the doors (CLI, MCP over stdio). Each observation of the issue is a step here that passed the gate before:
a success threshold that every completion meets, samples from another model, a re-emitted config, an edited
train.py, an edited helper module of the reward, a hand-made verdict.json. Issue 25's second round, through the core
API and the CLI: a train/ directory that shadows the package, config fields the verdict did not pin, a model file
edited in place, a verdict written by hand whose hashes are right but whose route, base rate or reviewed ids are not
the review's, blank and escape-coded reviewers, a pass that disagrees with every score. And two survivors of issue
33's own mutation audit: how much agreement a pass needs, and every field that changes the objective pinned."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import call_mcp, run_cli, run_cli_json
from support import hand_made_run, sign_samples
from mcp_server.emission.emit import emit_grpo_config
from mcp_server.errors import UserInputError
from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
from mcp_server.inspection.models import InspectRequest, SampleRequest, VerdictRequest
from mcp_server.inspection.review import inspect_rewards
from mcp_server.inspection.sampling import sample_completions
from mcp_server.recipe.models import GRPORecipeRequest

REWARD_MODULE = '''
from pin_helper import VALUE


def scored(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [VALUE if t.strip() else 0.0 for t in texts]
'''


# ---------------------------------------------------------------- the success rule
@pytest.mark.slow
def test_a_success_threshold_that_cannot_fail_or_pays_malformed_output_is_refused(workspace, tiny_model):
    right = "<reasoning>1 + 1 = 2</reasoning><answer>2</answer>"
    malformed_right = "<answer>2</answer>"  # correctness pays 2, format 0
    wrong = "<reasoning>1 + 1 = 3</reasoning><answer>3</answer>"
    groups = [[right, wrong, wrong, wrong]] + [[malformed_right, wrong, "noise", wrong]] * 12
    run_dir = hand_made_run(workspace, tiny_model, "threshold", groups, ["2"] * 13)

    # Observed: -1 turned a 0% base rate into 100%. Totals here run from 0 (noise) to 3 (right and well-formed).
    proc = run_cli("inspect-rewards", str(run_dir), "--success-threshold", "-1", "--json")
    assert proc.returncode == 2 and "success_threshold" in proc.stderr and "every completion" in proc.stderr
    assert "Traceback" not in proc.stderr and not (run_dir / "inspection" / "review.json").exists()
    proc = run_cli("inspect-rewards", str(run_dir), "--success-threshold", "2", "--json")
    assert proc.returncode == 2 and "counts malformed output as success" in proc.stderr and "above 2" in proc.stderr
    proc = run_cli("inspect-rewards", str(run_dir), "--success-threshold", "4", "--json")
    assert proc.returncode == 2 and "above the highest total" in proc.stderr
    proc, strict = run_cli_json("inspect-rewards", str(run_dir), "--success-threshold", "3")
    assert proc.returncode == 0 and strict["base_success_rate"] == pytest.approx(1 / 13)
    # The default rule agrees: a right answer in a malformed completion is not a success.
    proc, default = run_cli_json("inspect-rewards", str(run_dir))
    assert proc.returncode == 0 and default["base_success_rate"] == pytest.approx(1 / 13)
    assert default["success_rule"].startswith("every task and format reward scores > 0")

    async def calls(client):
        return await client.call_tool("inspect_rewards", {"run": str(run_dir), "success_threshold": -1})

    refused = asyncio.run(call_mcp(calls))
    assert refused.is_error and "success_threshold" in refused.content[0].text


# ---------------------------------------------------------------- the pins
@pytest.fixture()
def reward_with_helper(tmp_path, monkeypatch):
    """A dotted-path reward whose score comes from a helper module beside it."""
    pkg = tmp_path / "user-rewards"
    pkg.mkdir()
    (pkg / "pin_rewards.py").write_text(REWARD_MODULE)
    (pkg / "pin_helper.py").write_text("VALUE = 1.0\n")
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(pkg), os.environ.get("PYTHONPATH")])))
    for name in ("pin_rewards", "pin_helper"):  # an earlier test's modules (another tmp_path) are not this one's
        monkeypatch.delitem(sys.modules, name, raising=False)
    return pkg


def _gate(run_dir: Path) -> dict:
    proc, gate = run_cli_json("check-inspection-gate", str(run_dir))
    assert proc.returncode == (0 if gate["passed"] else 1), proc.stderr
    return gate


@pytest.mark.slow
def test_the_gate_pins_everything_it_vouched_for(workspace, tiny_model, reward_with_helper):
    base = shutil.copytree(tiny_model, workspace / "base-model")  # the configured model (tiny is another one)
    data = workspace / "sums.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"Q: {a} + 1 = ? A:", "answer": str(a + 1)}) + "\n" for a in range(30))
    )
    emitted = emit_grpo_config(GRPORecipeRequest(
        model=str(base), dataset=str(data), gpu="cpu", run_name="pinned", rewards=[{"name": "pin_rewards.scored"}],
        overrides={"num_generations": 4, "max_completion_length": 12}))
    run_dir = Path(emitted.run_dir)

    def sign_off():
        sampled = sample_completions(SampleRequest(run=str(run_dir), num_prompts=16, engine="transformers"))
        assert sampled.differs_from_config == []
        assert inspect_rewards(InspectRequest(run=str(run_dir))).grpo_can_learn
        proc, recorded = run_cli_json("record-inspection-verdict", str(run_dir), "--verdict", "pass",
                                      "--reviewer", "ana", "--agree-rest")
        assert proc.returncode == 0 and recorded["gate"]["passed"], proc.stderr

    sign_off()
    verdict = json.loads((run_dir / "inspection" / "verdict.json").read_text())
    assert (
        verdict["pins"]["model"]["model"] == str(base.resolve()) and verdict["pins"]["data"][0]["sources"][0]["sha256"]
    )
    assert verdict["pins"]["sampling"]["num_generations"] == 4 and verdict["success_rule"]

    # train/train.py edited (to a constant reward, say): closed, and says so; put back, open.
    script = run_dir / "train" / "train.py"
    original = script.read_text()
    assert "reward_funcs=reward_funcs," in original
    script.write_text(original.replace("reward_funcs=reward_funcs,", "reward_funcs=[lambda **k: [1.0]],"))
    gate = _gate(run_dir)
    assert not gate["passed"] and gate["changed"] == ["train/train.py changed"]
    script.write_text(original)
    assert check_inspection_gate(run_dir).passed

    # A helper module the reward imports, edited: the reward changed.
    helper = reward_with_helper / "pin_helper.py"
    helper.write_text("VALUE = 0.5\n")
    gate = _gate(run_dir)
    assert not gate["passed"] and "the reward changed" in gate["reason"]
    helper.write_text("VALUE = 1.0\n")
    assert check_inspection_gate(run_dir).passed

    # A sampling setting in the config: named with its old and new value.
    config_file = run_dir / "train" / "config.yaml"
    config_text = config_file.read_text()
    config_file.write_text(config_text + "temperature: 0.7\n")
    gate = _gate(run_dir)
    assert not gate["passed"] and "sampling settings" in gate["reason"] and "temperature: null -> 0.7" in gate["reason"]
    config_file.write_text(config_text)
    assert check_inspection_gate(run_dir).passed

    # Another success rule (a new review): not the review the person signed.
    inspect_rewards(InspectRequest(run=str(run_dir), success_threshold=1.0))
    gate = _gate(run_dir)
    assert not gate["passed"] and "the success rule changed ('total reward > 0" in gate["reason"]
    assert "-> 'total reward >= 1')" in gate["reason"]
    inspect_rewards(InspectRequest(run=str(run_dir)))  # the same review again, byte for byte
    assert check_inspection_gate(run_dir).passed

    # A hand-made verdict.json with only the hashes and "pass" is not a verdict (CLI and MCP).
    verdict_file = run_dir / "inspection" / "verdict.json"
    real = verdict_file.read_text()
    verdict_file.write_text(json.dumps({"verdict": "pass", "samples_sha256": verdict["samples_sha256"],
                                        "reward_code_sha256": verdict["reward_code_sha256"]}))
    gate = _gate(run_dir)
    assert not gate["passed"] and "is not a verdict" in gate["reason"] and "reviewer" in gate["reason"]

    async def calls(client):
        return await client.call_tool("check_inspection_gate", {"run": str(run_dir)})

    over_mcp = asyncio.run(call_mcp(calls)).structured_content
    assert over_mcp["passed"] is False and "is not a verdict" in over_mcp["reason"]
    forged = {**verdict, "sample_verdicts": verdict["sample_verdicts"][:10], "agree": 10}  # a pass on 10 of 64
    verdict_file.write_text(json.dumps(forged))
    gate = _gate(run_dir)
    assert not gate["passed"] and "judges 10 of the 64 reviewed samples" in gate["reason"]
    verdict_file.write_bytes(b"\x00\xff not json")
    gate = _gate(run_dir)
    assert not gate["passed"] and "cannot be read as a JSON object" in gate["reason"]
    verdict_file.write_text(real)
    assert check_inspection_gate(run_dir).passed

    # Samples of another model cannot back a verdict, and re-sampling closed the gate.
    sampled = sample_completions(SampleRequest(run=str(run_dir), model="tiny", num_prompts=16, engine="transformers"))
    assert sampled.differs_from_config[0].startswith(f"model: {Path(tiny_model).resolve()} (the config: "
                                                     f"{base.resolve()})")
    inspected = inspect_rewards(InspectRequest(run=str(run_dir)))
    assert any("cannot back a verdict" in w for w in inspected.warnings)
    proc = run_cli("record-inspection-verdict", str(run_dir), "--verdict", "pass", "--reviewer", "ana", "--agree-rest")
    assert proc.returncode == 2 and "cannot back a verdict" in proc.stderr and "model:" in proc.stderr
    assert not _gate(run_dir)["passed"]
    sign_off()
    assert check_inspection_gate(run_dir).passed

    # emit-config into the gated run with another model and data set: closed, naming both.
    # (emit-config --run-dir RUN --model tiny --dataset tiny, in-process: the CLI is the same core call)
    emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_dir=str(run_dir),
                                       rewards=[{"name": "pin_rewards.scored"}]))
    gate = _gate(run_dir)
    assert not gate["passed"] and "sample_completions" in gate["how_to_clear"]
    assert any(c.startswith("the model changed") for c in gate["changed"])
    assert any(c.startswith("the data set changed") for c in gate["changed"])
    assert check_inspection_gate(run_dir).changed == gate["changed"]


# ---------------------------------------------------------------- the "read these first" list
# (completion, gold, mis-scored?) under format_reward + correctness_reward (exact match in one <answer> block).
# Mis-scored: a reader would score it otherwise. The rest are scored as a reader would, whatever the text holds.
LABELLED = [
    ("<reasoning>0 + 9 = 8</reasoning><answer>8</answer>", "9", False),  # the 9 is the restated operand
    ("<reasoning>3 + 4 = 7</reasoning><answer>8</answer>", "7", False),  # gold in the reasoning, wrong answer
    ("<reasoning>3 + 4 = 7</reasoning><answer>7</answer>", "7", False),
    ("<reasoning>2 + 5</reasoning><answer>17</answer>", "7", False),
    ("<reasoning>x</reasoning><answer>7</answer><answer>8</answer>", "7", False),  # hedging
    ("<reasoning>x</reasoning><answer>7 or 8</answer>", "7", False),
    ("<reasoning>x</reasoning><answer>-7</answer>", "7", False),
    ("7", "7", False),  # no answer block: the format is the task's rule
    ("The answer is 7.", "7", False),
    ("noise 7 noise", "7", False),
    ("<reasoning>x</reasoning><answer>The answer is 7</answer>", "7", True),
    ("<reasoning>x</reasoning><answer>7.</answer>", "7", True),
    ("<reasoning>x</reasoning><answer>7.0</answer>", "7", True),
    ("<reasoning>x</reasoning><answer>$7$</answer>", "7", True),
    ("<reasoning>x</reasoning><answer>\\boxed{7}</answer>", "7", True),
    ("<reasoning>x</reasoning><answer>0.5</answer>", "1/2", True),
    ("<reasoning>x</reasoning><answer>paris</answer>", "Paris", True),
    ("<reasoning></reasoning><answer>7</answer>", "7", True),  # format pays an empty reasoning block
    ("<reasoning>x</reasoning><answer> </answer>", "7", True),  # format pays an empty answer
    ("<reasoning><answer>7</answer></reasoning><answer>7</answer>", "7", False),  # format already pays 0
]


def _labelled_run(workspace, tiny_model, name, labelled, filler, rewards=None) -> tuple[Path, list]:
    """13 prompts x 4 (a review needs 50): the labelled samples, then `filler` (scored right); one gold each."""
    items = labelled + [filler] * (52 - len(labelled))
    groups = [[text for text, _, _ in items[i: i + 4]] for i in range(0, 52, 4)]
    run_dir = hand_made_run(workspace, tiny_model, name, groups, ["?"] * 13, rewards)
    samples_file = run_dir / "inspection" / "samples.jsonl"
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    for sample, (_, gold, _) in zip(samples, items):  # one gold per sample (the columns are per row)
        sample["columns"]["answer"] = gold
    samples_file.write_text("".join(json.dumps(s) + "\n" for s in samples))
    sign_samples(run_dir)  # as the sampler signs what it wrote
    return run_dir, items


def test_likely_misscored_list_is_precise_on_a_labelled_set(workspace, tiny_model):
    run_dir, items = _labelled_run(workspace, tiny_model, "labelled", LABELLED,
                                   ("<reasoning>x</reasoning><answer>2</answer>", "2", False))
    proc, result = run_cli_json("inspect-rewards", str(run_dir), "--max-suspects", "100")
    assert proc.returncode == 0, proc.stderr
    flagged = {s["id"] for s in result["likely_misscored"]}
    truth = {i for i, (_, _, bad) in enumerate(items) if bad}
    precision = len(flagged & truth) / len(flagged)
    recall = len(flagged & truth) / len(truth)
    print(f"likely mis-scored: precision {precision:.2f} ({len(flagged & truth)}/{len(flagged)}), "
          f"recall {recall:.2f} on {len(items)} labelled samples")
    assert precision >= 0.9 and recall >= 0.8, (sorted(flagged), sorted(truth))
    assert 0 not in flagged  # the demo's <reasoning>0 + 9 = 8</reasoning><answer>8</answer>, gold 9
    sheet = Path(result["review_md_path"]).read_text()
    assert "Sample 0 (prompt 0)" not in sheet.split("## Read these first")[1].split("## Samples")[0]


# math_reward reading \boxed{} anywhere (tag null): equivalence is math-verify's; the list flags only numbers.
LABELLED_MATH = [
    ("so \\boxed{\\frac{1}{2}}", "0.5", False),  # paid, and right: 1/2 = 0.5 (the old rule: "gold does not appear")
    ("0 + 9 = 8, so \\boxed{8}", "9", False),
    ("\\boxed{\\sqrt{8}}", "$2\\sqrt{2}$", False),  # paid, and right: symbolic, not the list's to doubt
    ("the answer is 7", "7", False),  # no \boxed{}: the rule of this reward
    ("\\boxed{7}", "7", False),
    ("\\boxed{The answer is 7}", "7", True),  # unpaid, though the box says 7
]


def test_likely_misscored_list_with_math_equivalence(workspace, tiny_model):
    rewards = [{"name": "math_reward", "params": {"tag": None}}]
    run_dir, items = _labelled_run(workspace, tiny_model, "math", LABELLED_MATH, ("\\boxed{2}", "2", False), rewards)
    result = inspect_rewards(InspectRequest(run=str(run_dir), max_suspects=100))
    scores = [
        r["scores"]["math_reward"] for r in map(json.loads, Path(result.review_jsonl_path).read_text().splitlines())
    ]
    assert scores[:6] == [2.0, 0.0, 2.0, 0.0, 2.0, 0.0]  # what math-verify pays (the labels assume it)
    assert {s.id for s in result.likely_misscored} == {5}


# Real phrasing (issue 31, SmolLM2-135M-Instruct at temperature 1) under correctness_reward's exact <answer> match and
# a user reward that takes the first number: each mis-score is flagged, each right score is not.
FIRST_NUMBER_MODULE = '''
import re


def first_number(completions, answer, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    found = [re.search(r"-?\\d+", t) for t in texts]
    return [1.0 if m and m.group() == str(a) else 0.0 for m, a in zip(found, answer)]
'''
LABELLED_REAL = [
    ("<answer>**8**</answer>", "8", True),  # exact match says 0; the block says 8
    ("<answer>1 + 5 = 6</answer>", "6", True),  # its final stated answer is 6
    ("<answer>The answer is 17.</answer>", "17", True),
    ("<answer>7 + 7 = **8**</answer>", "14", False),  # wrong, and scored 0
    ("<answer>12 or 13</answer>", "12", False),  # a hedge
]
LABELLED_FIRST_NUMBER = [
    ("1 + 5 = 6 as we start in any context...", "6", True),  # the first number is 1
    ("7 + 7 = **8**", "14", False),
    ("The answer is 17.", "17", False),  # the first number is the answer: paid
]


def test_likely_misscored_list_reads_real_phrasing(workspace, tiny_model, tmp_path, monkeypatch):
    rewards = [{"name": "correctness_reward"}]
    run_dir, items = _labelled_run(workspace, tiny_model, "real", LABELLED_REAL,
                                   ("<answer>2</answer>", "2", False), rewards)
    flagged = {s.id for s in inspect_rewards(InspectRequest(run=str(run_dir), max_suspects=100)).likely_misscored}
    assert flagged == {i for i, (_, _, bad) in enumerate(items) if bad}

    (tmp_path / "first_rewards.py").write_text(FIRST_NUMBER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    run_dir, items = _labelled_run(workspace, tiny_model, "first", LABELLED_FIRST_NUMBER, ("2", "2", False),
                                   [{"name": "first_rewards.first_number"}])
    result = inspect_rewards(InspectRequest(run=str(run_dir), max_suspects=100))
    assert {s.id for s in result.likely_misscored} == {0}
    assert "final stated answer '6' is the gold '6'" in result.likely_misscored[0].reasons[0]


# Issue 49's fourth walk: a person's own reward (tests/fixtures/rewards/walk49d_rewards.py: their buggy v1, their fix,
# and the fix reading the gold from **kwargs) on the walk's real completions of "What is N plus M? Answer with the
# number." (tests/fixtures/walk49d_completions.jsonl, from its inspection/samples.jsonl, each labelled by a reader:
# does it state the right sum as its answer?) and the task's shapes: number words, "= 7", "equals seven", a bare
# "7" and "7.", echoed operands, wrong answers v1 pays because their last number is the gold.
WALK = [json.loads(line) for line in (Path(__file__).parent / "fixtures" / "walk49d_completions.jsonl").open()]
THREE_FOUR = "What is three plus four? Answer with the number."
TEN_ELEVEN = "What is ten plus eleven? Answer with the number."
WALK_SHAPES = [(THREE_FOUR, text, "7", right) for text, right in [
    ("7", True), ("7.", True), ("Seven.", True), ("**7**", True), ("The answer is 7", True), ("3 + 4 = 7", True),
    ("Three plus four = 7", True), ("Three plus four equals seven.", True), ("Three plus four makes 7 apples", True),
    ("Three plus four is seven, not four.", True), ("The answer is 7, not 4.", True),  # v1: the last number, 4
    ("Three plus four is 3 + 4", False), ("3 + 4", False), ("Three plus four, that is four plus three", False),
    ("Three plus four is the same as four plus three", False), ("Three plus four equals eight.", False),
    ("Three plus four is 12, as in 5 + 7", False), ("The sum is eight, not seven.", False),  # v1 pays the 7
]] + [(TEN_ELEVEN, "Ten plus eleven is twenty-one.", "21", True), (TEN_ELEVEN, "21", "21", True)]


def _question_run(workspace, tiny_model, name, items, reward) -> Path:
    """A run whose samples are `items` (question, completion, gold, right, truncated) in groups of 4, each with its
    own question and gold, padded with right answers to a whole number of groups (a review needs 50)."""
    items = items + [(THREE_FOUR, "3 + 4 = 7", "7", True, False)] * (-len(items) % 4)
    run_dir = hand_made_run(workspace, tiny_model, name, [[it[1] for it in items[i: i + 4]]
                                                          for i in range(0, len(items), 4)],
                            ["7"] * (len(items) // 4), [{"name": reward}])
    samples_file = run_dir / "inspection" / "samples.jsonl"
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    for sample, (question, _, gold, _, truncated) in zip(samples, items):
        sample.update(prompt=[{"role": "user", "content": question}], columns={"answer": gold}, truncated=truncated)
    samples_file.write_text("".join(json.dumps(s) + "\n" for s in samples))
    sign_samples(run_dir)  # as the sampler signs what it wrote
    return run_dir


def test_likely_misscored_list_checks_a_persons_own_reward_both_ways(workspace, tiny_model):
    """For a reward of unknown rule that reads the gold column, the list compares its score with an independent
    reading of the reply's final answer: flagged where it pays a wrong or absent answer, or scores a right one 0;
    never where the reading is unsure. Mis-scored = the reward's score disagrees with the reader's label."""
    real = [(r["question"], r["completion"], r["answer"], r["reader_says_right"], r["truncated"]) for r in WALK]
    items = real + [(*shape, False) for shape in WALK_SHAPES]
    for reward, least_recall in [("word_sum_v1", 0.7), ("word_sum_fixed", 0.5), ("word_sum_kwargs", 0.5)]:
        run_dir = _question_run(workspace, tiny_model, reward.replace("_", "-"), items, f"walk49d_rewards.{reward}")
        result = inspect_rewards(InspectRequest(run=str(run_dir), max_suspects=100))
        rows = [json.loads(line) for line in Path(result.review_jsonl_path).read_text().splitlines()]
        flagged = {s.id for s in result.likely_misscored}
        truth = {r["id"] for r, it in zip(rows, items) if (r["scores"][reward] > 0) != it[3]}
        for part, ids in [("the walk's", range(len(real))), ("all", range(len(items)))]:
            hit, flags, bad = len(flagged & truth & set(ids)), len(flagged & set(ids)), len(truth & set(ids))
            print(f"{reward} on {part} {len(ids)} labelled samples: precision "
                  f"{f'{hit / flags:.2f}' if flags else 'n/a'} ({hit}/{flags}), recall {hit / max(bad, 1):.2f} "
                  f"({hit}/{bad})")
        assert flagged <= truth, [rows[i]["completion"] for i in sorted(flagged - truth)]  # precision 1.0
        missed = [rows[i]["completion"] for i in sorted(truth - flagged)]
        assert len(flagged & truth) >= least_recall * len(truth), missed
        walk = {r["sample"]: i for i, r in enumerate(WALK)}
        if reward != "word_sum_v1":  # the walk's false flags under the fix: "base-10" is no answer, "2 + 2" echoes
            assert not flagged & {walk[34], walk[74]}
        else:  # paid for an echoed operand or a number word in passing: each flagged
            assert {walk[34], walk[59], walk[74], walk[115]} <= flagged
            reasons = {s.id: s.reasons[0] for s in result.likely_misscored}
            assert "paid 1 but the completion states no answer" in reasons[walk[74]]
            assert "final stated answer 'eight' is not the gold '7'" in reasons[items.index(
                (THREE_FOUR, "The sum is eight, not seven.", "7", False, False))]


# ---------------------------------------------------------------- lengths feed the config
def test_length_advice_suggests_limits_with_the_truncation_they_imply():
    from mcp_server.inspection.lengths import length_advice

    lengths = list(range(1, 201))  # 200 completions of 1..200 tokens, none cut off at 256
    advice = length_advice(lengths, [False] * 200, 256, prompt_lengths=[10, 70, 30])
    assert advice["completion_tokens"] == {"p50": 100, "p90": 180, "p99": 198, "max": 200}
    # The 99th percentile (198) rounded up to 256 cuts nothing; the longest prompt (70) + 256 -> 384.
    assert (advice["suggested_max_completion_length"], advice["truncation_at_suggested"]) == (256, 0.0)
    assert advice["suggested_vllm_max_model_length"] == 384
    assert advice["config_patch"] == {"max_completion_length": 256, "log_completions": True,
                                      "vllm_max_model_length": 384}
    lengths = [10] * 95 + [150] * 5  # a long tail of 5%: the 99th percentile is 150 -> 192, cutting nothing
    advice = length_advice(lengths, [False] * 100, 512, prompt_lengths=[])
    assert advice["suggested_max_completion_length"] == 192 and advice["truncation_at_suggested"] == 0.0
    lengths = [10] * 99 + [300]  # one outlier past the 99th percentile: the suggestion cuts it, and says so
    advice = length_advice(lengths, [False] * 100, 512, prompt_lengths=[])
    assert advice["suggested_max_completion_length"] == 64 and advice["truncation_at_suggested"] == 0.01
    assert "cut off 1.0%" in advice["advice"]
    # Two of 100 cut off at the sampling limit: the distribution is censored, nothing is suggested.
    advice = length_advice([64] * 2 + [20] * 98, [True] * 2 + [False] * 98, 64, prompt_lengths=[5])
    assert advice["suggested_max_completion_length"] is None and "max_new_tokens=128" in advice["advice"]


# ---------------------------------------------------------------- a second round against verdict and gate (issue 25)
RIGHT = "<reasoning>1 + 1 = 2</reasoning><answer>2</answer>"


WRONG = "<reasoning>1 + 1 = 3</reasoning><answer>3</answer>"


# Fields the verdict did not pin before (issue 25), each with a value that changes what is sampled or scored.
UNPINNED_BEFORE = {
    "dtype": "float16", "model_init_kwargs": {"attn_implementation": "eager"},
    "vllm_structured_outputs_regex": "<answer>2</answer>", "vllm_max_model_length": 64,
    "multi_objective_aggregation": "normalize_then_sum", "scale_rewards": "none", "max_tool_calling_iterations": 1,
    "dataset_train_split": "test",
}


def _signed_run(workspace: Path, tiny_model, name: str) -> Path:
    """A hand-made run on a copy of the tiny model (its files get edited), reviewed and passed by 'ana'."""
    model = workspace / f"{name}-model"
    if not model.exists():
        shutil.copytree(tiny_model, model)
    run_dir = hand_made_run(workspace, tiny_model, name, [[RIGHT, WRONG, WRONG, WRONG]] * 13, ["2"] * 13)
    config_file = run_dir / "train" / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    config["model_name_or_path"] = str(model)
    config_file.write_text(yaml.safe_dump(config))
    meta_file = run_dir / "inspection" / "samples.meta.json"
    meta = json.loads(meta_file.read_text())
    from mcp_server.inspection.pins import config_pins
    from mcp_server.runs import Run

    meta["config_pins"] = config_pins(Run(run_dir))
    sign_samples(run_dir, meta)  # the samples drawn from this config, as the sampler signs them
    inspect_rewards(InspectRequest(run=str(run_dir)))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    assert check_inspection_gate(run_dir).passed
    return run_dir


def _closed(run_dir: Path, *words: str) -> str:
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and all(w in gate.reason for w in words), (words, gate.reason)
    return gate.reason


def test_a_review_and_verdict_that_say_review_on_a_base_success_of_zero_never_open_the_gate(workspace, tiny_model):
    """A run the base model never succeeds on (base success 0), its review.json and verdict.json rewritten by hand to
    route "review" and agree with each other, every hash right: GRPO has no signal to learn from, so the gate stays
    closed on the rate itself, whatever the route says."""
    from mcp_server.inspection.pins import run_pins
    from mcp_server.rewards import reward_code_sha256
    from mcp_server.runs import Run
    from mcp_server.workspace import sha256_file

    real = json.loads((_signed_run(workspace, tiny_model, "signed") / "inspection" / "verdict.json").read_text())
    run_dir = hand_made_run(workspace, tiny_model, "zero", [[WRONG] * 4] * 13, ["2"] * 13)
    inspect_rewards(InspectRequest(run=str(run_dir)))
    review_file = run_dir / "inspection" / "review.json"
    review = json.loads(review_file.read_text())
    assert review["result"]["base_success_rate"] == 0 and review["result"]["route"] == "sft_first"
    review["result"]["route"] = "review"
    review_file.write_text(json.dumps(review))
    ids = review["reviewed_ids"]
    (run_dir / "inspection" / "verdict.json").write_text(json.dumps({
        **real, "route": "review", "base_success_rate": 0.0, "reviewed_ids": ids, "reviewed": len(ids),
        "agree": len(ids), "disagree": 0, "sample_verdicts": [{"id": i, "agree": True, "note": ""} for i in ids],
        "samples_sha256": review["result"]["samples_sha256"], "review_sha256": sha256_file(review_file),
        "success_rule": review["result"]["success_rule"],
        "pins": run_pins(Run(run_dir), reward_code_sha256(review["result"]["rewards"]))}))
    _closed(run_dir, "never succeeded")


def test_train_dir_config_fields_and_model_files_are_pinned(workspace, tiny_model):
    run_dir = _signed_run(workspace, tiny_model, "pins")
    train = run_dir / "train"

    # A module beside train.py (train/ is sys.path[0] when it runs) or a package copy there: closed.
    (train / "datasets.py").write_text("raise SystemExit('shadowed')\n")
    _closed(run_dir, "files under train/", "datasets.py")
    (train / "datasets.py").unlink()
    (train / "mcp_server" / "rewards").mkdir(parents=True)
    _closed(run_dir, "files under train/", "mcp_server/")
    (train / "mcp_server" / "rewards" / "__init__.py").write_text("def score_format(**k):\n    return 3\n")
    _closed(run_dir, "mcp_server/rewards/__init__.py")
    shutil.rmtree(train / "mcp_server")
    assert check_inspection_gate(run_dir).passed

    # Every config field but the documented few (config.fields' unpinned groups).
    config_file = train / "config.yaml"
    original = config_file.read_text()
    for field, value in UNPINNED_BEFORE.items():
        config_file.write_text(original + yaml.safe_dump({field: value}))
        _closed(run_dir, field)
    config_file.write_text(original + yaml.safe_dump({"learning_rate": 0.5, "logging_steps": 7, "max_steps": 3}))
    assert check_inspection_gate(run_dir).passed  # how it optimizes and logs: not what is sampled or scored
    config_file.write_text(original)

    # A model file edited in place (same name, same size): the model changed.
    model_config = Path(yaml.safe_load(original)["model_name_or_path"]) / "config.json"
    text = model_config.read_text()
    swapped = text.replace('"vocab_size"', '"vocab_sizf"', 1)
    assert swapped != text and len(swapped) == len(text)
    model_config.write_text(swapped)
    _closed(run_dir, "the model changed", "its files changed")
    model_config.write_text(text)
    assert check_inspection_gate(run_dir).passed


def test_a_verdict_must_agree_with_its_review_and_name_someone(workspace, tiny_model):
    run_dir = _signed_run(workspace, tiny_model, "forged")
    verdict_file = run_dir / "inspection" / "verdict.json"
    real = json.loads(verdict_file.read_text())

    # Hand-written verdicts with every hash right (the package's own pins) but their own story: closed.
    dropped = real["reviewed_ids"][-1]
    forged = {"base_success_rate": {"base_success_rate": 0.9},
              "reviewed_ids": {"reviewed_ids": real["reviewed_ids"][:-1], "reviewed": real["reviewed"] - 1,
                               "agree": real["agree"] - 1,
                               "sample_verdicts": [v for v in real["sample_verdicts"] if v["id"] != dropped]},
              "route": {"route": "review_again"},
              "reviewer": {"reviewer": "\x1b[2J\x1b[31mroot"}}
    for key, change in forged.items():
        verdict_file.write_text(json.dumps({**real, **change}))
        reason = _closed(run_dir, key)
        assert "\x1b" not in reason  # a name's escape codes are never sent to the terminal
    all_wrong = {**real, "agree": 0, "disagree": real["reviewed"], "note": "fine",
                 "sample_verdicts": [{**v, "agree": False} for v in real["sample_verdicts"]]}
    verdict_file.write_text(json.dumps(all_wrong))
    _closed(run_dir, "is a fail")
    verdict_file.write_text(json.dumps(real))
    assert check_inspection_gate(run_dir).passed

    # A run whose review routed to SFT first, given a forged verdict with that run's own hashes: closed.
    sft = hand_made_run(workspace, tiny_model, "sft-first", [[WRONG] * 4] * 13, ["2"] * 13)
    inspect_rewards(InspectRequest(run=str(sft)))
    from mcp_server.inspection.pins import run_pins
    from mcp_server.rewards import reward_code_sha256
    from mcp_server.runs import Run
    from mcp_server.workspace import sha256_file

    review = json.loads((sft / "inspection" / "review.json").read_text())
    result = review["result"]
    hand_made = {**real, "route": "review", "base_success_rate": 0.25, "reviewed_ids": review["reviewed_ids"],
                 "reviewed": len(review["reviewed_ids"]), "agree": len(review["reviewed_ids"]),
                 "sample_verdicts": [{"id": i, "agree": True, "note": ""} for i in review["reviewed_ids"]],
                 "samples_sha256": result["samples_sha256"], "review_sha256": sha256_file(sft / "inspection" /
                                                                                          "review.json"),
                 "pins": run_pins(Run(sft), reward_code_sha256(result["rewards"]))}
    (sft / "inspection" / "verdict.json").write_text(json.dumps(hand_made))
    _closed(sft, "route")

    # Blank, control-coded and rubber-stamp verdicts are refused at the door, and the recorded pass stays.
    for reviewer in ("   ", "\n", "ana\x1b[31m"):
        proc = run_cli("record-inspection-verdict", str(run_dir), "--verdict", "pass", "--reviewer", reviewer,
                       "--agree-rest")
        assert proc.returncode == 2 and "reviewer" in proc.stderr and "\x1b" not in proc.stderr, proc.stderr
    ids = ",".join(str(i) for i in real["reviewed_ids"])
    proc = run_cli("record-inspection-verdict", str(run_dir), "--verdict", "pass", "--reviewer", "bo",
                   "--disagree", ids, "--note", "fine")
    assert proc.returncode == 2 and "is a fail" in proc.stderr, proc.stderr
    with pytest.raises(UserInputError) as err:  # one disagreement, waved through with a word
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="bo", note="fine",
                                                 agree_with_rest=True,
                                                 sample_verdicts=[{"id": dropped, "agree": False}]))
    assert err.value.field == "note" and "'fine'" in str(err.value)
    assert json.loads(verdict_file.read_text()) == real and check_inspection_gate(run_dir).passed
    record_inspection_verdict(VerdictRequest(
        run=str(run_dir), verdict="pass", reviewer="bo", agree_with_rest=True,
        sample_verdicts=[{"id": dropped, "agree": False}], note="sample scored right, the reasoning is a guess"))
    assert check_inspection_gate(run_dir).passed


def test_a_threshold_at_the_lowest_total_of_a_task_reward_alone_is_refused(workspace, tiny_model):
    run_dir = hand_made_run(workspace, tiny_model, "task-only", [[RIGHT, WRONG, WRONG, WRONG]] * 13, ["2"] * 13,
                             rewards=[{"name": "correctness_reward"}])
    with pytest.raises(UserInputError) as err:
        inspect_rewards(InspectRequest(run=str(run_dir), success_threshold=0.0))
    assert err.value.field == "success_threshold" and "every completion" in str(err.value)
    assert inspect_rewards(InspectRequest(run=str(run_dir), success_threshold=0.5)).base_success_rate == 1.0


# ---------------------------------------------------------------- a pass's agreement, the objective pinned (issue 33)
def test_a_pass_needs_more_agreement_than_disagreement_and_a_sentence_for_any():
    from mcp_server.inspection.gate import pass_problem

    note = "the two misses are formatting noise"
    assert "is a fail" in pass_problem(5, 5, note)  # half disagreeing: the reward scores as many wrong as right
    assert pass_problem(6, 5, note) is None
    assert "needs a note" in pass_problem(10, 1, "looks fine overall")  # three words are not a sentence
    assert pass_problem(10, 1, "looks fine overall, truly") is None
    assert pass_problem(10, 0, "") is None


def test_every_field_that_changes_the_objective_is_pinned(workspace, tiny_model):
    import yaml

    from mcp_server.inspection.pins import changes, config_pins
    from mcp_server.runs import Run

    run_dir = hand_made_run(workspace, tiny_model, "objective", [["a", "b", "c", "d"]] * 13, ["2"] * 13)
    config_file = run_dir / "train" / "config.yaml"
    original = yaml.safe_load(config_file.read_text())
    before = config_pins(Run(run_dir))
    objective = {"beta": 0.3, "epsilon": 0.1, "loss_type": "grpo", "scale_rewards": "none", "num_iterations": 2,
                 "importance_sampling_level": "sequence", "mask_truncated_completions": True,
                 "top_entropy_quantile": 0.2}
    for field, value in objective.items():
        config_file.write_text(yaml.safe_dump({**original, field: value}))
        assert any(field in line for line in changes(before, config_pins(Run(run_dir)))), field


# ---------------------------------------------------------------- issue 48's blind audit: what recording checks
def _reviewed(workspace: Path, tiny_model, name: str, groups=None) -> Path:
    """A hand-made run, reviewed by inspect_rewards, with no verdict yet (no sampling: cheap)."""
    run_dir = hand_made_run(workspace, tiny_model, name, groups or [[RIGHT, WRONG, WRONG, WRONG]] * 13, ["2"] * 13)
    inspect_rewards(InspectRequest(run=str(run_dir)))
    return run_dir


def _refused(run_dir: Path, field: str, *words: str, **request) -> str:
    request = {"verdict": "pass", "reviewer": "ana", "agree_with_rest": True, **request}
    with pytest.raises(UserInputError) as err:
        record_inspection_verdict(VerdictRequest(run=str(run_dir), **request))
    assert err.value.field == field and all(w in str(err.value) for w in words), (field, words, str(err.value))
    assert not (run_dir / "inspection" / "verdict.json").exists()
    return str(err.value)


def test_a_verdict_is_refused_on_samples_or_sheets_that_are_not_the_reviews(workspace, tiny_model):
    """Samples edited after the review, or the sheet the person read removed or edited: no verdict (a pass or a fail)
    is recorded on a review that does not describe them."""
    run_dir = _reviewed(workspace, tiny_model, "stale")
    samples = run_dir / "inspection" / "samples.jsonl"
    original = samples.read_text()
    samples.write_text(original.replace(WRONG, RIGHT, 1))
    _refused(run_dir, "run", "samples.jsonl changed since the review")
    _refused(run_dir, "run", "samples.jsonl changed since the review", verdict="fail")
    samples.write_text(original)
    for name in ("review.md", "review.jsonl"):
        sheet = run_dir / "inspection" / name
        kept = sheet.read_bytes()
        sheet.unlink()
        _refused(run_dir, "run", f"{name} is not the sheet inspect_rewards wrote")
        sheet.write_bytes(kept)
    assert record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana",
                                                    agree_with_rest=True)).gate.passed


def test_a_reward_module_edited_after_the_review_backs_no_verdict(workspace, tiny_model, reward_with_helper):
    rewards = [{"name": "format_reward"}, {"name": "pin_rewards.scored"}]
    run_dir = hand_made_run(workspace, tiny_model, "edited", [[RIGHT, WRONG, WRONG, "x"]] * 13, ["2"] * 13, rewards)
    inspect_rewards(InspectRequest(run=str(run_dir)))
    helper = reward_with_helper / "pin_rewards.py"
    helper.write_text(helper.read_text() + "\n# edited after the review\n")
    _refused(run_dir, "run", "the reward code or specs changed since the review")


def test_each_sample_verdict_is_given_once_and_agree_rest_adds_only_the_unlisted(workspace, tiny_model):
    run_dir = _reviewed(workspace, tiny_model, "listed")
    _refused(run_dir, "sample_verdicts[1].id", "sample 0 is listed twice",
             sample_verdicts=[{"id": 0, "agree": True}, {"id": 0, "agree": False, "note": "wrongly scored"}])
    # agree_with_rest fills in the samples not listed; it never overrides the disagreement the person gave.
    failed = record_inspection_verdict(VerdictRequest(
        run=str(run_dir), verdict="fail", reviewer="ana", agree_with_rest=True,
        sample_verdicts=[{"id": 0, "agree": False, "note": "scored a right answer 0"}]))
    assert (failed.agree, failed.disagree, failed.reviewed) == (failed.reviewed - 1, 1, failed.reviewed)
    verdict = json.loads((run_dir / "inspection" / "verdict.json").read_text())
    assert verdict["disagree"] == 1 and verdict["sample_verdicts"][0] == {
        "id": 0, "agree": False, "note": "scored a right answer 0"}
    # A fail that judges one sample counts what it judged: the gate reads it as the fail it is, not as a record
    # whose counts do not add up.
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="fail", reviewer="ana", note="one is wrong",
                                             sample_verdicts=[{"id": 0, "agree": False}]))
    verdict = json.loads((run_dir / "inspection" / "verdict.json").read_text())
    assert (verdict["agree"], verdict["disagree"], verdict["reviewed"]) == (0, 1, failed.reviewed)
    assert "the verdict is 'fail'" in check_inspection_gate(run_dir).reason


def test_a_pass_is_refused_on_a_review_routed_to_sft_first_and_on_a_launched_run(workspace, tiny_model):
    run_dir = _reviewed(workspace, tiny_model, "sft", [[WRONG] * 4] * 13)
    _refused(run_dir, "verdict", "do SFT first", "A pass cannot be recorded")
    run_dir = _reviewed(workspace, tiny_model, "launched")
    (run_dir / "run.json").write_text(json.dumps({"state": "running"}))
    _refused(run_dir, "run", "is launched", "never rewritten")


def test_a_pass_needs_samples_drawn_as_todays_config_would_draw_them(workspace, tiny_model):
    """Each way samples.meta.json or train/config.yaml stops backing a pass is refused by name, and put back, the
    pass is recorded."""
    run_dir = _reviewed(workspace, tiny_model, "drawn")
    meta_file, config_file = run_dir / "inspection" / "samples.meta.json", run_dir / "train" / "config.yaml"
    meta, config = meta_file.read_text(), config_file.read_text()
    edits = {
        "differs": (meta_file, lambda m: json.dumps({**json.loads(m), "differs_from_config": ["the model: other"]}),
                    "cannot back a verdict: they differ from what training would sample (the model: other)"),
        "no config_pins": (meta_file, lambda m: json.dumps({k: v for k, v in json.loads(m).items()
                                                            if k != "config_pins"}), "does not say how the samples"),
        "config changed": (config_file, lambda c: c + "temperature: 0.3\n", "changed since the samples were drawn"),
        "empty weights": (config_file, lambda c: c + "reward_weights: []\n", "reward_weights [] are not"),
    }
    for name, (path, edit, said) in edits.items():
        if path == meta_file:  # as a sampler would have written it: signed as it signs what it wrote
            sign_samples(run_dir, json.loads(edit(path.read_text())))
        else:
            path.write_text(edit(path.read_text()))
        _refused(run_dir, "run", said)
        meta_file.write_text(meta)
        config_file.write_text(config)
    # train/train.py present: the samples must say what its loader read for them
    (run_dir / "train" / "train.py").write_text("print('train')\n")
    _refused(run_dir, "run", "does not say what train/train.py's loader read")
    (run_dir / "train" / "train.py").unlink()
    assert record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana",
                                                    agree_with_rest=True)).gate.passed


def test_a_verdict_that_restates_its_review_wrongly_or_pins_other_reward_code_closes_the_gate(workspace, tiny_model):
    """A verdict.json edited by hand, every hash right: its base rate, success rule or reward-code pin not the
    review's closes the gate, naming the field. The last one re-pinned to reward specs edited after the review
    (every other pin matching today's run) would otherwise vouch for scores nobody read."""
    from mcp_server.inspection.pins import run_pins
    from mcp_server.rewards import reward_code_sha256
    from mcp_server.runs import Run

    run_dir = _signed_run(workspace, tiny_model, "restated")
    verdict_file = run_dir / "inspection" / "verdict.json"
    signed = json.loads(verdict_file.read_text())
    for field, value in (("base_success_rate", 0.9), ("success_rule", "every completion")):
        verdict_file.write_text(json.dumps({**signed, field: value}))
        _closed(run_dir, "is not a verdict on this review", f"its {field} is")
    rewards_file = run_dir / "train" / "rewards.json"
    rewards = json.loads(rewards_file.read_text())
    rewards[-1]["weight"] = 2.0
    rewards_file.write_text(json.dumps(rewards))
    verdict_file.write_text(json.dumps({**signed, "pins": run_pins(Run(run_dir), reward_code_sha256(rewards))}))
    _closed(run_dir, "is not a verdict on this review", "reward-code hash is not the reviewed reward's")
    rewards_file.write_text(json.dumps([{k: v for k, v in r.items() if k != "weight"} for r in rewards]))
    # train/config.yaml's reward_weights not the reviewed ones (1.0 each), the verdict re-pinned to them by hand
    config_file = run_dir / "train" / "config.yaml"
    config_file.write_text(config_file.read_text() + "reward_weights: [1.0, 3.0]\n")
    verdict_file.write_text(json.dumps({**signed, "pins": run_pins(Run(run_dir), signed["pins"]["reward_code"])}))
    _closed(run_dir, "is not a verdict on this review", "reward_weights [1.0, 3.0] are not train/rewards.json's")


def test_the_gate_judges_the_launchs_read_and_says_what_is_gone(workspace, tiny_model, reward_with_helper):
    """The gate judges the run as the launch read it (`spec`), not a second read of the files; a review removed
    after the verdict is named; a pass that leaves reviewed samples unjudged is refused at recording."""
    import dataclasses

    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.runs import Run

    rewards = [{"name": "format_reward"}, {"name": "pin_rewards.scored"}]
    run_dir = hand_made_run(workspace, tiny_model, "read", [[RIGHT, WRONG, WRONG, "x"]] * 13, ["2"] * 13, rewards)
    inspect_rewards(InspectRequest(run=str(run_dir)))
    _refused(run_dir, "sample_verdicts", "a pass needs a verdict on every reviewed sample", agree_with_rest=False,
             sample_verdicts=[{"id": 0, "agree": True}])
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    spec = RunSpec.read(Run(run_dir))
    assert check_inspection_gate(run_dir, spec).passed
    launched = dataclasses.replace(spec, values={**spec.values, "temperature": 0.3})
    gate = check_inspection_gate(run_dir, launched)
    assert not gate.passed and "temperature" in gate.reason, gate.reason
    # an entry of the reviewed copy the trainer imports that is no reviewed file (a module it could import)
    extra = run_dir / "inspection" / "reward_code" / "pin_extra.py"
    extra.write_text("VALUE = 2.0\n")
    _closed(run_dir, "does not hold the reviewed reward code", "pin_extra.py")
    extra.unlink()
    assert check_inspection_gate(run_dir).passed

    review = run_dir / "inspection" / "review.json"
    review.unlink()
    _closed(run_dir, "the review is not the one the verdict signed", "review.json is gone")


# ---------------------------------------------------------------- the m9 audit (issue 48): the way on, as a table
def _python_moved(run_dir: Path, monkeypatch) -> None:  # another interpreter named (a wrapper of this one)
    folder = run_dir.parent / "other-python"
    folder.mkdir(exist_ok=True)
    (folder / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (folder / "python").chmod(0o755)
    monkeypatch.setenv("LLM_FINETUNING_PYTHON", str(folder / "python"))


def _config_moved(run_dir: Path, monkeypatch) -> None:  # a sampling setting edited
    config = run_dir / "train" / "config.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "temperature": 0.5}))


GATE_PARTS = {  # a part the verdict pins (PART_NAMES' key), how it moves, the words its own way on holds
    "sampling": (_config_moved, "re-sample"),
    "script": (lambda run_dir, mp: (run_dir / "train" / "train.py").write_text("print('edited')\n"), "re-sample"),
    "training_python": (_python_moved, "set LLM_FINETUNING_PYTHON back"),
    "loader_env": (lambda run_dir, mp: mp.setenv("GLIBC_TUNABLES", "glibc.malloc.check=3"), "loader and ACCELERATE_"),
}
GATE_MOVES = [(a,) for a in GATE_PARTS] + [(a, b) for i, a in enumerate(GATE_PARTS) for b in list(GATE_PARTS)[i + 1:]]


@pytest.mark.parametrize("moved", GATE_MOVES, ids=["+".join(m) for m in GATE_MOVES])
def test_the_gates_way_on_covers_every_part_that_changed(workspace, tiny_model, monkeypatch, moved):
    """Each pinned part changed after the verdict alone, and each pair changed together: the gate names every one,
    and its way on is that part's own (alone) or one that puts back every change (a pair): never the way on of one
    part alone (m9-gate-how-shell-part-alone: the interpreter and the loader changed together were told only how to
    put LLM_FINETUNING_PYTHON back, and following it left the gate closed)."""
    from mcp_server.inspection.pins import PART_NAMES

    for name in ("LLM_FINETUNING_PYTHON", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    run_dir = _signed_run(workspace, tiny_model, "way-on")
    for part in moved:
        GATE_PARTS[part][0](run_dir, monkeypatch)
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and len(gate.changed) == len(moved), (moved, gate.changed)
    named = {"training_python": "LLM_FINETUNING_PYTHON", "loader_env": "GLIBC_TUNABLES"}
    for part in moved:
        assert named.get(part, PART_NAMES[part]) in gate.reason, (part, gate.reason)
    own = [GATE_PARTS[part][1] for part in moved]
    if len(moved) == 1:
        assert own[0] in gate.how_to_clear, (moved, gate.how_to_clear)
    else:
        assert "put back what changed" in gate.how_to_clear, (moved, gate.how_to_clear)
        alone = [w for part, w in zip(moved, own) if part in ("training_python", "loader_env")]
        assert not [w for w in alone if w in gate.how_to_clear], (moved, gate.how_to_clear)
