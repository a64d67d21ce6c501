"""Issue 49, the walk's second pass: what the user waited for or learnt too late, through the door they used.

- promote-checkpoint printed "starting" and "decoded 50/50" for minutes: each of its evaluations now starts with
  evaluate-model's plan (what it decodes and an upper estimate of its time).
"""

from __future__ import annotations

import re
import shutil


from support import emit_run
from mcp_server.runs import Run

GRADER = """def any_text(completions, **columns):
    return [{score} if (c if isinstance(c, str) else c[-1]["content"]).strip() else 0.0 for c in completions]
"""


def test_each_of_promotes_evaluations_says_its_plan(workspace, tiny_model, tmp_path):
    """promote-checkpoint with no baseline yet, its output not a terminal: the baseline measured now, the checkpoint
    on the goldens and the drift suite each say what they decode and about how long before decoding."""
    from conftest import cli_here
    from mcp_server.tiny import make_task, write_jsonl

    goldens = write_jsonl([{k: r[k] for k in ("prompt", "question", "answer")} for r in make_task(n=4)],
                          tmp_path / "goldens.jsonl")
    suite = write_jsonl([{"prompt": r["prompt"], "answer": r["answer"], "grader": "correctness"}
                         for r in make_task(n=4)], tmp_path / "drift.jsonl")
    run = Run(emit_run("planned"))
    shutil.copytree(tiny_model, run.checkpoints)
    proc = cli_here("promote-checkpoint", str(run.dir), "--goldens", str(goldens), "--drift-suite", str(suite))
    lines = proc.stderr.splitlines()
    starts = [line for line in lines if ": starting" in line]
    assert {"baseline of the base model", "checkpoint on the goldens", "drift suite, base model"} <= {
        line.split(": starting")[0].removeprefix("  ... ") for line in starts}, starts
    assert all("; plan: " in line for line in starts), starts
    assert all(re.search(r"plan: .*\d", line) for line in lines if "plan: " in line), proc.stderr  # a figure
