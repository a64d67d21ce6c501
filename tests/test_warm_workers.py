"""The warm workers, through the real doors: the MCP server warms its training interpreter at start, and the CLI's
light checks go to one per-user daemon that later calls reuse, ends when idle and leaves nothing behind.
The time they save is measured in bench/bench_warm_worker.py and bench/bench_diagnose_cli.py, never here."""

from __future__ import annotations

import pytest
import asyncio
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from conftest import ROOT, call_mcp, checkout_env
from support import write_signed_lines

WAIT_S = 600  # a generous bound for a loaded machine: the checks wait for a state, they never time it


def wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"never happened: {what}")


def wrapper_python(folder: Path, body: str | None = None) -> Path:
    """Another training interpreter (as a person's own venv would be): a script that runs this Python."""
    python = folder / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(body or f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return python


def workers_of(workspace: Path) -> list[psutil.Process]:
    """Worker processes (stdio worker or daemon) whose calls ran for this workspace, or that were started here."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "mcp_server.worker" not in cmdline or cmdline.split()[0].endswith("bwrap"):  # bwrap: where it is apart
            continue
        try:
            if str(workspace) in proc.environ().get("LLM_FINETUNING_WORKSPACE", ""):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.mark.slow
def test_server_warms_its_worker_before_any_call(tmp_path):
    """A light server (its training interpreter another Python) starts that interpreter's workers at start (the
    keyless one runs the reward checks) and has them import TRL while no call has come; the first validation is
    then answered by those same processes."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    other = wrapper_python(tmp_path / "other-env")
    env = checkout_env({"LLM_FINETUNING_WARM_UP": "1", "LLM_FINETUNING_PYTHON": str(other),
                        "LLM_FINETUNING_WORKSPACE": str(tmp_path)})
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server"], cwd=str(ROOT), env=env)

    def warmed() -> list[int] | None:  # the keyed worker and the keyless one (worker_keyless), both
        pids = [p.pid for p in workers_of(tmp_path) if p.memory_info().rss > 300e6]  # TRL, torch...: hundreds of MB
        return sorted(pids) if len(pids) == 2 else None

    async def session():
        async with Client(params) as client:
            tools = await client.list_tools()
            worker = wait_for(warmed, "both workers with TRL imported")
            result = await client.call_tool("validate_grpo_config", {"config": {
                "model_name_or_path": "Qwen/Qwen2.5-0.5B", "reward_funcs": ["accuracy_reward"],
                "learning_rate": 1e-6, "num_generations": 4, "per_device_train_batch_size": 4}, "gpu": "H100"})
            return tools, worker, result, workers_of(tmp_path)

    tools, worker, result, after = asyncio.run(session())
    assert "validate_grpo_config" in {t.name for t in tools.tools}
    assert not result.is_error and result.structured_content["valid"], result
    assert sorted(p.pid for p in after) == worker  # the warmed workers answered: no other one started


def test_the_warm_up_rehearses_a_validation_through_the_door(workspace):
    """The warm-up's rehearsal runs validate_grpo_config as a client's call does (the SDK's tool call, the result
    model validated and dumped, the answer shaped for each protocol version) and gets the tool's own answer: a break
    here would otherwise go unseen, since the warm-up only logs its failures at debug level."""
    from mcp_server.memory.verdict import validate_config
    from mcp_server.recipe.models import ValidateRequest
    from mcp_server.server import REHEARSAL, rehearse_first_call

    result = rehearse_first_call()
    assert not result.is_error, result.content
    direct = validate_config(ValidateRequest(**REHEARSAL[1])).model_dump(mode="json")
    assert result.structured_content == direct and direct["valid"]
    assert json.loads(result.content[0].text) == direct


def _hello(path: Path) -> dict:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(path))
        conn.sendall(b'{"hello": 1}\n')
        return json.loads(conn.makefile().readline())


def _cli(args: list[str], env: dict, cwd: Path, importtime: bool = False) -> subprocess.CompletedProcess:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "mcp_server.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=WAIT_S)


def _imported_trl(stderr: str) -> bool:
    return any(line.rstrip().endswith("| trl") for line in stderr.splitlines() if line.startswith("import time:"))


