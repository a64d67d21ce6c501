"""Shared fixtures: the offline tiny model, an isolated workspace, and the two doors (CLI and MCP stdio)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import pytest

# Nothing in the tests may reach a hub.
for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# No warm workers unless a test asks: each CLI call does its own work (no daemon outlives the suite) and a
# server imports TRL only when a call needs it (hundreds of short sessions would each pay the import in the
# background). tests/test_warm_workers.py turns both on where it checks them.
os.environ.setdefault("LLM_FINETUNING_CLI_WORKER", "0")
os.environ.setdefault("LLM_FINETUNING_WARM_UP", "0")
# Nothing the suite builds (the tiny model, warm-started models) is read from or left in ~/.cache: a cache
# per session, set before anything builds and inherited by every child process (CLI, MCP server, training).
_CACHE = tempfile.mkdtemp(prefix="llm-finetuning-test-cache-")
os.environ["LLM_FINETUNING_CACHE"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
# The evidence key (mcp_server/evidence.py) is never read from or made in the real home: a key folder per session,
# made here (the tests hold the key: they sign the runs they construct) and inherited by every child process.
_STATE = tempfile.mkdtemp(prefix="llm-finetuning-test-state-")
os.environ["LLM_FINETUNING_STATE_DIR"] = _STATE
atexit.register(shutil.rmtree, _STATE, ignore_errors=True)
from mcp_server.evidence import key as _evidence_key  # noqa: E402 - after the folder is chosen

_evidence_key(create=True)
# `make test` runs the suite in TEST_JOBS pytest-xdist workers on a machine of as many cores: each worker's torch,
# and the training, sampling and evaluation processes it starts, compute on one thread (OMP_NUM_THREADS=1, read by
# torch at import), so the workers never ask for more threads than there are cores. A test that sets its own
# OMP_NUM_THREADS keeps it; one process (no xdist) keeps torch's default.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# The one exception: the real model `smollm2-135m` (mcp_server/smollm2.py), a 517 MB float32 conversion that takes
# about a minute, is built once per machine, in the system's temporary directory (never ~/.cache), keyed by the
# wheel's pinned sha256 and built atomically, so a session reuses an earlier one's and never sees half of one.
os.environ.setdefault("LLM_FINETUNING_MODEL_CACHE",
                      str(Path(tempfile.gettempdir()) / f"llm-finetuning-test-models-{os.getuid()}"))

pytest_plugins = ["pytester"]  # tests/test_suite.py runs the lane guard in a session of its own

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# A dotted-path reward the untrained tiny model can earn (fixtures/rewards/fixture_rewards.py), importable here
# and in every child process (CLI, MCP server, worker, training).
FIXTURE_REWARDS = Path(__file__).resolve().parent / "fixtures" / "rewards"
sys.path.insert(0, str(FIXTURE_REWARDS))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FIXTURE_REWARDS), os.environ.get("PYTHONPATH")]))
ANY_TEXT_REWARDS = [{"name": "fixture_rewards.nonempty_reward", "params": {}, "weight": 1.0}]


def skip_unless_ci(reason: str) -> NoReturn:
    """Skip for a missing tool or network here, but fail under CI (env `CI` set, as `.ci/run` does), where a
    skip would hide that the check never ran."""
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason} (CI is set: this check must run there, so a missing prerequisite is a failure)",
                    pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The embedded tiny model, built once per session into the session's cache (LLM_FINETUNING_CACHE)."""
    from mcp_server.tiny import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture()
def workspace(tmp_path, monkeypatch) -> Path:
    """An empty workspace root; core calls and child processes write under it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(ws))
    return ws


def checkout_env(env: dict | None = None) -> dict:
    """os.environ plus `env`, with this checkout first on PYTHONPATH: a child process imports the code under
    test, not whatever `mcp_server` the interpreter's site-packages point at (another checkout's editable
    install, an older wheel)."""
    merged = {**os.environ, **(env or {})}
    merged["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), merged.get("PYTHONPATH")]))
    return merged


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600,
            process: bool = False):
    """This checkout's CLI; returns CompletedProcess (text). In this process (cli_here: the same parser, core and
    exit codes, without a Python start-up and the core's imports each time) unless `process`, for a test of what
    the process boundary does: `python -m mcp_server.cli`, the code the in-process tests import (the installed
    console script is tested once in test_cli.py)."""
    if not process:
        return cli_here(*args, env=env, cwd=cwd)
    return subprocess.run(
        [sys.executable, "-m", "mcp_server.cli", *args], cwd=cwd, env=checkout_env(env), capture_output=True,
        text=True, timeout=timeout,
    )


def cli_here(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """This checkout's CLI called in this process (`cli.main`), for tests where the process boundary is not what
    is tested: the same parser, core and exit codes as `run_cli` without a Python start-up and the core's imports
    (a second or more per call). `env` is set for the call and restored after."""
    import contextlib
    import io

    from mcp_server import cli

    out, err = io.StringIO(), io.StringIO()
    saved = {key: os.environ.get(key) for key in (env or {})}
    here = Path.cwd()
    try:
        os.environ.update(env or {})
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as exc:  # argparse's refusals
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(here)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(["llm-finetuning", *args], code, out.getvalue(), err.getvalue())


def run_cli_json(*args: str, here: bool = False, **kwargs):
    """The CLI with --json, its output parsed; `here` calls it in this process (cli_here)."""
    proc = (cli_here if here else run_cli)(*args, "--json", **kwargs)
    try:
        return proc, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (rc={proc.returncode}):\nstdout={proc.stdout}\nstderr={proc.stderr}")


async def call_mcp(calls, env: dict | None = None, **client_options):
    """Start `python -m mcp_server` over stdio with the SDK's client and run `calls(client)`; `client_options` go to
    the SDK's `Client` (e.g. `logging_callback` with `log_level`)."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server"], cwd=str(ROOT), env={**os.environ, **(env or {})}
    )
    async with Client(params, **client_options) as client:
        return await calls(client)


