"""Walk 11: promote-checkpoint on a smollm2 run spent 2.5 minutes decoding the tiny model's drift suite to find
"the base passes none of the first 12 items". A reply that has already failed the suite's format (format_reward,
strict: nothing before its first tag) can never pass: its decoding ends there, the others decode on, and the
verdict is the one the whole decode gives (measured on smollm2-135m at 16 tokens, load 13: 130-146 s before,
21-57 s after)."""

from __future__ import annotations

import json
import shutil

from conftest import cli_here, run_cli_json
from support import emit_run
from mcp_server.runs import Run


def test_a_base_that_fails_the_format_at_its_first_words_is_not_decoded_further(workspace, tiny_model, tmp_path):
    """The untrained tiny model answers a plain-text prompt with "........": every reply fails the format at its
    second token, and the base's decoding on the drift suite stops there, not at the budget."""
    from mcp_server.evaluation.drift import DRIFT_FIRST_ITEMS
    from mcp_server.tiny import make_task, write_jsonl

    goldens = write_jsonl([{k: r[k] for k in ("prompt", "question", "answer")} for r in make_task(n=4)],
                          tmp_path / "goldens.jsonl")
    items = DRIFT_FIRST_ITEMS + 4
    suite = write_jsonl([{"prompt": f"Say {i}.", "answer": str(i), "grader": "format"} for i in range(items)],
                        tmp_path / "drift.jsonl")
    assert run_cli_json("evaluate-model", str(tiny_model), "--goldens", str(goldens), "--max-new-tokens", "12",
                        here=True)[0].returncode == 0
    run = Run(emit_run("drift-gives-up"))
    shutil.copytree(tiny_model, run.checkpoints)
    proc = cli_here("promote-checkpoint", str(run.dir), "--drift-suite", str(suite))
    base = [line for line in proc.stderr.splitlines() if "drift suite, base model" in line]
    said = f"{DRIFT_FIRST_ITEMS} of {DRIFT_FIRST_ITEMS} replies failed the format from their first words"
    assert any(said in line and "decoding stopped at token 2 of up to 12" in line for line in base), proc.stderr
    drift = json.loads((run.dir / "promotion.json").read_text())["drift"]
    assert (drift["band"], drift["base_pass_rate"], drift["base_items_decoded"]) == (
        "unmeasured", 0.0, DRIFT_FIRST_ITEMS), drift


def test_replies_given_up_on_are_exactly_those_that_could_never_pass():
    """format_reachable: a reply is given up on only once what it shows (less a last, perhaps partial, character)
    is neither a prefix of the first tag nor begins with it."""
    from mcp_server.evaluation.drift import format_reachable
    from mcp_server.rewards import format_reward

    for text in ("", "\n\n", "<", " <reas", "<reasoning>x", "<reasoning>x</reasoning>\n<answer>1</answer>", "T"):
        assert format_reachable(text), text
    for text in ("Th", "..", "The answer", " x<reasoning>", "<answer>1</answer>"):
        assert not format_reachable(text), text
        assert format_reward([text + "<reasoning>r</reasoning><answer>1</answer>"]) == [0.0], text
