"""Walk 11: the review found 11 of 12 groups scoring alike (every reply cut at 16 tokens before its answer), the
baseline warned, yet recording the pass and launching said nothing, and 3 steps (34 minutes) trained nothing. Now
the verdict (CLI) and the launch (CLI and MCP) warn when most reviewed groups carry no signal, by the one rule the
base-rate warning uses (inspection.signal_share), with how many and the causes the samples show."""

from __future__ import annotations

import asyncio

import pytest

from conftest import call_mcp, cli_here
from support import hand_made_run

RIGHT, WRONG = "<reasoning>r</reasoning><answer>2</answer>", "<reasoning>r</reasoning><answer>9</answer>"


def _reviewed(workspace, tiny_model, groups, cut):
    run_dir = hand_made_run(workspace, tiny_model, f"signal-{cut}", groups, ["2"] * len(groups), cut=cut)
    assert cli_here("inspect-rewards", str(run_dir), "--max-samples", "100").returncode == 0
    return run_dir


@pytest.mark.slow
def test_a_pass_over_groups_that_mostly_score_alike_is_warned_with_its_causes(workspace, tiny_model):
    """11 of 12 groups all wrong and every reply cut: the pass is recorded (a warning, not a refusal) and says
    how many groups score alike, what that means for GRPO, and that the replies were cut."""
    groups = [[RIGHT, WRONG, WRONG, WRONG]] + [[WRONG] * 4] * 11
    run_dir = _reviewed(workspace, tiny_model, groups, cut=True)
    proc = cli_here("record-inspection-verdict", str(run_dir), "--verdict", "pass", "--reviewer", "ana",
                    "--agree-rest")
    assert proc.returncode == 0, proc.stderr
    warning = next(line for line in proc.stdout.splitlines() if line.startswith("WARNING: "))
    assert "11 of 12 reviewed prompt groups (92%) score alike" in warning, warning
    assert "GRPO's gradient is 0" in warning and "most steps train nothing" in warning, warning
    assert "48 of 48 reviewed completions were cut at max_completion_length" in warning, warning
    # the per-sample rate predicts the same: 1 of 48 paid, a group of 4 alike with p^4 + (1-p)^4 = 92%
    assert "2% of the samples succeed" in warning and "(1-p)^4 = 92%" in warning, warning
    assert warning.removeprefix("WARNING: ") in (run_dir / "inspection" / "review.md").read_text()


@pytest.mark.slow
def test_a_pass_over_groups_with_spread_says_nothing(workspace, tiny_model):
    """Most groups with spread: no warning at the verdict (the rule: half or more alike)."""
    groups = [[RIGHT, WRONG, WRONG, WRONG]] * 7 + [[WRONG] * 4] * 6
    run_dir = _reviewed(workspace, tiny_model, groups, cut=False)
    proc = cli_here("record-inspection-verdict", str(run_dir), "--verdict", "pass", "--reviewer", "ana",
                    "--agree-rest")
    assert proc.returncode == 0 and "WARNING" not in proc.stdout, proc.stdout


@pytest.mark.slow
def test_the_launch_says_it_again_over_mcp_and_the_cli(workspace, tiny_model):
    """A reward every reply of the tiny model earns: every group scores alike. launch_training over MCP and
    launch-training on the CLI both warn, and launch all the same."""
    from support import emit_run, end_run, pass_inspection
    from conftest import run_cli_json
    from mcp_server.runs import Run

    runs = [Run(emit_run(f"alike-{door}", max_steps=1)) for door in ("mcp", "cli")]
    for run in runs:
        pass_inspection(run.dir)

    async def calls(client):
        return await client.call_tool("launch_training", {"run": str(runs[0].dir)})

    try:
        result = asyncio.run(call_mcp(calls, env={"LLM_FINETUNING_WORKSPACE": str(workspace)}))
        assert not result.is_error and result.structured_content["launched"], result
        proc, launched = run_cli_json("launch-training", str(runs[1].dir), here=True)
        assert proc.returncode == 0 and launched["launched"], proc.stderr
        for data in (result.structured_content, launched):
            said = [w for w in data["warnings"] if "score alike" in w]
            assert len(said) == 1 and "of the samples succeed" in said[0], data["warnings"]
    finally:  # what is asserted is the launch's word: the runs are ended, not trained out (nothing reads them)
        for run in runs:
            end_run(run.dir)


@pytest.mark.slow
@pytest.mark.parametrize("solved", [True, False])
def test_the_cpu_default_of_16_prompts_is_warned_about_only_when_the_route_rests_on_it(workspace, tiny_model,
                                                                                        solved):
    """Walk 11: the CPU's default 16 prompts always set off the review's own "sample at least 64" warning. 16 show
    how the reward scores real replies, and a success among them settles the route: the warning comes only when no
    prompt was solved (a route to SFT that 64 prompts might overturn)."""
    import json

    from support import sign_samples

    groups = [[RIGHT if solved and p < 4 else WRONG, WRONG, WRONG, WRONG] for p in range(16)]
    run_dir = hand_made_run(workspace, tiny_model, f"cpu16-{solved}", groups, ["2"] * 16)
    meta = json.loads((run_dir / "inspection" / "samples.meta.json").read_text())
    sign_samples(run_dir, {**meta, "dataset_rows": 150})  # 16 drawn of 150 rows, as a CPU's sampling draws them
    proc = cli_here("inspect-rewards", str(run_dir), "--max-samples", "64", "--json")
    assert proc.returncode == (0 if solved else 1), proc.stderr  # 1: the route is SFT first
    said = [w for w in json.loads(proc.stdout)["warnings"] if "prompts" in w and "64" in w]
    if solved:
        assert said == [], said
    else:
        assert len(said) == 1 and "no success among 16 prompts" in said[0], said
        assert "sample 64 prompts before routing to SFT" in said[0], said
