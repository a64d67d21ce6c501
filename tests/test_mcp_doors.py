"""Every MCP tool over real stdio and every CLI command, at least once, on the tiny model; and the conventions of an
MCP server: flat arguments, unknown fields refused by name, progress and log messages while long tools work, and
one clear message (never a bare "Error executing tool", never a traceback) for bad files, huge strings, bad values.

One MCP session drives a whole small lifecycle (module fixture), so the server starts once. The promotion run's
checkpoint is the base model itself: identical greedy outputs by construction, so the verdict is REJECT on any CPU.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from conftest import ANY_TEXT_REWARDS, call_mcp, run_cli, run_cli_json
from mcp_server.tiny import make_task, write_jsonl

TINY_OVERRIDES = {"max_steps": 4, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 12,
                  "logging_steps": 1, "save_steps": 1, "gradient_accumulation_steps": 1}
MAX_NEW = 16


def _run_with_base_as_checkpoint(ws: Path, tiny_model: Path) -> Path:
    """A run directory as training leaves it, whose checkpoint is a copy of the base model."""
    run = ws / "runs" / "2026-01-01-same"
    (run / "train").mkdir(parents=True)
    shutil.copytree(tiny_model, run / "checkpoints")
    config = {"model_name_or_path": "tiny", "output_dir": str(run / "checkpoints"), "max_completion_length": MAX_NEW}
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "train" / "rewards.json").write_text(
        json.dumps([{"name": "correctness_reward", "params": {}, "weight": 1.0}])
    )
    return run


@pytest.fixture(scope="module")
def doors(tmp_path_factory, tiny_model):
    ws = tmp_path_factory.mktemp("doors-ws")
    # Per-user dirs under the test's workspace: prepare_environment records its build there.
    env = {"LLM_FINETUNING_WORKSPACE": str(ws), "XDG_DATA_HOME": str(ws / "data"), "XDG_CACHE_HOME": str(ws / "cache")}
    goldens = ws / "goldens.jsonl"
    write_jsonl([{k: r[k] for k in ("prompt", "answer")} for r in make_task(n=8, max_operand=3)], goldens)
    same = _run_with_base_as_checkpoint(ws, tiny_model)
    binary = ws / "binary.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    edited, edited_samples = _hand_edited_run(tmp_path_factory.mktemp("edited-ws"))
    progress: dict[str, list[tuple]] = {}
    logs: list = []
    called: list[str] = []

    async def on_log(params):
        logs.append(params)

    async def calls(client):
        listed = [t.name for t in (await client.list_tools()).tools]

        async def call(name, arguments, track=False):
            called.append(name)

            async def on_progress(done, total, message):
                progress.setdefault(name, []).append((done, total, message))

            return await client.call_tool(name, arguments, progress_callback=on_progress if track else None)

        r = {"listed": listed}
        r["emit"] = await call(
            "emit_grpo_config",
            {
                "model": "tiny",
                "dataset": "tiny",
                "gpu": "cpu",
                "run_name": "doors",
                "rewards": ANY_TEXT_REWARDS,
                "overrides": TINY_OVERRIDES,
            },
        )
        run = r["emit"].structured_content["run_dir"]
        r["validate"] = await call("validate_grpo_config", {"config_path": r["emit"].structured_content["config_path"]})
        r["plan"] = await call(
            "plan_memory", {"config_path": run, "gpu": "T4", "prompt_length": 32, "validate_levers": False}
        )
        r["rewards"] = await call("list_rewards", {})
        r["sample"] = await call("sample_completions", {"run": run, "num_prompts": 13, "batch_size": 16}, track=True)
        # A single-turn run has no trajectories: refused in one line (tests/test_agentic.py rolls agentic ones out).
        r["trajectories"] = await call("sample_trajectories", {"run": run})
        r["inspect"] = await call("inspect_rewards", {"run": run, "max_samples": 52}, track=True)
        r["verdict"] = await call("record_inspection_verdict", {"run": run, "verdict": "pass", "reviewer": "test",
                                                                "agree_with_rest": True})
        r["gate"] = await call("check_inspection_gate", {"run": run})
        r["env"] = await call("check_environment", {"run": run})
        r["launch"] = await call("launch_training", {"run": run})
        # Stopped at once, while it still imports torch: killed before any step, so no checkpoint to resume from.
        r["stop"] = await call("stop_training", {"run": run, "timeout_s": 0, "kill": True})
        r["status"] = await call("training_status", {"run": run})
        r["resume"] = await call("resume_training", {"run": run})
        r["diagnose"] = await call("diagnose_run", {"source": run, "validate_patches": False})
        r["runs"] = await call("list_runs", {})
        r["evaluate"] = await call(
            "evaluate_model", {"model": "tiny", "goldens": str(goldens), "max_new_tokens": MAX_NEW}, track=True
        )
        r["promote"] = await call("promote_checkpoint", {"run": str(same)}, track=True)
        r["export"] = await call("export_model", {"run": str(same), "allow_unpromoted": True}, track=True)
        # A build that cannot succeed (no such torch, no such index): it starts, then fails with its log.
        r["prepare"] = await call(
            "prepare_environment",
            {
                "path": str(ws / "training-venv"),
                "torch_spec": "torch==0.0.1.dev0",
                "torch_index": "file:///nonexistent",
            },
        )
        # Conventions: what a client gets wrong.
        r["unknown"] = await client.call_tool("emit_grpo_config", {"model": "tiny", "gpuu": "H100"})
        r["nested_unknown"] = await client.call_tool("emit_grpo_config", {
            "model": "tiny", "rewards": [{"name": "format_reward", "wieght": 2}]})
        r["wrapped"] = await client.call_tool("validate_grpo_config", {"request": {"config_path": str(binary)}})
        r["no_args"] = await client.call_tool("list_runs", {"verbose": True})
        r["binary"] = await client.call_tool("validate_grpo_config", {"config_path": str(binary)})
        r["binary_plan"] = await client.call_tool("plan_memory", {"config_path": str(binary), "gpu": "T4"})
        r["huge"] = await client.call_tool("diagnose_run", {"source": "x" * 1_000_000})
        r["long_name"] = await client.call_tool("check_inspection_gate", {"run": "y" * 300})
        r["wrong_type"] = await client.call_tool("plan_memory", {"model": "tiny", "gpu": "T4", "num_gpus": "two"})
        r["negative"] = await client.call_tool("stop_training", {"run": run, "timeout_s": -1})
        r["json_string"] = await client.call_tool(
            "validate_grpo_config", {"config": '{"learning_rate": 1e-6}', "gpu": "T4"}
        )
        # Hand-edited run files (test_hand_edited_run_files_get_a_message_naming_the_file), in this one session.
        r["edited_status"] = await client.call_tool("training_status", {"run": str(edited)})
        r["edited_rewards"] = await client.call_tool("inspect_rewards", {"run": str(edited)})
        edited_samples.write_text('{"prompt_index": 0, "completion": "x"}\n{oops\n')
        r["edited_samples"] = await client.call_tool("inspect_rewards", {"run": str(edited)})
        return r

    results = asyncio.run(call_mcp(calls, env=env, logging_callback=on_log, log_level="info"))
    return SimpleNamespace(ws=ws, env=env, run=Path(results["emit"].structured_content["run_dir"]), same=same,
                           binary=binary, r=results, progress=progress, logs=logs, called=called, edited=edited)


@pytest.mark.slow
def test_prepare_environment_starts_a_build_in_the_per_user_data_dir(doors):
    started = _ok(doors.r["prepare"])
    assert started["status"] in ("running", "failed") and not started["in_use"]
    assert Path(started["venv"]) == doors.ws / "training-venv"
    assert Path(started["log_path"]).is_relative_to(doors.ws / "data")


def _ok(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def _error(result) -> str:
    assert result.is_error, result.structured_content
    text = result.content[0].text
    # One message that says what is wrong, never the SDK's bare prefix alone.
    assert text.startswith("Error executing tool ") and len(text.split(": ", 1)[-1]) > 20, text
    return text


@pytest.mark.slow
def test_every_tool_is_called_over_stdio_with_flat_arguments(doors):
    assert set(doors.called) == set(doors.r["listed"]), set(doors.r["listed"]) - set(doors.called)
    r = doors.r
    assert _ok(r["emit"])["validation"]["valid"] and _ok(r["validate"])["valid"]
    assert _ok(r["plan"])["status"] == "fits" and "format_reward" in {x["name"] for x in _ok(r["rewards"])["rewards"]}

    sample = _ok(r["sample"])
    assert (sample["num_prompts"], sample["n"], sample["num_samples"]) == (13, 4, 52)
    assert len(Path(sample["samples_path"]).read_text().splitlines()) == 52
    assert "has no train/agentic.json: emit the run with an environment or tools" in _error(r["trajectories"])
    assert _ok(r["inspect"])["num_samples"] == 52 and _ok(r["verdict"])["gate"]["passed"] and _ok(r["gate"])["passed"]

    env = _ok(r["env"])
    assert env["verdict"] != "blocked", env["blockers"]
    assert Path(env["report_path"]) == doors.run / "env-report.json"
    assert json.loads(Path(env["report_path"]).read_text())["verdict"] == env["verdict"]

    launch = _ok(r["launch"])
    assert launch["launched"] and launch["pid"] and Path(launch["log_path"]).is_file()
    stop = _ok(r["stop"])
    assert stop["killed"] and not stop["graceful"] and stop["state"] == "stopped" and stop["checkpoint"] is None
    assert "lost" in stop["error"]  # a kill is an error in the result, never a quiet success
    assert _ok(r["status"])["state"] == "stopped"
    resume = _ok(r["resume"])
    assert not resume["launched"] and [x["gate"] for x in resume["refusals"]] == ["checkpoint"]
    assert _ok(r["diagnose"])["source"] == str(doors.run)
    assert {x["run"]: x["state"] for x in _ok(r["runs"])["runs"]}[doors.run.name] == "stopped"

    evaluation = _ok(r["evaluate"])
    assert evaluation["n"] == 8 and evaluation["baseline_written"]
    promotion = _ok(r["promote"])
    # The checkpoint is the base model: same greedy outputs on every golden, nothing gained, nothing lost.
    assert promotion["verdict"] == "REJECT" and promotion["gained"] == promotion["lost"] == 0
    drift = promotion["drift"]  # a suite the base model is at the floor of: the checkpoint not decoded on it
    assert promotion["checkpoint_pass_rate"] == evaluation["pass_rate"] and drift["drop_points"] == (
        None if drift["band"] == "unmeasured" else 0), drift
    export = _ok(r["export"])
    assert (
        export["smoke_identical"] and export["promotion_verdict"] == "REJECT" and "model.safetensors" in export["files"]
    )
    assert "not promoted" in Path(export["model_card"]).read_text()


@pytest.mark.slow
def test_long_tools_send_progress_and_log_messages_while_they_work(doors):
    sampled = doors.progress["sample_completions"]
    # The plan before generation, then one notification per generate batch (16 sequences = 4 prompts x 4), and
    # between them the decode steps of a batch that runs long (sampling_plan.Progress).
    assert sampled[0][0] == 0 and sampled[0][2].startswith("plan: 13 prompts x 4 = 52 completions of up to ")
    assert [p for p, _, m in sampled if m.startswith("sampled ")] == [4, 8, 12, 13]
    assert [p for p, _, _ in sampled] == sorted(p for p, _, _ in sampled) and {t for _, t, _ in sampled} == {13}
    assert sampled[-1][2].startswith("sampled 13/13 prompts x 4, written to inspection/samples.partial.jsonl")
    for name in ("inspect_rewards", "evaluate_model", "promote_checkpoint", "export_model"):
        seen = [p for p, _, _ in doors.progress[name]]
        assert len(seen) >= 2 and seen == sorted(set(seen)), (name, doors.progress[name])  # MCP: progress only grows
    assert any("checkpoint on the goldens" in m for _, _, m in doors.progress["promote_checkpoint"])
    assert any("drift suite" in m for _, _, m in doors.progress["promote_checkpoint"])
    messages = [log.data for log in doors.logs if log.logger == "llm-finetuning"]
    assert any(m.startswith("sampled 4/13 prompts x 4") for m in messages)
    assert any(m.startswith("exported to ") for m in messages)


@pytest.mark.slow
def test_unknown_fields_are_refused_naming_them_and_what_is_accepted(doors):
    unknown = _error(doors.r["unknown"])
    assert "unknown field 'gpuu' (did you mean 'gpu'?)" in unknown and "accepted: model, dataset" in unknown
    nested = _error(doors.r["nested_unknown"])
    assert "rewards.0: unknown field 'wieght' (did you mean 'weight'?); accepted: name, params, weight" in nested
    # The old nested call shape is refused, not half-understood.
    assert "unknown field 'request'" in _error(doors.r["wrapped"])
    assert "unknown field 'verbose'" in _error(doors.r["no_args"])
    assert not list((doors.ws / "runs").glob("*tiny*"))  # nothing was emitted by the refused calls


@pytest.mark.slow
def test_bad_files_huge_strings_and_bad_values_get_one_message_naming_the_field(doors):
    binary = str(doors.binary)
    assert f"config_path: {binary} is not UTF-8 text" in _error(doors.r["binary"])
    assert f"config_path: {binary} is not UTF-8 text" in _error(doors.r["binary_plan"])
    huge = _error(doors.r["huge"])
    assert "source: String should have at most 4096 characters" in huge and len(huge) < 300
    long_name = _error(doors.r["long_name"])
    assert (
        "run: has a name of 300 bytes ('yyyy" in long_name
        and "no file or directory name is longer than 255" in long_name
    )
    assert "num_gpus: Input should be a valid integer" in _error(doors.r["wrong_type"])
    assert "timeout_s: Input should be greater than or equal to 0" in _error(doors.r["negative"])
    # A list or object sent as a JSON string (some clients do) is read as JSON, as the SDK does.
    assert _ok(doors.r["json_string"])["target"]


@pytest.mark.slow
def test_every_cli_command_not_run_elsewhere(doors):
    env = doors.env
    proc, runs = run_cli_json("list-runs", env=env)
    assert proc.returncode == 0 and {x["run"]: x["state"] for x in runs["runs"]}[doors.run.name] == "stopped"
    proc, stop = run_cli_json("stop-training", str(doors.run), env=env)
    assert proc.returncode == 0 and stop["state"] == "stopped" and "nothing to stop" in stop["message"]
    proc, resume = run_cli_json("resume-training", str(doors.run), env=env)
    assert proc.returncode == 1 and resume["refusals"][0]["gate"] == "checkpoint"

    refused = run_cli("export-model", str(doors.same), env=env)
    assert refused.returncode == 2 and "promote_checkpoint judged this checkpoint REJECT" in refused.stderr
    assert "promote_checkpoint first" not in refused.stderr  # it was run (walk 11)
    assert "(CLI: --allow-unpromoted)" in refused.stderr  # the flag this door takes, not only the MCP field (walk 9)
    # The MCP session exported it already: nothing is overwritten unless the earlier export is archived first.
    proc, export = run_cli_json("export-model", str(doors.same), "--allow-unpromoted", "--archive-previous", env=env)
    assert (
        proc.returncode == 0 and export["smoke_identical"] and Path(export["export_dir"], "model.safetensors").is_file()
    )
    assert Path(export["archived_previous"], "model.safetensors").is_file()


@pytest.mark.slow
def test_cli_bad_file_is_one_line_not_a_traceback(doors):
    proc = run_cli("validate-config", str(doors.binary), env=doors.env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: config_path: {doors.binary} is not UTF-8 text "
                                                "(invalid start byte at byte 128)"]
    proc = run_cli("training-status", "z" * 5000, env=doors.env)
    assert (
        proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "at most 4096 characters" in proc.stderr
    )


def _hand_edited_run(root: Path) -> tuple[Path, Path]:
    """A run whose files a person edited badly: config not UTF-8, request a list, a misspelt reward field. Its
    samples stand for the sampler's (signed as it signs them), so each door names the file edited by hand."""
    from support import sign_samples

    run = root / "runs" / "2026-01-01-edited"
    (run / "train").mkdir(parents=True)
    (run / "inspection").mkdir()
    (run / "train" / "config.yaml").write_bytes(b"\xff\xfe learning_rate: 1")
    (run / "train" / "request.json").write_text("[1, 2]")
    (run / "train" / "rewards.json").write_text('[{"nme": "format_reward"}]')
    samples = run / "inspection" / "samples.jsonl"
    samples.write_text('{"prompt_index": 0, "completion": "x"}\n')
    sign_samples(run)
    return run, samples


