"""Issue 49: what promote-checkpoint would find wrong with the base model's baseline is said when the run is
launched, not after training: a baseline made stale by the review (the reward fixed after the base model was
measured), or none at all. A warning in the launch result with the command that measures it; the run launches all
the same. Checked at the doors (the CLI and the MCP tool), which may import both training and evaluation."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from conftest import call_mcp, run_cli_json
from support import TINY_OVERRIDES, emit_run, end_run, pass_inspection
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

    baseline = Path(cli("evaluate-model", "tiny", "--goldens", str(goldens), "--max-new-tokens", "12", "--graders",
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
        [warning] = [w for w in launched["warnings"] if "score alike" not in w]
        assert f"the graders' code changed since {baseline.name} was measured" in warning, warning
        assert "promote-checkpoint would refuse" in warning, warning
        assert (f"evaluate-model tiny --goldens {goldens} --graders @{run.rewards} --run {run.dir}"
                in warning), warning
    finally:  # what is asserted is the launch's word: the run is ended, not trained out (nothing reads it)
        end_run(run.dir)


@pytest.mark.slow
def test_no_baseline_at_all_is_said_by_the_mcp_launch(workspace, tiny_model):
    """No baseline of the base model in the workspace: launch_training over MCP launches and says so, with the
    command that measures one at the run's budget."""
    run = Run(emit_run("nobase", max_steps=1))
    pass_inspection(run.dir)

    async def calls(client):
        return await client.call_tool("launch_training", {"run": str(run.dir)})

    result = asyncio.run(call_mcp(calls, env={"LLM_FINETUNING_WORKSPACE": str(workspace)}))
    try:
        assert not result.is_error, result
        data = result.structured_content
        assert data["launched"], data
        [warning] = [w for w in data["warnings"] if "score alike" not in w]
        assert warning.startswith("no baseline of tiny in "), warning
        assert f"evaluate-model tiny --goldens GOLDENS --graders @{run.rewards} --run {run.dir}" in warning, warning
    finally:  # what is asserted is the launch's word: the run is ended, not trained out (nothing reads it)
        end_run(run.dir)


@pytest.mark.slow
def test_a_baseline_no_group_can_learn_from_is_warned_with_the_way_on(workspace, tiny_model, tmp_path):
    """Walk 10: `evaluate-model` printed "0/40 passed = 0.0%" and nothing more; only a sampling round later did
    inspect-rewards say SFT FIRST. A base model's pass rate at which most GRPO groups (TRL's default 8) have no
    spread is warned at once, naming SFT and an easier curriculum; one that pays every reply is not."""
    goldens = tmp_path / "goldens.jsonl"
    goldens.write_text("".join(json.dumps({"prompt": f"Say {i}.", "answer": str(i)}) + "\n" for i in range(3)))
    said = {}
    for score in (0.0, 1.0):
        module = f"walk_grader_{os.getpid()}_{score:.0f}"  # a module a score: a rewrite in the same second and size
        # would be read from its stale .pyc
        (workspace / f"{module}.py").write_text(f"def paid(completions, **columns):\n"
                                                 f"    return [{score} for _ in completions]\n")
        graders = json.dumps([{"name": f"{module}.paid"}])
        proc, result = run_cli_json("evaluate-model", "tiny", "--goldens", str(goldens), "--max-new-tokens", "4",
                                    "--graders", graders, "--baseline", "never", here=True, cwd=workspace)
        assert proc.returncode == 0, proc.stderr
        said[score] = [w for w in result["warnings"] if "GRPO cannot learn" in w]
    assert len(said[0.0]) == 1 and "a greedy pass rate of 0/3" in said[0.0][0], said
    assert "SFT first" in said[0.0][0] and "easier curriculum" in said[0.0][0] and "= 100%" in said[0.0][0], said
    assert not said[1.0], said
