"""A NOT VALID emission writes nothing, whatever its errors (issue 49: "a NOT VALID emission still creates a run
directory"). Until then one whose errors were of sizing for the target (memory_does_not_fit,
dataset_smaller_than_generation_batch), or of the request but not one TRL refuses (`--override beta=-1`), kept
its run directory, and list-runs showed it as not_launched; an emission into a person's folder kept its files there.
The table: an error of each class x a new run or a person's existing folder (empty but for their notes, or a run
emitted valid there before) x the CLI and MCP doors. Each leaves the workspace as it was, byte for byte, and its
result carries the findings, the config it would have written and how to get a run. The memory row follows that
advice: the lever plan_memory names for the result's config, as overrides, emits a valid run.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from conftest import ANY_TEXT_REWARDS, call_mcp, cli_here
from support import TINY_OVERRIDES

TINY = {"model": "tiny", "dataset": "tiny", "gpu": "cpu", "rewards": ANY_TEXT_REWARDS, "overrides": TINY_OVERRIDES}
# error class -> (the request, as emit_grpo_config takes it, the only error it meets)
CLASSES = {
    "request": ({**TINY, "overrides": {**TINY_OVERRIDES, "beta": -1}}, "out_of_range"),
    # vLLM pinned at 0.95 of a T4: no room left to train (tests/test_memory_launch.py)
    "memory": ({"model": "Qwen/Qwen2.5-7B-Instruct", "dataset": "tiny", "gpu": "T4", "finetune": "qlora",
                "overrides": {"use_vllm": True, "vllm_gpu_memory_utilization": 0.95}}, "memory_does_not_fit"),
    # 8 GPUs x 16 per device x 4 accumulation steps: 64 prompts per generation batch of groups of 4 > the tiny task's
    "data": ({**TINY, "gpu": "A100", "num_gpus": 8, "overrides": {**TINY_OVERRIDES, "gradient_accumulation_steps": 4,
                                                                   "per_device_train_batch_size": 16}},
             "dataset_smaller_than_generation_batch"),
}
FOLDERS = ("new run", "own folder", "emitted run")


def cli_args(request: dict) -> list[str]:
    args = ["emit-config"]
    for key, value in request.items():
        if key == "overrides":
            args += [arg for k, v in value.items() for arg in ("--override", f"{k}={json.dumps(v)}")]
        else:
            args += [f"--{key.replace('_', '-')}", value if isinstance(value, str) else json.dumps(value)]
    return args


def snapshot(root: Path) -> dict:
    """Every path under `root`: a folder's mode, a file's mode and bytes, a link's target."""
    return {str(p.relative_to(root)): (p.lstat().st_mode, p.readlink() if p.is_symlink() else
                                       None if p.is_dir() else p.read_bytes())
            for p in sorted(root.rglob("*"))}


def prepare(workspace: Path, folder: str) -> dict:
    """The request's run_dir for `folder` (none for a new run): a person's folder holding only their notes, or one
    a valid emission wrote into before (so the NOT VALID one writes over an emission's own files)."""
    if folder == "new run":
        return {"run_name": "bad"}
    mine = workspace / "mine"
    mine.mkdir()
    (mine / "notes.md").write_text("my notes\n")
    if folder == "emitted run":
        proc = cli_here(*cli_args(TINY), "--run-dir", str(mine), env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
        assert proc.returncode == 0 and (mine / "train" / "config.yaml").is_file(), proc.stdout + proc.stderr
    return {"run_dir": str(mine)}


def check(result: dict, code: str, folder: str, before: dict, workspace: Path) -> None:
    errors = [f["code"] for f in result["validation"]["findings"] if f["severity"] == "error"]
    assert errors == [code], result["validation"]["findings"]
    assert snapshot(workspace) == before, (folder, sorted(set(snapshot(workspace)) ^ set(before)))
    where = "no run directory was created" if folder == "new run" else f"{result['run_dir']} is as it was"
    assert result["kept"].startswith(f"NOT VALID: nothing was written ({where}"), result["kept"]
    assert "emit again" in result["kept"], result["kept"]
    assert result["config"] and result["config"]["model_name_or_path"], result  # what it would have written


@pytest.mark.parametrize("folder", FOLDERS)
@pytest.mark.parametrize("error", list(CLASSES))
def test_a_not_valid_emission_through_the_cli_leaves_the_workspace_as_it_was(workspace, tiny_model, error, folder):
    request, code = CLASSES[error]
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    where = prepare(workspace, folder)
    before = snapshot(workspace)
    proc = cli_here(*cli_args({**request, **where}), "--json", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    check(json.loads(proc.stdout), code, folder, before, workspace)
    human = cli_here(*cli_args({**request, **where}), env=env)
    assert human.returncode == 1 and "GRPO config not emitted" in human.stdout, human.stdout
    assert "run dir:" not in human.stdout and snapshot(workspace) == before
    listed = json.loads(cli_here("list-runs", "--json", env=env).stdout)
    assert "bad" not in json.dumps(listed), listed


def test_the_memory_lever_plan_memory_names_for_the_result_emits_a_run(workspace):
    """What a kept run was for (plan_memory's levers, then a run that fits), with nothing kept: plan_memory given
    the result's config on the same target names the lever, and emitting again with it as overrides writes a valid
    run (through the CLI, as a person would)."""
    request, _ = CLASSES["memory"]
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    result = json.loads(cli_here(*cli_args({**request, "run_name": "t4"}), "--json", env=env).stdout)
    assert not result["validation"]["valid"] and not Path(result["run_dir"]).exists()
    proc = cli_here("plan-memory", "--request", json.dumps({"config": result["config"], "gpu": "T4"}), "--json",
                    env=env)
    patch = json.loads(proc.stdout)["recommended"]["patch"]
    fix = next(f["fix"] for f in result["validation"]["findings"] if f["code"] == "memory_does_not_fit")
    assert str(patch) in fix, (patch, fix)  # the finding names the same lever
    again = {**request, "overrides": {**request["overrides"], **patch}, "run_name": "t4"}
    proc = cli_here(*cli_args(again), "--json", env=env)
    fixed = json.loads(proc.stdout)
    assert proc.returncode == 0 and fixed["validation"]["valid"] and fixed["kept"] is None, fixed["validation"]
    assert Path(fixed["config_path"]).is_file()


@pytest.mark.slow
def test_a_not_valid_emission_over_mcp_leaves_the_workspace_as_it_was(workspace, tiny_model):
    """Each class into a new run and into a folder a valid emission wrote, in one server session."""
    (workspace / "mine").mkdir()
    (workspace / "mine" / "notes.md").write_text("my notes\n")
    cases = [(error, folder) for error in CLASSES for folder in ("new run", "emitted run")]

    async def calls(client):
        first = await client.call_tool("emit_grpo_config", {**TINY, "run_dir": str(workspace / "mine")})
        assert not first.is_error and first.structured_content["validation"]["valid"], first.content
        out = []
        for error, folder in cases:
            before = snapshot(workspace)
            where = {"run_name": "bad"} if folder == "new run" else {"run_dir": str(workspace / "mine")}
            answer = await client.call_tool("emit_grpo_config", {**CLASSES[error][0], **where})
            out.append((error, folder, before, answer))
        return out

    answers = asyncio.run(call_mcp(calls, env={"LLM_FINETUNING_WORKSPACE": str(workspace)}))
    assert len(answers) == len(cases)
    for error, folder, before, answer in answers:
        assert not answer.is_error, (error, answer.content)
        check(answer.structured_content, CLASSES[error][1], folder, before, workspace)