@pytest.mark.slow
def test_hand_edited_run_files_get_a_message_naming_the_file(doors):
    run = doors.edited
    status, rewards, samples = (doors.r[k] for k in ("edited_status", "edited_rewards", "edited_samples"))
    assert f"run: {run}/train/request.json must hold a mapping of fields in JSON, got list" in _error(status)
    assert (f"rewards: {run}/train/rewards.json is not a list of reward specs {{name, params, weight}}: "
            "unknown field 'nme' (did you mean 'name'?)") in _error(rewards)
    assert f"run: {run}/inspection/samples.jsonl:2 is not JSON" in _error(samples)
    (run / "train" / "request.json").write_text("{}")
    proc = run_cli("training-status", str(run), env={"LLM_FINETUNING_WORKSPACE": str(run.parents[1])})
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"error: run: {run}/train/config.yaml is not UTF-8 text (invalid start byte at byte 0)"]


def test_an_unexpected_failure_reads_as_one_line_with_its_type_and_text():
    from mcp_server.errors import describe_failure

    assert describe_failure(KeyError("name")) == "unexpected KeyError: 'name'"
    too_long = describe_failure(OSError(36, "File name too long", "x" * 1000))
    assert too_long.endswith("... (1000 characters): File name too long") and len(too_long) < 300
    assert len(describe_failure(RuntimeError("y" * 1_000_000))) < 2100
