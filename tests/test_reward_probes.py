"""Issue 49's fifth walk: the review catches a person's reward that pays wrong answers, by construction.

On "Which number is larger, A or B? Reply with just the number." the gold is always one of the question's numbers,
so no reading of a reply can judge a reward; the walk's first reward (a substring match) paid "15 is larger than
38" and the sheet said "none flagged". inspect_rewards now calls each reward of unknown rule (and each answer
verifier) on replies built from the run's own rows to be right or wrong (inspection/reward_probes.py). Measured on
labelled rewards: the walk's real samples (tests/fixtures/walk49e_completions.jsonl, from its
inspection/samples.jsonl) under its rewards and the labelled bugs (tests/fixtures/rewards/walk49e_rewards.py), the
fourth walk's (walk49d_rewards.py) on its real samples, and correctness_reward with its tags."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import run_cli, run_cli_json
from support import hand_made_run, sign_samples
from mcp_server.inspection.models import InspectRequest
from mcp_server.inspection.review import inspect_rewards

FIXTURES = Path(__file__).parent / "fixtures"
WALK = [json.loads(line) for line in (FIXTURES / "walk49e_completions.jsonl").open()]
SUMS = [json.loads(line) for line in (FIXTURES / "walk49d_completions.jsonl").open()]
# (reward, must it be flagged?): each pays a reply that is wrong, or none does
LARGER = [("walk49e_rewards.larger_substring", True), ("walk49e_rewards.larger_first_number", True),
          ("walk49e_rewards.larger_any_number", True), ("walk49e_rewards.larger_length", True),
          ("walk49e_rewards.larger_fixed", False)]
WORD_SUM = [("walk49d_rewards.word_sum_v1", True), ("walk49d_rewards.word_sum_fixed", False),
            ("walk49d_rewards.word_sum_kwargs", False)]


def _run(workspace, tiny_model, name, items, rewards, size) -> Path:
    """A run whose samples are `items` (question, answer, completion, truncated) in groups of `size`, chat prompts and
    completions as sample_completions stores them, one data row per distinct question."""
    items = items + [items[-1]] * (-len(items) % size)
    questions = list(dict.fromkeys(it["question"] for it in items))
    run_dir = hand_made_run(workspace, tiny_model, name, [[it["completion"] for it in items[i: i + size]]
                                                          for i in range(0, len(items), size)],
                            [items[i]["answer"] for i in range(0, len(items), size)], rewards)
    samples_file = run_dir / "inspection" / "samples.jsonl"
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    for sample, it in zip(samples, items):
        sample.update(prompt=[{"role": "user", "content": it["question"]}], columns={"answer": it["answer"]},
                      completion=[{"role": "assistant", "content": it["completion"]}], truncated=it["truncated"],
                      row_index=questions.index(it["question"]))
    samples_file.write_text("".join(json.dumps(s) + "\n" for s in samples))
    sign_samples(run_dir)  # as the sampler signs what it wrote
    return run_dir


def _flagged(result) -> dict[str, list[str]]:
    return {p.reward: p.reasons for p in result.reward_probes if p.flagged}


def _measure(workspace, tiny_model, items, labelled, size) -> dict[str, list[str]]:
    """Each reward alone on the run's samples: what it was flagged for; prints flagged/total per group."""
    flags = {}
    for reward, _ in labelled:
        run_dir = _run(workspace, tiny_model, reward.split(".")[-1].replace("_", "-"), items, [{"name": reward}], size)
        result = inspect_rewards(InspectRequest(run=str(run_dir), max_suspects=100))
        assert [p.reward for p in result.reward_probes] == [reward.split(".")[-1]]
        flags[reward] = _flagged(result).get(reward.split(".")[-1], [])
    for bad in (True, False):
        group = [r for r, b in labelled if b == bad]
        print(f"{'bad' if bad else 'good'} rewards flagged: {sum(bool(flags[r]) for r in group)}/{len(group)}")
    return flags


def test_the_walks_rewards_that_pay_wrong_answers_are_flagged_and_the_fixed_one_is_not(workspace, tiny_model):
    flags = _measure(workspace, tiny_model, WALK, LARGER, 8)
    assert {r for r, reasons in flags.items() if reasons} == {r for r, bad in LARGER if bad}, flags
    # the substring bug pays a reply that holds the gold only inside a wrong statement
    assert re.search(r"larger_substring paid a reply built to be wrong: 1 to '\d+, not \d+'",
                     flags["walk49e_rewards.larger_substring"][0])
    # the first-number reward (the walk's final version) pays a reply that corrects itself to a wrong answer
    assert "Actually, the answer is" in flags["walk49e_rewards.larger_first_number"][0]
    assert "right and wrong alike" in flags["walk49e_rewards.larger_any_number"][0]


