"""Issue 49, a second blind walk (SmolLM2 on the CPU, the user's own subtraction task and reward module): what the
product said to that user, through the door they used.

- A custom reward was imported from the current directory: from another directory the gate said "cannot import
  module ... fix it, then run inspect_rewards ... record_inspection_verdict" (redo the review) when the fix is the
  import path. A run's rewards now import from the workspace the run belongs to, then its reviewed copy, from any
  directory; a module found nowhere is named with where it was looked for and the fix (run from the workspace, or
  PYTHONPATH), and the review stands.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import run_cli, run_cli_json
from support import emit_run, pass_inspection
from mcp_server.runs import Run

MINUS = "def last_number_reward(completions, **columns):\n    return [1.0 for _ in completions]\n"


@pytest.mark.slow
def test_a_runs_custom_reward_imports_the_same_from_any_directory(workspace, tiny_model, tmp_path, monkeypatch):
    module = f"minus_rewards_{os.getpid()}"
    (workspace / f"{module}.py").write_text(MINUS)
    monkeypatch.chdir(workspace)  # the user's walk: emit, sample, inspect and sign in the workspace
    run = Run(emit_run("minus", rewards=[{"name": f"{module}.last_number_reward"}]))
    pass_inspection(run.dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"LLM_FINETUNING_WORKSPACE": ""}  # the run's own path says where it belongs
    proc, gate = run_cli_json("check-inspection-gate", str(run.dir), process=True, cwd=elsewhere, env=env)
    assert proc.returncode == 0 and gate["passed"], gate  # before: "cannot import module ... run inspect_rewards"

    (workspace / f"{module}.py").unlink()
    shutil.rmtree(run.reward_code)
    proc, gate = run_cli_json("check-inspection-gate", str(run.dir), process=True, cwd=elsewhere, env=env)
    assert proc.returncode == 1 and not gate["passed"]
    assert f"No module named '{module}'" in gate["reason"] and "looked in" in gate["reason"], gate
    assert str(workspace.resolve()) in gate["reason"], gate
    assert f"{module}.py" in gate["how_to_clear"] and "PYTHONPATH" in gate["how_to_clear"], gate
    assert "inspect_rewards" not in gate["how_to_clear"] and "record_inspection_verdict" not in gate["how_to_clear"]


def test_emit_config_says_where_it_looked_for_a_reward_module(workspace, tmp_path):
    proc = run_cli("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name", "nomod",
                   "--rewards", json.dumps([{"name": "nowhere_rewards_49.last_number_reward"}]), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # NOT VALID
    assert "No module named 'nowhere_rewards_49'" in proc.stdout and "looked in" in proc.stdout, proc.stdout
    assert str(Path(tmp_path).resolve()) in proc.stdout and "PYTHONPATH" in proc.stdout, proc.stdout


@pytest.mark.parametrize("name, meant", [("unit_rewardz.cm_reward", "unit_rewards.cm_reward"),
                                        ("unit_rewards.cm_rewrd", "unit_rewards.cm_reward")])
def test_a_misspelt_reward_is_met_with_the_workspaces_nearest_function(workspace, name, meant):
    """Issue 49: `--rewards '[{"name":"unit_rewardz.cm_reward"}]'` beside unit_rewards.py got a second ERROR
    listing TRL's reward names (accuracy_reward, ...). One error, naming the workspace's nearest function."""
    (workspace / "unit_rewards.py").write_text("def cm_reward(completions, **columns):\n"
                                              "    return [0.0 for _ in completions]\n")
    proc = run_cli("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name", "misspelt",
                   "--rewards", json.dumps([{"name": name}]), cwd=workspace)
    assert proc.returncode == 1, proc.stderr  # NOT VALID
    errors = [line for line in proc.stdout.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "reward_unresolvable" in errors[0], proc.stdout
    assert f"id you mean '{meant}'" in errors[0], proc.stdout
    assert "accuracy_reward" not in proc.stdout, proc.stdout


def test_a_name_longer_than_anyone_types_is_never_looked_up_for_a_did_you_mean(workspace):
    """Round 15, M1: a workspace function named with thousands of letters and a reward naming a near miss of it
    made the "did you mean" lookup (difflib, quadratic in the length) hold validate_grpo_config for ten minutes.
    A name over errors.CLOSE_NAME_CHARS (200) is neither looked up nor offered; a short near miss still is."""
    long = "r" + "ab" * 110  # over 200 letters, and its reward's name under the request's 256
    (workspace / "unit_rewards.py").write_text(f"def {long}(completions, **columns):\n    return [0.0]\n"
                                              "def cm_reward(completions, **columns):\n    return [0.0]\n")
    for name, meant in ((f"unit_rewardz.{long[:-1]}", None), ("unit_rewardz.cm_reward", "unit_rewards.cm_reward")):
        proc = run_cli("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name", "long",
                       "--rewards", json.dumps([{"name": name}]), cwd=workspace)
        errors = [line for line in proc.stdout.splitlines() if "ERROR" in line]
        assert proc.returncode == 1 and len(errors) == 1 and "reward_unresolvable" in errors[0], proc.stdout
        assert ("id you mean" in errors[0]) == bool(meant) and (not meant or meant in errors[0]), errors[0]


def test_the_cli_takes_the_override_reason_the_mcp_tool_takes(workspace):
    reason = "a 12-token task: the rate is the user's call"
    proc, result = run_cli_json("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name",
                                "why", "--override=learning_rate=5e-4", "--override-reason", reason, here=True)
    assert proc.returncode in (0, 1), proc.stderr  # before: "unrecognized arguments: --override-reason"
    request = json.loads((Path(result["run_dir"]) / "train" / "request.json").read_text())
    assert request["override_reason"] == reason


@pytest.mark.slow
def test_the_mcp_handshake_reports_the_package_version():
    import asyncio
    import tomllib

    from conftest import ROOT, call_mcp

    async def info(client):
        return client.server_info

    server = asyncio.run(call_mcp(info))
    assert (server.name, server.version) == (
        "llm-finetuning", tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])  # before: ""


def test_a_bare_reward_name_suggests_the_workspace_function_of_that_name(workspace):
    (workspace / "minus_rewards.py").write_text(MINUS)
    proc = run_cli("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name", "bare",
                   "--rewards", json.dumps([{"name": "last_number_reward"}]), cwd=workspace)
    assert proc.returncode == 1, proc.stderr
    # before: "did you mean json_schema_reward, math_reward, format_reward?" (registry names only)
    assert "did you mean 'minus_rewards.last_number_reward'" in proc.stdout, proc.stdout


def test_a_closed_gate_names_the_file_and_field_changed_and_the_cheapest_way_to_clear_it(workspace, tiny_model,
                                                                                        monkeypatch):
    import yaml

    module = f"minus_words_{os.getpid()}"
    source = workspace / f"{module}.py"
    source.write_text(MINUS)
    monkeypatch.chdir(workspace)
    run = Run(emit_run("closed", rewards=[{"name": f"{module}.last_number_reward"}]))
    pass_inspection(run.dir)

    def gate():
        proc, result = run_cli_json("check-inspection-gate", str(run.dir), here=True, cwd=workspace)
        assert proc.returncode == 1 and not result["passed"], result
        return result["reason"], result["how_to_clear"]

    source.write_text(MINUS.replace("1.0", "0.5"))  # the reward: rescores the same samples
    reason, how = gate()
    assert f"{module}.py changed" in reason, reason  # before: "its code, or a local module it imports"
    assert "re-inspect only" in how and "sample-completions" not in how, how
    source.write_text(MINUS)

    config = yaml.safe_load(run.config.read_text())
    data = Path(config["datasets"][0]["data_files"])
    data = data if data.is_absolute() else run.dir / data
    rows = data.read_text()
    data.write_text(rows + rows.splitlines()[0] + "\n")  # the data: another sample would differ
    reason, how = gate()
    assert f"{data.name}: its content changed" in reason and "sha256" not in reason, reason  # before: JSON blobs
    assert "re-sample" in how and "sample-completions" in how, how
    data.write_text(rows)

    text = run.config.read_text()
    limit = config["max_completion_length"]
    run.config.write_text(text.replace(f"max_completion_length: {limit}\n", f"max_completion_length: {limit * 2}\n"))
    reason, how = gate()
    assert f"max_completion_length: {limit} -> {limit * 2}" in reason, reason
    assert "re-sample" in how and "sample-completions" in how, how


def test_launch_training_says_each_phase_as_it_goes(workspace, tiny_model):
    """Issue 49: `launch-training` printed nothing for about 53 s (the gates rehearse a step and probe the training
    interpreter). Each phase is a progress line as it starts (the CLI prints them on stderr, as sampling's). The
    core API with its report, on a run without a verdict: every gate still runs, so all of them are said; the
    config gate's one-step rehearsal waits for the inspection gate (a refused launch starts nothing), and says so."""
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    run_dir = emit_run("phases")
    lines: list[str] = []
    result = launch_training(LaunchRequest(run=str(run_dir)), report=lambda d, t, m: lines.append(m))
    assert not result.launched
    phases = [m.split(":", 1)[0] for m in lines]
    assert phases == ["gates", "config", "environment"], lines
    assert "rehearsal runs once the gates above pass" in lines[1], lines
    assert [r.gate for r in result.refusals][:1] == ["inspection"], result.refusals