def _progress_log(path: Path) -> None:
    path.parent.mkdir(parents=True)
    rows = [{"step": s, "loss": math.nan if 20 <= s < 24 else 0.01, "lr": 5e-7, "reward": 0.5, "reward_std": 0.3,
             "kl": 0.001, "entropy": 0.8, "grad_norm": 0.5, "completion_mean_length": 120.0}
            for s in range(1, 41)]
    write_signed_lines(path, rows)  # as the trainer signs them: a run's own unsigned lines are not read


def short_runtime_dir(tmp_path: Path) -> Path:
    """A runtime folder with a short path (a unix socket's path is at most ~104 bytes; pytest's are long)."""
    runtime = Path(tempfile.mkdtemp(prefix="rt-"))
    (tmp_path / "runtime").symlink_to(runtime)  # for the record only
    return runtime


@pytest.mark.slow
def test_cli_checks_go_to_one_warm_worker_that_ends_when_idle(tmp_path):
    runtime = short_runtime_dir(tmp_path)
    env = checkout_env({"LLM_FINETUNING_CLI_WORKER": "1", "XDG_RUNTIME_DIR": str(runtime),
                        "LLM_FINETUNING_WORKER_IDLE_S": "600", "LLM_FINETUNING_WORKSPACE": str(tmp_path)})
    env.pop("LLM_FINETUNING_PYTHON", None)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nreward_funcs: [accuracy_reward]\nlearning_rate: 5e-7\n"
                    "num_generations: 4\nper_device_train_batch_size: 4\n")
    # TRL's parser reads "0" as 0 and cannot read "many" as an int: judged by what its parser makes of them.
    bad.write_text(good.read_text() + "max_completion_length: '0'\nnum_iterations: many\n")

    first = _cli(["validate-config", str(bad), "--json"], env, tmp_path)
    sockets = list((runtime / "llm-finetuning").glob("worker-*.sock"))
    assert len(sockets) == 1, (first.stderr, sockets)
    daemon = _hello(sockets[0])["pid"]
    assert daemon != os.getpid() and psutil.pid_exists(daemon)
    # The same verdict as without the worker, field by field.
    alone = _cli(["validate-config", str(bad), "--json"], {**env, "LLM_FINETUNING_CLI_WORKER": "0"}, tmp_path)
    assert first.returncode == alone.returncode == 1, first.stdout + first.stderr
    assert json.loads(first.stdout) == json.loads(alone.stdout)
    found = {(f["code"], f["field"]) for f in json.loads(first.stdout)["findings"]}
    assert ("out_of_range", "max_completion_length") in found and any(f == "num_iterations" for _, f in found)

    # A repeated call reuses the daemon, and the CLI's own process never imports TRL; the parser the bad config
    # went through keeps none of its values.
    again = _cli(["validate-config", str(good), "--json"], env, tmp_path, importtime=True)
    assert again.returncode == 0 and json.loads(again.stdout)["valid"], again.stdout
    assert not _imported_trl(again.stderr) and _hello(sockets[0])["pid"] == daemon

    # diagnose-run validates its patches through it too.
    run = tmp_path / "runs" / "2026-01-01-nan"
    _progress_log(run / "train" / "logs" / "progress.jsonl")
    diagnosed = _cli(["diagnose-run", str(run), "--json"], env, tmp_path, importtime=True)
    patched = [f for f in json.loads(diagnosed.stdout)["findings"] if f["patch"]]
    assert patched and all(f["patch_valid"] is not None for f in patched), diagnosed.stdout
    assert not _imported_trl(diagnosed.stderr) and _hello(sockets[0])["pid"] == daemon

    # A daemon killed outright leaves a dead socket: the next call replaces it (with a short idle time).
    os.kill(daemon, signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == psutil.STATUS_ZOMBIE,
             "the killed daemon gone")
    third = _cli(["validate-config", str(good), "--json"], {**env, "LLM_FINETUNING_WORKER_IDLE_S": "3"}, tmp_path)
    assert third.returncode == 0, third.stderr
    # found by its command line, not by a hello: on a loaded machine its 3 s of idle can end before one connects
    serving = [p.pid for p in psutil.process_iter(["cmdline"])
               if str(sockets[0]) in (p.info["cmdline"] or []) and "mcp_server.worker_daemon" in p.info["cmdline"]]
    replacement = next(iter(serving), None)
    assert replacement != daemon and (replacement is not None or not sockets[0].exists()), serving

    # Idle: it ends by itself and removes its socket and log.
    wait_for(lambda: replacement is None or not psutil.pid_exists(replacement), "the idle daemon ending")
    assert list((runtime / "llm-finetuning").iterdir()) == []
    shutil.rmtree(runtime)