# Lanes (issue 45). `make check` runs every test not marked `slow`, in minutes; `make test` runs them all. A test
# that starts a process (the CLI or MCP server as a child, a worker, training, the sandbox, SLURM), in its setup,
# its body or its teardown, is slow: every process start is recorded below, and a test that started one without
# the marker fails at teardown, naming what it started. LLM_FINETUNING_LANE_RECORD=FILE appends such tests' ids to
# FILE instead of failing (how the markers were first placed).
_started: list[str] | None = None  # the processes the running test started; None between tests
_popen_init, _fork = subprocess.Popen.__init__, os.fork


def _recording_popen_init(self, args, *rest, **kwargs):
    if _started is not None:
        _started.append(args if isinstance(args, (str, bytes)) else " ".join(str(a) for a in args))
    return _popen_init(self, args, *rest, **kwargs)


def _recording_fork():
    if _started is not None:
        _started.append("os.fork()")
    return _fork()


subprocess.Popen.__init__ = _recording_popen_init
os.fork = _recording_fork


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: starts a process or trains a model; `make check` leaves it out")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_HeavyFilesFirst(), "heavy-files-first")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    global _started
    _started = []
    return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    global _started
    try:
        return (yield)
    finally:
        started, _started = _started or [], None
        if started and not item.get_closest_marker("slow"):
            record = os.environ.get("LLM_FINETUNING_LANE_RECORD")
            if record:
                with open(record, "a") as out:
                    out.write(item.nodeid + "\n")
            else:
                pytest.fail(f"{item.nodeid} started {len(started)} process(es) but is not marked slow (the fast "
                            f"lane, `make check`, would run it): first {str(started[0])[:200]!r}", pytrace=False)


# `--dist loadfile` (make test) keeps each file's tests in one worker, in order: a module's fixtures (the SLURM test
# cluster, gated workspaces, trained runs) are built once and nothing one file holds is shared with another worker.
# The files are handed out longest first (HEAVY_FILES, then the rest in xdist's order: the most tests first), so no
# long file starts last while the other worker idles. HEAVY_FILES: the seconds each file took, longest first
# (`--durations=0`; bench/bench_suite.py times the command).
HEAVY_FILES = ("test_real_model.py", "test_gate_table.py", "test_user_code_apart_at_every_door.py",
               "test_harnesses.py", "test_vllm_cpu.py", "test_slurm.py", "test_diagnose.py", "test_launchers.py",
               "test_agentic.py", "test_training.py", "test_run_states.py", "test_diagnosis_logs.py",
               "test_evaluation.py", "test_worker_apart.py", "test_run_forgery.py", "test_recipe_mechanisms.py",
               "test_server_inputs.py", "test_rehearsal.py", "test_trackers.py", "test_two_pythons.py",
               "test_warm_workers.py", "test_replay.py", "test_resume_patch_acts.py", "test_first_user.py",
               "test_recipe_emit.py", "test_sampling_plan.py", "test_loaded_is_what_was_checked.py",
               "test_gate_loader.py", "test_dynamic_sampling.py", "test_gate_point_of_use.py",
               "test_recipe_doors.py", "test_baseline_of_content.py")


class _HeavyFilesFirst:
    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config, log):
        if config.getvalue("dist") != "loadfile":
            return None
        from collections import OrderedDict

        from xdist.scheduler import LoadFileScheduling

        rank = {name: i for i, name in enumerate(HEAVY_FILES)}

        class HeaviestFirst(OrderedDict):  # xdist's queue of files: it takes the next one with popitem(last=False)
            def popitem(self, last=True):
                scope = min(self, key=lambda path: rank.get(path.rsplit("/", 1)[-1], len(rank)))  # ties: queue order
                return scope, self.pop(scope)

        scheduler = LoadFileScheduling(config, log)
        scheduler.workqueue = HeaviestFirst()
        return scheduler
