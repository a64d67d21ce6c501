"""Issue 49, the walk's second pass: what the user waited for or learnt too late, through the door they used.

- A baseline made stale by the review (the reward fixed after the base model was measured) was found only by
  promote-checkpoint, after training: the launch now says so, with the command to measure it again, and still
  launches.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run_cli_json
from support import TINY_OVERRIDES, wait_for
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
