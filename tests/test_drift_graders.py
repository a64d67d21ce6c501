"""Walk 12: a drift suite of capitals and opposites the base answers in plain text ("Paris") came back NOT
MEASURED, as the packaged one had: every row was graded by the default `correctness` grader, which reads an
<answer> tag; the grader was undocumented, and neither the message nor the drift record showed a reply. A row may
now name the `text` grader (the reply's first line is, begins or ends with the answer) or `number`; NOT MEASURED
names the grader, shows the base's first replies and gives the row format to use; the record keeps every reply."""

from __future__ import annotations

import json
import shutil

from conftest import cli_here, run_cli_json
from support import emit_run
from mcp_server.runs import Run


def _rows(answer: str, grader: str | None = None) -> list[dict]:
    row = {"prompt": [{"role": "user", "content": "Say it."}], "answer": answer}
    return [row | ({"grader": grader} if grader else {})]


def test_a_plain_text_answer_passes_by_the_text_grader_by_its_first_line():
    from mcp_server.evaluation.drift import grade_drift_replies

    def grade(reply, answer, grader=None):
        return grade_drift_replies(_rows(answer, grader), [reply])[0]

    for reply in ("Paris", "**Paris.**", "paris", "Paris, France.\nIt is big.", "The capital of France is Paris."):
        assert grade(reply, "Paris", "text"), reply
    for reply in ("Parisian", "Lyon.\nParis", "", "I do not know."):
        assert not grade(reply, "Paris", "text"), reply
    assert grade('"Cold."', "cold", "text")
    assert not grade("Paris", "Paris")  # the default grader reads an <answer> tag: a plain reply fails it
    assert grade("<answer>Paris</answer>", "Paris")
    assert grade("7 + 5 = 12", "12", "number") and grade("The answer is 12.", "12", "number")
    assert not grade("7 + 5 = 13", "12", "number")


def test_not_measured_names_the_grader_shows_replies_and_the_row_format(workspace, tiny_model, tmp_path):
    """Plain-text rows with no grader field on the tiny model (which answers "........"): NOT MEASURED says they
    were graded by correctness (an <answer> tag), shows the base's replies, and gives a row with "grader": "text";
    the base's drift record keeps every reply it decoded."""
    from mcp_server.evaluation.drift import DRIFT_FIRST_ITEMS
    from mcp_server.tiny import make_task, write_jsonl

    goldens = write_jsonl([{k: r[k] for k in ("prompt", "question", "answer")} for r in make_task(n=4)],
                          tmp_path / "goldens.jsonl")
    rows = [{"prompt": [{"role": "user", "content": f"Capital of country {i}? Reply with the city only."}],
             "answer": f"City{i}"} for i in range(DRIFT_FIRST_ITEMS + 2)]
    rows[-1]["grader"] = "text"
    suite = write_jsonl(rows, tmp_path / "drift.jsonl")
    assert run_cli_json("evaluate-model", str(tiny_model), "--goldens", str(goldens), "--max-new-tokens", "4",
                        here=True)[0].returncode == 0
    run = Run(emit_run("drift-graders"))
    shutil.copytree(tiny_model, run.checkpoints)
    proc = cli_here("promote-checkpoint", str(run.dir), "--drift-suite", str(suite))
    promotion = json.loads((run.dir / "promotion.json").read_text())
    drift = promotion["drift"]
    assert drift["band"] == "unmeasured" and drift["graders"] == {"correctness": DRIFT_FIRST_ITEMS + 1, "text": 1}
    assert len(drift["base_replies"]) == 3, drift
    said = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines() if "NOT MEASURED" in line]
    assert said, proc.stdout + proc.stderr
    for line in said:
        assert "graded by correctness (13 rows: the reply's one <answer>...</answer> tag" in line, line
        assert "the base's first replies: " + json.dumps(drift["base_replies"][0]) in line, line
        assert "(none has the <answer> tag the correctness grader reads)" in line, line
        assert '"answer": "Paris", "grader": "text"}' in line, line
    report = (run.dir / "promotion-report.md").read_text()
    assert "graded by correctness" in report and '"grader": "text"' in report
    record = json.loads(next(workspace.glob("eval/drift-*.json")).read_text())
    assert len(record["replies"]) == DRIFT_FIRST_ITEMS, record
    assert record["replies"][0].startswith(drift["base_replies"][0].removesuffix("...")), record