def test_the_fourth_walks_rewards_on_its_real_samples(workspace, tiny_model):
    items = [{k: s[k] for k in ("question", "answer", "completion", "truncated")} for s in SUMS]
    flags = _measure(workspace, tiny_model, items, WORD_SUM, 4)
    assert {r for r, reasons in flags.items() if reasons} == {r for r, bad in WORD_SUM if bad}, flags


def test_the_sheet_says_what_was_built_and_what_the_reward_paid(workspace, tiny_model):
    """Through the CLI: the walk's first reward is the first thing to read, with the reply and its score, and the
    sheet's last section lists every built reply so a person can call the reward on it again."""
    run_dir = _run(workspace, tiny_model, "substring", WALK, [{"name": "walk49e_rewards.larger_substring"}], 8)
    proc, result = run_cli_json("inspect-rewards", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    sheet = Path(result["review_md_path"]).read_text()
    first = sheet.split("## Read these first")[1].split("## Samples")[0]
    assert "none flagged" not in first
    assert re.search(r"- Reward `larger_substring`: your reward larger_substring paid a reply built to be wrong: 1 to "
                     r"'(\d+), not (\d+)' \(row \d+, gold '\2'", first), first
    built = sheet.split("## Replies built to be right or wrong")[1]
    assert "### larger_substring: FLAGGED" in built
    assert re.search(r"\| wrong \| w, not g \| `\d+, not \d+` \| 1 \|", built)
    human = run_cli("inspect-rewards", str(run_dir))  # the CLI's own lines name it too
    assert human.returncode == 0 and "CHECK reward larger_substring: your reward larger_substring paid" in human.stdout


TAGGED = [("<reasoning>9 + 4</reasoning><answer>13</answer>", "13"), ("<answer>12</answer>", "13"),
          ("<reasoning>7 + 7 is 14</reasoning><answer>14</answer>", "14"), ("I think 14", "14"),
          ("<reasoning>6 + 1</reasoning><answer>7</answer>", "7"), ("<answer>7</answer>", "7"),
          ("<reasoning>2 + 3</reasoning><answer>5</answer>", "5"), ("<answer>6</answer>", "5")]


def test_a_verifier_with_its_tags_and_a_format_reward_beside_it_are_not_flagged(workspace, tiny_model):
    """correctness_reward reads <answer>: the bare forms earn nothing, so only the real samples with the answer
    swapped count; a person's own format reward beside it pays right and wrong alike, as a format reward should."""
    items = [{"question": f"What is the sum? ({gold})", "answer": gold, "completion": text, "truncated": False}
             for text, gold in TAGGED] * 7
    items.sort(key=lambda it: it["answer"])
    rewards = [{"name": "format_reward"}, {"name": "correctness_reward"}, {"name": "walk49e_rewards.tagged"}]
    result = inspect_rewards(InspectRequest(run=str(_run(workspace, tiny_model, "tags", items, rewards, 7)),
                                            max_suspects=100))
    probes = {p.reward: p for p in result.reward_probes}
    assert set(probes) == {"correctness_reward", "tagged"}  # format_reward's rule is known, and it reads no gold
    assert not _flagged(result), _flagged(result)
    swapped = [b for b in probes["correctness_reward"].replies if "replaced" in b.form]
    assert swapped and all(b.score == 0 for b in swapped)
    bare = [b for b in probes["correctness_reward"].replies if b.form in ("g alone", "the answer is g")]
    assert bare and all(b.score == 0 for b in bare)


def test_a_reward_that_crashes_on_a_reply_it_has_not_met_is_flagged(workspace, tiny_model):
    items = [{"question": f"Which number is larger, {g} or 3?", "answer": g, "completion": g, "truncated": False}
             for g in ("12", "40", "77", "58", "91", "23", "64")] * 8
    items.sort(key=lambda it: it["answer"])
    result = inspect_rewards(InspectRequest(run=str(_run(workspace, tiny_model, "crash", items,
                                                          [{"name": "walk49e_rewards.larger_parsed"}], 8))))
    reasons = _flagged(result)["larger_parsed"]
    assert "raised on a reply built as the answer is g: 'The answer is" in reasons[0]
    assert "ValueError" in reasons[0] and "training crashes the same way" in reasons[0]


CITIES = [("France", "Paris", ["Paris", "The answer is Paris.", "Lyon, not Paris", "I think Paris is lovely"]),
          ("Japan", "Tokyo", ["Tokyo.", "Kyoto", "The answer is Tokyo", "Tokyo or Osaka"]),
          ("Italy", "Rome", ["Rome", "Milan", "Rome, not Milan", "rome"])]


def test_text_golds_take_another_rows_gold_as_the_wrong_answer(workspace, tiny_model):
    items = [{"question": f"What is the capital of {country}?", "answer": gold, "completion": text,
              "truncated": False} for country, gold, texts in CITIES for text in texts * 5]
    flags = _measure(workspace, tiny_model, items, [("walk49e_rewards.city_substring", True),
                                                     ("walk49e_rewards.city_exact", False)], 20)
    assert bool(flags["walk49e_rewards.city_substring"]) and not flags["walk49e_rewards.city_exact"], flags
    assert re.search(r"1 to '(Tokyo|Rome|Paris), not (Paris|Tokyo|Rome)'", flags["walk49e_rewards.city_substring"][0])


def test_an_agentic_runs_turns_are_not_rebuilt_as_one_reply(workspace, tiny_model):
    """A completion of several messages (a tool call, its result, the answer) is what an agentic reward reads: a reply
    built as one assistant message would not be, so no reward is tried on built replies there."""
    run_dir = _run(workspace, tiny_model, "agentic", WALK, [{"name": "walk49e_rewards.larger_substring"}], 8)
    samples_file = run_dir / "inspection" / "samples.jsonl"
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    for s in samples:
        s["completion"] = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
            "name": "compare", "arguments": "{}"}}]}, {"role": "tool", "content": "?"}, *s["completion"]]
    samples_file.write_text("".join(json.dumps(s) + "\n" for s in samples))
    sign_samples(run_dir)  # as the sampler signs what it wrote
    assert inspect_rewards(InspectRequest(run=str(run_dir))).reward_probes == []