@pytest.mark.slow
def test_a_worker_that_cannot_start_leaves_nothing_and_the_verdict_says_why(tmp_path):
    runtime = short_runtime_dir(tmp_path)
    broken = wrapper_python(tmp_path / "broken-env", "#!/bin/sh\necho 'no such environment' >&2\nexit 3\n")
    env = checkout_env({"LLM_FINETUNING_CLI_WORKER": "1", "XDG_RUNTIME_DIR": str(runtime),
                        "LLM_FINETUNING_PYTHON": str(broken), "LLM_FINETUNING_WORKSPACE": str(tmp_path)})
    config = tmp_path / "config.yaml"
    config.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nreward_funcs: [accuracy_reward]\n")
    proc = _cli(["validate-config", str(config), "--json"], env, tmp_path)
    # The rules that need no TRL ran; the finding says TRL's did not, and why.
    skipped = [f for f in json.loads(proc.stdout)["findings"] if f["code"] == "trl_checks_skipped"]
    assert skipped and "exited (code 3)" in skipped[0]["message"]
    alone = _cli(["validate-config", str(config), "--json"], {**env, "LLM_FINETUNING_CLI_WORKER": "0"}, tmp_path)
    assert [(f["code"], f["field"]) for f in json.loads(alone.stdout)["findings"]] == [
        (f["code"], f["field"]) for f in json.loads(proc.stdout)["findings"]]
    assert list((runtime / "llm-finetuning").iterdir()) == []
    shutil.rmtree(runtime)


