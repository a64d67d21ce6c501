"""Issue 49, the walk's second pass: what the user waited for or learnt too late, through the door they used.

- A baseline made stale by the review (the reward fixed after the base model was measured) was found only by
  promote-checkpoint, after training: the launch now says so, with the command to measure it again, and still
  launches.
- promote-checkpoint printed "starting" and "decoded 50/50" for minutes: each of its evaluations now starts with
  evaluate-model's plan (what it decodes and an upper estimate of its time).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import run_cli_json
from support import TINY_OVERRIDES, emit_run, wait_for
from mcp_server.runs import Run

GRADER = """def any_text(completions, **columns):
    return [{score} if (c if isinstance(c, str) else c[-1]["content"]).strip() else 0.0 for c in completions]
"""


@pytest.mark.slow
def test_a_baseline_made_stale_by_the_review_is_said_at_the_launch(workspace, tiny_model, tmp_path):
    """The user measured the baseline, then fixed the reward during review; the verdict, the gate and the launch
    passed silently and promote-checkpoint refused "the graders' code changed since baseline-... was measured"."""
    module = f"walk_grader_{os.getpid()}"
    (workspace / f"{module}.py").write_text(GRADER.format(score=1.0))
    graders = json.dumps([{"name": f"{module}.any_text"}])
    goldens = tmp_path / "goldens.jsonl"
    goldens.write_text("".join(json.dumps({"prompt": f"Say {i}.", "answer": str(i)}) + "\n" for i in range(3)))

    def cli(*args):
        proc, result = run_cli_json(*args, here=True, cwd=workspace)
        assert proc.returncode == 0, proc.stderr
        return result

    baseline = Path(cli("evaluate-model", "tiny", "--goldens", str(goldens), "--max-new-tokens", "8", "--graders",
                        graders)["baseline_path"])
    emitted = cli("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name", "stale",
                  "--rewards", graders,
                  *(f"--override={key}={value}" for key, value in {**TINY_OVERRIDES, "max_steps": 1}.items()))
    run = Run(Path(emitted["run_dir"]))
    (workspace / f"{module}.py").write_text(GRADER.format(score=0.5))  # the reward fixed during review
    cli("sample-completions", str(run.dir), "--num-prompts", "13")
    cli("inspect-rewards", str(run.dir), "--max-samples", "52")
    cli("record-inspection-verdict", str(run.dir), "--verdict", "pass", "--reviewer", "ana", "--agree-rest")
    assert cli("check-inspection-gate", str(run.dir))["passed"]
    launched = cli("launch-training", str(run.dir))
    try:
        assert launched["launched"], launched  # a warning, not a refusal
        message = launched["message"]
        assert f"the graders' code changed since {baseline.name} was measured" in message, message
        assert "promote_checkpoint will refuse" in message and "evaluate-model tiny" in message, message
        assert f"--goldens {goldens}" in message and "--run" in message, message
    finally:
        wait_for(run.dir, lambda s: s.state not in ("starting", "running"))


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