def test_a_pass_over_a_flagged_reward_says_so(workspace, tiny_model):
    """The seventh walk: a pass verdict on a reward the review flagged was recorded without a word; it is still the
    person's call, and the answer names each flag it passes over (a fail names none)."""
    from mcp_server.inspection.gate import record_inspection_verdict
    from mcp_server.inspection.models import VerdictRequest
    from mcp_server.inspection.tools import human_verdict

    run_dir = _run(workspace, tiny_model, "substring", WALK, [{"name": "walk49e_rewards.larger_substring"}], 8)
    inspect_rewards(InspectRequest(run=str(run_dir)))
    passed = record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana",
                                                      agree_with_rest=True))
    assert len(passed.passed_over) == 1 and passed.passed_over[0].startswith("larger_substring: "), passed
    assert "NOTE: passed over the review's flag on larger_substring" in human_verdict(passed)
    failed = record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="fail", reviewer="ana",
                                                      agree_with_rest=True))
    assert failed.passed_over == [] and "NOTE" not in human_verdict(failed)


def test_two_reviews_of_the_same_data_probe_the_same_rows(workspace, tiny_model):
    """Issue 49's seventh walk: the probes' rows followed what the reward paid, so two samplings of the same data
    probed different rows (a hole showed on one run and not on the other). The built forms now take the data's first
    rows: a second sampling of the same rows, where the reward pays only the first rows' replies, probes the same."""
    reward = "walk49e_rewards.larger_fixed"
    garbled = [dict(it, completion=it["answer"] if i < 24 else "no idea") for i, it in enumerate(WALK)]
    rows = []
    for name, items in (("first", WALK), ("second", garbled)):
        run_dir = _run(workspace, tiny_model, f"rows-{name}", items, [{"name": reward}], 8)
        result = inspect_rewards(InspectRequest(run=str(run_dir), max_suspects=100))
        rows.append(sorted({(r.row, r.gold) for p in result.reward_probes for r in p.replies
                            if r.form in ("g alone", "w alone")}))
    assert rows[0] == rows[1] and len(rows[0]) == 3, rows


PREAMBLE = "Let me think about both of these values carefully, comparing them digit by digit before answering. "


def test_a_long_reply_is_quoted_at_word_boundaries_with_the_part_that_made_it_wrong(workspace, tiny_model):
    """Issue 49: the summary cut a quoted reply at 90 characters, mid-word, and a long reply's wrong answer (its last
    words) was the part cut off. Through the CLI: the sheet's summary line quotes whole words, an ellipsis where it
    cut, and keeps where the wrong reply departs from its right twin."""
    items = [dict(it, completion=PREAMBLE + it["completion"]) for it in WALK]
    run_dir = _run(workspace, tiny_model, "long", items, [{"name": "walk49e_rewards.larger_first_number"}], 8)
    proc, result = run_cli_json("inspect-rewards", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    first = Path(result["review_md_path"]).read_text().split("## Read these first")[1].split("## Samples")[0]
    line = next(x for x in first.splitlines() if "larger_first_number paid" in x)
    assert "Actually, the answer is" in line, line  # the wrong part, after the long preamble
    texts = [b["text"] for p in result["reward_probes"] for b in p["replies"]]
    quotes = re.findall(r"(?:to|twin) '([^']*)'", line)
    assert quotes, line
    for quote in quotes:  # a whole reply, or a cut one cut between words, with "…" where it was cut
        inner = quote.strip("…")
        whole = [t for t in texts if inner in t]
        assert whole, quote
        text = whole[0]
        at = text.index(inner)
        assert quote.startswith("…") == (at > 0) and quote.endswith("…") == (at + len(inner) < len(text)), quote
        assert (at == 0 or text[at - 1] == " ") and (at + len(inner) == len(text) or text[at + len(inner)] == " "), \
            quote
