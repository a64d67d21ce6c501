"""Issue 49's sixth walk: `evaluate-model --graders @rewards.json` recorded a baseline at 100% from a grader that
passed every base reply (`The word "apple" is a capital letter.` passed for APPLE), with no word; and a second
baseline, its graders changed, called itself the "first evaluation of this base model on this task". A grader that
passes, or fails, every golden is named in the result and in the baseline it writes; a baseline beside an earlier
one names that one and what differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_server.evaluation.evaluate import evaluate_model
from mcp_server.evaluation.models import EvaluateRequest
from mcp_server.tiny import make_task, write_jsonl

GRADERS = '''def always(completions, **kwargs):
    return [1.0 for _ in completions]


def never(completions, **kwargs):
    return [0.0 for _ in completions]
'''


@pytest.mark.slow  # decodes (the tiny model, 6 goldens of 8 tokens)
def test_a_grader_that_tells_no_reply_apart_is_named_in_the_baseline(workspace, tiny_model, monkeypatch):
    monkeypatch.chdir(workspace)  # where the rewards module is, as the walker ran it
    goldens = workspace / "goldens.jsonl"
    write_jsonl([{k: r[k] for k in ("prompt", "answer")} for r in make_task(n=6, max_operand=3)], goldens)
    (workspace / "my_graders.py").write_text(GRADERS)

    def evaluate(name: str):
        return evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(goldens), max_new_tokens=8,
                                              graders=[{"name": f"my_graders.{name}"}]))

    first = evaluate("always")
    assert first.passed == first.n == 6 and first.baseline_written, first.baseline_note
    (said,) = [w for w in first.warnings if "all 6 goldens" in w]
    assert "passed all 6 goldens of this baseline" in said and "likely wrong" in said, said
    assert "inspect-rewards" in said, said
    assert json.loads(Path(first.baseline_path).read_text())["warnings"] == first.warnings
    assert first.baseline_note.startswith("first evaluation of this base model"), first.baseline_note

    second = evaluate("never")
    assert second.passed == 0 and second.baseline_written, second.baseline_note
    assert any("failed all 6 goldens" in w for w in second.warnings), second.warnings
    assert not second.baseline_note.startswith("first evaluation"), second.baseline_note
    assert Path(first.baseline_path).name in second.baseline_note and "graders differ" in second.baseline_note