@pytest.mark.slow
@pytest.mark.parametrize("daemon", ["1", "0"])
def test_the_first_emit_says_what_it_loads_before_the_training_interpreter_runs(tmp_path, tiny_model, daemon):
    """Issue 49: the first emit-config in a fresh environment printed nothing for 86 s (the training interpreter
    importing torch, transformers and TRL). Its first stderr line now says what it loads and about how long, and
    it says so before that interpreter runs anything: the interpreter here waits for a file the test writes only
    once the line is read (by order, never by time), then the command finishes VALID."""
    runtime, gate = short_runtime_dir(tmp_path), tmp_path / "go"
    python = wrapper_python(tmp_path / "env", f'#!/bin/sh\nwhile [ ! -e "{gate}" ]; do sleep 0.1; done\n'
                                              f'exec "{sys.executable}" "$@"\n')
    env = checkout_env({"LLM_FINETUNING_CLI_WORKER": daemon, "XDG_RUNTIME_DIR": str(runtime),
                        "LLM_FINETUNING_WORKER_IDLE_S": "1", "LLM_FINETUNING_WORKSPACE": str(tmp_path),
                        "LLM_FINETUNING_PYTHON": str(python)})
    proc = subprocess.Popen([sys.executable, "-m", "mcp_server.cli", "emit-config", "--model", "tiny", "--dataset",
                             "tiny", "--gpu", "cpu", "--run-name", "first"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = []
        reader = threading.Thread(target=lambda: first.append(proc.stderr.readline()), daemon=True)
        reader.start()
        reader.join(WAIT_S)  # the interpreter cannot run before the gate: a line now came before it
        assert first and first[0].startswith("llm-finetuning: loading torch, transformers and TRL"), first
        assert str(python) in first[0] and "about a minute" in first[0], first
        gate.touch()
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        gate.touch()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out + err
    assert "VALID for CPU" in out and "loading torch" not in err, err  # said once
    wait_for(lambda: not list((runtime / "llm-finetuning").glob("worker-*")), "the idle daemon ending")
    shutil.rmtree(runtime)


@pytest.mark.slow
def test_a_reward_edited_between_two_calls_of_one_server_scores_with_its_new_code(workspace, tiny_model):
    """The server's worker lives across calls and keeps what it imported: a reward module (or a helper it imports)
    edited after a first inspection was scored with its old code by the next, while the review hashed the new file.
    Each call of the worker imports the bytes the files hold then (rewards.source_only keys what it keeps on their
    sha256), as a fresh process would: the helper's edit keeps its size (no size or mtime tells it apart), and the
    reward module itself unchanged then still imports the new helper."""
    from mcp_server.inspection.models import InspectRequest
    from mcp_server.inspection.review import inspect_rewards
    from support import hand_made_run

    tag = str(abs(hash(str(workspace))))[:8]
    helper, reward = workspace / f"warmhelp_{tag}.py", workspace / f"warmrew_{tag}.py"
    helper.write_text("VALUE = 1.0\n")
    code = (f"from warmhelp_{tag} import VALUE\n\n\ndef scored(completions, **kwargs):\n"
            "    return [VALUE for _ in completions]\n")
    reward.write_text(code)
    run_dir = hand_made_run(workspace, tiny_model, "warm", [["a", "b", "c", "d"]] * 13, ["2"] * 13,
                            rewards=[{"name": f"warmrew_{tag}.scored"}])
    edits = [None, (helper, "VALUE = 0.5\n"), (reward, code.replace("[VALUE for", "[3 * VALUE for"))]
    reviews = []

    async def calls(client):
        for edit in edits:
            if edit:
                edit[0].write_text(edit[1])
            result = await client.call_tool("inspect_rewards", {"run": str(run_dir)})
            assert not result.is_error, result
            data = result.structured_content
            total = next(d for d in data["distributions"] if d["name"] == "total")
            reviews.append((total["mean"], data["reward_code_sha256"]))

    asyncio.run(call_mcp(calls, env={"LLM_FINETUNING_WORKSPACE": str(workspace)}))
    assert [mean for mean, _ in reviews] == [1.0, 0.5, 1.5], reviews
    assert len({sha for _, sha in reviews}) == 3, reviews  # each review hashed the code that scored it
    fresh = inspect_rewards(InspectRequest(run=str(run_dir)))  # this process never imported them: the files now
    assert fresh.reward_code_sha256 == reviews[-1][1]


@pytest.mark.slow
def test_a_command_whose_own_worker_loads_trl_says_so_before_it_starts(tmp_path, tiny_model):
    """Walk 13: sample-completions was silent for 15-28 s, its first line a blank `datasets` progress bar, though
    the README says the first command needing TRL says at once what it loads. A command whose work runs in its own
    worker (evaluation here, as sampling, promotion and export) says it before that interpreter runs anything (the
    interpreter waits for a file the test writes only once the line is read: by order, never by time)."""
    gate = tmp_path / "go"
    python = wrapper_python(tmp_path / "env", f'#!/bin/sh\nwhile [ ! -e "{gate}" ]; do sleep 0.1; done\n'
                                              f'exec "{sys.executable}" "$@"\n')
    goldens = tmp_path / "goldens.jsonl"
    goldens.write_text("".join(json.dumps({"prompt": f"Say {i}.", "answer": str(i)}) + "\n" for i in range(2)))
    env = checkout_env({"LLM_FINETUNING_WORKSPACE": str(tmp_path), "LLM_FINETUNING_PYTHON": str(python)})
    proc = subprocess.Popen([sys.executable, "-m", "mcp_server.cli", "evaluate-model", "tiny", "--goldens",
                             str(goldens), "--max-new-tokens", "4"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = []
        reader = threading.Thread(target=lambda: first.append(proc.stderr.readline()), daemon=True)
        reader.start()
        reader.join(WAIT_S)
        assert first and first[0].startswith("llm-finetuning: starting the training interpreter"), first
        assert str(python) in first[0] and "torch, transformers and TRL" in first[0], first
    finally:
        gate.touch()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
