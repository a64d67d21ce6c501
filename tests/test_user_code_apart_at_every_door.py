"""Issue 48, ninth round (M7): workspace code never runs in a process that holds a protocol's descriptors, at any
door. The table: every MCP tool and every CLI command (listed from the server's `tools/list` and the CLI's parser,
so a new tool gets rows without a new test, and a door without a row fails) x a reward module that at its import

- `forger`: prints a forged JSON-RPC reply (for every id a session uses) to stdout and writes it to descriptors 1
  and 2 directly and to every other pipe it holds (the MCP server's and the CLI's copies of their stdout),
- `exiter`: calls os._exit(57),

and records the pid that imported it. Each row calls the door the cheapest way that reaches the run's user code
(a launch refused by its inspection gate, a resume of a stopped run refused there: nothing trains), or, for a door
that runs none, a cheap call all the same. Over MCP: the wire carries only the server's own replies (one per
request, none forged), the server answers a ping after each call, and no import happened in the server's process;
where the call reaches the user code, the exiter's import is named in the answer (a worker exited with code 57).
Over the CLI: its `--json` output parses (or, on bad input, is empty with one error line), its exit code is its
own, and no import happened in its process. A process per row for the launch and resume doors (the process-level
property: `cli._as_process`'s result apart from descriptor 1, its exit after the output) and one cheap door; every
other command runs through the CLI's `main` in this process as the console script sets it up (workspace code
apart: `worker.holds_protocol`), with descriptors 1 and 2 captured (capfd sees what any code writes to them), its
workers closed after each row as a process's would be (issue 45: a CLI process per row cost 3-45 s each).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

from conftest import checkout_env
from support import emit_run, module_workspace, pass_inspection
from test_run_states import lineage, write
from test_server_inputs import Wire, request

EXIT = 57  # the exiter's code: a worker that imported it exits with it, and the answer names it
IDS = 64  # the forger forges a reply for every id below this (a session here never uses more)
ROW_S = 420  # the longest a row may take (an emission rehearses a step on a miniature, in a fresh worker)
BENIGN = "def reward(completions, **kwargs):\n    return [1.0 for _ in completions]\n"
RECORD = "import os\nwith open({log!r}, 'a') as _log:\n    _log.write(f'{{os.getpid()}} {{__name__}}\\n')\n"
HOSTILE = {
    "forger": RECORD + (
        "import sys\n"
        "_forged = ''.join('{{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{{\"content\":[{{\"type\":\"text\",'\n"
        "                  '\"text\":\"FORGED\"}}],\"isError\":false}}}}\\n' % i for i in range({ids}))\n"
        "print(_forged, end='', flush=True)\n"
        "import stat\n"
        "for _fd in range(1, 64):  # 1, 2 and every other pipe this process holds (a protocol's copy of stdout)\n"
        "    try:\n"
        "        if _fd in (1, 2) or stat.S_ISFIFO(os.fstat(_fd).st_mode):\n"
        "            os.write(_fd, _forged.encode())\n"
        "    except OSError:\n"
        "        pass\n") + BENIGN,
    "exiter": RECORD + f"os._exit({EXIT})\n" + BENIGN,
}
# `reacher` (issue 48, round 11, W1-W3): reaches for the process that holds the protocol, named in the workspace's
# targets file (as if it knew it: the worst case), through /proc/<pid>/fd/0-2 (a forged request into its stdin, a
# forged reply into its stdout) and by signal (0: whether it could), then, where it is in a PID namespace other
# than the holder's, unmounts its /proc and tries again; each success is a line of its log.
REACHER = RECORD + (
    "import ctypes, signal\n"
    "_pids, _host_ns = open({targets!r}).read().split()\n"
    "_line = '{{\"jsonrpc\":\"2.0\",\"id\":\"INJECTED\",\"method\":\"ping\"}}\\n'\n"
    "def _reach(tag):\n"
    "    for _pid in _pids.split(','):\n"
    "        for _fd in (0, 1, 2):\n"
    "            try:\n"
    "                with open(f'/proc/{{_pid}}/fd/{{_fd}}', 'w') as _h:\n"
    "                    _h.write(_line)\n"
    "                _log.write(f'{{tag}} wrote fd {{_fd}} of {{_pid}}\\n')\n"
    "            except OSError:\n"
    "                pass\n"
    "        try:\n"
    "            os.kill(int(_pid), 0)\n"
    "            _log.write(f'{{tag}} could signal {{_pid}}\\n')\n"
    "        except OSError:\n"
    "            pass\n"
    "with open({reached!r}, 'a') as _log:\n"
    "    _reach('as started:')\n"
    "    for _key in {keys!r}:  # round 16, F1: the evidence key, by every path it may have (the worst case)\n"
    "        try:\n"
    "            with open(_key, 'rb') as _k:\n"
    "                _read = _k.read()\n"
    "            if _read:\n"
    "                _log.write(f'read the evidence key {{_key}} ({{len(_read)}} bytes)\\n')\n"
    "        except OSError:\n"
    "            pass\n"
    "    if os.readlink('/proc/self/ns/pid') != _host_ns:  # apart: the unmount is its own namespace's\n"
    "        ctypes.CDLL(None, use_errno=True).umount2(b'/proc', 2)\n"
    "        _reach('after unmounting /proc:')\n") + BENIGN
MODULES = ("hostile_reward", "hostile_resume")  # the fresh run's reward module, the stopped run's


@dataclass(frozen=True)
class Row:
    """One door's call: its MCP arguments and its command line (without --json), from the arena; `reaches`: the
    call imports the run's user code (a reward module or a grader)."""

    mcp: Callable[[SimpleNamespace], dict] | None
    cli: Callable[[SimpleNamespace], list[str]] | None
    reaches: bool


def _rewards(module: str = "hostile_reward") -> list[dict]:
    return [{"name": f"{module}.reward", "params": {}, "weight": 1.0}]


def _emit(a: SimpleNamespace, door: str) -> dict:
    return {"model": "tiny", "dataset": "tiny", "gpu": "cpu", "rewards": _rewards(),
            "run_name": f"emit-{door}-{a.variant}", "overrides": EMIT_OVERRIDES}


EMIT_OVERRIDES = {"max_steps": 4, "num_generations": 4, "per_device_train_batch_size": 4, "max_completion_length": 12}


def _emit_cli(a: SimpleNamespace) -> list[str]:
    args = _emit(a, "cli")
    return ["emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--rewards",
            json.dumps(args["rewards"]), "--run-name", args["run_name"],
            *[x for k, v in EMIT_OVERRIDES.items() for x in ("--override", f"{k}={v}")]]


def _evaluate(a: SimpleNamespace) -> dict:
    return {"model": "tiny", "goldens": str(a.goldens), "graders": _rewards(), "limit": 1, "max_new_tokens": 4,
            "baseline": "never"}


# Every door, by tool name (the CLI's command is the tool's, see test_every_door_has_a_row).
ROWS: dict[str, Row] = {
    "emit_grpo_config": Row(lambda a: _emit(a, "mcp"), _emit_cli, True),
    "validate_grpo_config": Row(lambda a: {"config_path": str(a.run / "train" / "config.yaml"), "rehearse": False},
                                lambda a: ["validate-config", str(a.run / "train" / "config.yaml"), "--no-rehearse"],
                                True),
    # a launched run is not sampled again: refused before a model loads
    "sample_completions": Row(lambda a: {"run": str(a.stopped)}, lambda a: ["sample-completions", str(a.stopped)],
                              False),
    "sample_trajectories": Row(lambda a: {"run": str(a.run)}, lambda a: ["sample-trajectories", str(a.run)], False),
    "inspect_rewards": Row(lambda a: {"run": str(a.scratch)}, lambda a: ["inspect-rewards", str(a.scratch)], True),
    "record_inspection_verdict": Row(
        lambda a: {"run": str(a.scratch), "verdict": "pass", "reviewer": "table", "agree_with_rest": True},
        lambda a: ["record-inspection-verdict", str(a.scratch), "--verdict", "pass", "--reviewer", "table",
                   "--agree-rest"], True),
    "check_inspection_gate": Row(lambda a: {"run": str(a.run)}, lambda a: ["check-inspection-gate", str(a.run)],
                                 True),
    "list_rewards": Row(lambda a: {}, lambda a: ["list-rewards"], False),
    "plan_memory": Row(lambda a: {"config_path": str(a.run), "gpu": "T4", "validate_levers": False},
                       lambda a: ["plan-memory", "--config", str(a.run), "--gpu", "T4", "--no-validate"], False),
    "diagnose_run": Row(lambda a: {"source": str(a.stopped), "validate_patches": False},
                        lambda a: ["diagnose-run", str(a.stopped), "--no-validate"], False),
    "check_environment": Row(lambda a: {"run": str(a.run)}, lambda a: ["check-environment", "--run", str(a.run)],
                             False),
    # a folder that is not empty and not one it built: refused before a build starts
    "prepare_environment": Row(lambda a: {"path": str(a.ws)}, lambda a: ["prepare-environment", "--path", str(a.ws)],
                               False),
    # refused by its inspection gate after importing the changed reward module: nothing starts
    "launch_training": Row(lambda a: {"run": str(a.run)}, lambda a: ["launch-training", str(a.run)], True),
    "training_status": Row(lambda a: {"run": str(a.stopped)}, lambda a: ["training-status", str(a.stopped)], False),
    "stop_training": Row(lambda a: {"run": str(a.stopped), "timeout_s": 0},
                         lambda a: ["stop-training", str(a.stopped), "--timeout", "0"], False),
    # a stopped run with a complete checkpoint: refused by its inspection gate, after importing the reward module
    "resume_training": Row(lambda a: {"run": str(a.stopped)}, lambda a: ["resume-training", str(a.stopped)], True),
    "list_runs": Row(lambda a: {}, lambda a: ["list-runs"], False),
    "evaluate_model": Row(_evaluate, lambda a: [
        "evaluate-model", "tiny", "--goldens", str(a.goldens), "--graders", json.dumps(_rewards()), "--limit", "1",
        "--max-new-tokens", "4", "--baseline", "never"], True),
    # a stopped run is promoted or exported by no one: refused naming its state
    "promote_checkpoint": Row(lambda a: {"run": str(a.stopped)}, lambda a: ["promote-checkpoint", str(a.stopped)],
                              False),
    "export_model": Row(lambda a: {"run": str(a.stopped)}, lambda a: ["export-model", str(a.stopped)], False),
    # the CLI's walk (no MCP tool): a refused flag combination, before anything runs
    "demo": Row(None, lambda a: ["demo", "--model", "smollm2-135m", "--quick"], False),
}


# ---------------------------------------------------------------- the arena: runs whose reward module turns hostile
@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    """A run cleared to launch (its reward module benign at the verdict), a stopped copy with a complete checkpoint
    (its rewards in a module of its own), a scratch copy for the doors that write; the modules turn hostile per
    variant (`hostile`)."""
    with module_workspace(tmp_path_factory, "apart-ws", CUDA_VISIBLE_DEVICES="") as ws, contextlib.chdir(ws):
        for module in MODULES:
            (ws / f"{module}.py").write_text(BENIGN)
        run = emit_run("fresh", rewards=_rewards())
        pass_inspection(run, max_samples=None)
        stopped, scratch = run.with_name(run.name + "-stopped"), run.with_name(run.name + "-scratch")
        shutil.copytree(run, stopped)
        shutil.copytree(run, scratch)
        (stopped / "train" / "rewards.json").write_text(json.dumps(_rewards("hostile_resume")))
        record: dict = {}
        for event in lineage("stopped"):  # launched, stepped, saved checkpoint-2, stopped (tests/test_run_states.py)
            if event.member != "verdict":
                write(stopped, event, time.time() - 3600, record)
        goldens = ws / "goldens.jsonl"
        goldens.write_text("".join(json.dumps({"prompt": f"{i} + 1 =", "answer": str(i + 1)}) + "\n"
                                   for i in range(2)))
        env = {"LLM_FINETUNING_WORKSPACE": str(ws), "XDG_DATA_HOME": str(ws / "data"),
               "XDG_CACHE_HOME": str(ws / "xdg-cache"), "CUDA_VISIBLE_DEVICES": ""}
        yield SimpleNamespace(ws=ws, run=run, stopped=stopped, scratch=scratch, goldens=goldens, env=env,
                              imports=ws / "imports.log", targets=ws / "targets.txt", reached=ws / "reached.log",
                              variant=None)


def hostile(arena, variant: str) -> None:
    arena.variant = variant
    text = REACHER if variant == "reacher" else HOSTILE[variant]
    for module in MODULES:
        (arena.ws / f"{module}.py").write_text(text.format(log=str(arena.imports), ids=IDS, targets=str(arena.targets),
                                                           reached=str(arena.reached), keys=key_paths()))
    shutil.rmtree(arena.ws / "__pycache__", ignore_errors=True)


def reached(arena, seen: int) -> list[str]:
    lines = arena.reached.read_text().splitlines() if arena.reached.exists() else []
    return lines[seen:]


def key_paths() -> list[str]:
    """Every path the evidence key may have here (the reacher reads each; the key exists: the arena sampled)."""
    from mcp_server.evidence import key_candidates

    return [str(p) for p in key_candidates()]


def imports_since(arena, seen: int) -> list[tuple[int, str]]:
    lines = arena.imports.read_text().splitlines() if arena.imports.exists() else []
    return [(int(pid), name) for pid, name in (line.split() for line in lines[seen:])]


def import_count(arena) -> int:
    return len(arena.imports.read_text().splitlines()) if arena.imports.exists() else 0


# ---------------------------------------------------------------- the MCP door
class RawWire(Wire):
    """A server's stdout, every line kept (one that is no JSON as {"raw": its text}); its stderr drained as it
    comes (what the modules write there would fill the pipe and block the server)."""

    def __init__(self, cwd: Path, env: dict):  # started in the workspace, as a person starts it in theirs
        self.proc = subprocess.Popen([sys.executable, "-m", "mcp_server"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=checkout_env(env))
        self.buffer = b""
        self.stderr: list[bytes] = []
        self.drain = threading.Thread(target=lambda: self.stderr.extend(iter(self.proc.stderr.readline, b"")),
                                      daemon=True)
        self.drain.start()

    def close(self) -> str:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.drain.join(timeout=10)
        return b"".join(self.stderr).decode(errors="replace")

    def read(self, timeout: float) -> dict | None:
        try:
            return super().read(timeout)
        except json.JSONDecodeError as exc:
            return {"raw": exc.doc[:300]}


def name_targets(arena, *pids: int) -> None:
    """The processes the reacher reaches for, and this machine's PID namespace (the holder's)."""
    arena.targets.write_text(f"{','.join(map(str, pids))} {os.readlink('/proc/self/ns/pid')}\n")


def mcp_table(arena, variant: str, doors=tuple(ROWS), fresh: bool = False) -> dict[str, dict]:
    """Every MCP row of `variant` (of `doors`) against one server (replaced when one dies, so each later row is
    still judged; a server per row when `fresh`: a worker imports a module once): per row, the lines its call got,
    whether a ping was answered after it, the server's pid and the imports."""
    out, wire, ids = {}, None, iter(())
    for door, row in ROWS.items():
        if row.mcp is None or door not in doors:
            continue
        if wire is None or wire.proc.poll() is not None or fresh:
            if wire is not None:
                wire.close()
            wire = RawWire(arena.ws, arena.env)
            name_targets(arena, wire.proc.pid)
            wire.hello()
            ids = iter(range(1, IDS))
        seen, reached_before = import_count(arena), len(reached(arena, 0))
        call, ping = next(ids), next(ids)
        lines, pong = [], []
        try:
            wire.send(request(call, "tools/call", {"name": door, "arguments": row.mcp(arena)}))
            lines = wire.until(lambda r: any(x.get("id") == call for x in r), ROW_S)
            wire.send(request(ping))
            pong = wire.until(lambda r: any(x.get("id") == ping for x in r), 60)
        except (BrokenPipeError, OSError):
            pass
        out[door] = {"call": call, "ping": ping, "lines": lines + [p for p in pong if p.get("id") != ping],
                     "pong": any(p.get("id") == ping for p in pong), "pid": wire.proc.pid,
                     "imports": imports_since(arena, seen), "reached": reached(arena, reached_before)}
    if wire is not None:
        wire.close()
    return out


@pytest.fixture(scope="module", params=list(HOSTILE))
def mcp_rows(request, arena):
    hostile(arena, request.param)
    return request.param, mcp_table(arena, request.param)


def assert_only_replies(variant: str, door: str, got: dict) -> None:
    answers = [x for x in got["lines"] if x.get("id") == got["call"]]
    foreign = [x for x in got["lines"] if x.get("id") != got["call"]]
    assert len(answers) == 1 and not foreign, (variant, door, got["lines"][:3])
    text = json.dumps(answers[0])
    assert "FORGED" not in text and ("result" in answers[0] or "error" in answers[0]), (variant, door, text[:300])
    assert got["pong"], f"{variant}/{door}: the server did not answer a ping after the call"
    here = [name for pid, name in got["imports"] if pid == got["pid"]]
    assert not here, f"{variant}/{door}: the server's own process imported {here}"


@pytest.mark.slow
@pytest.mark.parametrize("door", [d for d, r in ROWS.items() if r.mcp is not None])
def test_over_mcp_the_wire_carries_only_the_servers_replies(door, mcp_rows):
    variant, table = mcp_rows
    got = table[door]
    assert_only_replies(variant, door, got)
    text = json.dumps([x for x in got["lines"] if x.get("id") == got["call"]][0])
    if variant == "exiter" and ROWS[door].reaches:  # the import happened, apart, and the answer says so
        assert got["imports"] and f"(code {EXIT})" in text, (door, got["imports"], text[:400])


# ---------------------------------------------------------------- the CLI
def cli_row(arena, variant: str, door: str) -> dict:
    from mcp_server.tools import TOOLS

    seen = import_count(arena)
    argv = [*ROWS[door].cli(arena), "--json"]
    assert argv[0] == next(spec.command for spec in TOOLS if spec.name == door), argv  # the door's own command
    proc = subprocess.Popen([sys.executable, "-m", "mcp_server.cli", *argv], cwd=arena.ws, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=checkout_env(arena.env))
    try:
        stdout, stderr = proc.communicate(timeout=ROW_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    return {"code": proc.returncode, "stdout": stdout, "stderr": stderr, "pid": proc.pid,
            "imports": imports_since(arena, seen)}


# The doors whose CLI rows start a real CLI process (the rest run in this process: cli_row_here).
PROCESS_DOORS = ("launch_training", "resume_training", "list_rewards")


def cli_row_here(arena, door: str, capfd, monkeypatch) -> dict:
    """The row through `cli.main` in this process, as the console script runs it (workspace code only in workers:
    `worker.holds_protocol`); what reached descriptors 1 and 2 read by capfd. The workers are closed after a row
    that reaches the user code, so no row's worker has imported it before (each import is anew, as in a new
    process); a worker only rows that import nothing used is kept (a worker start costs seconds)."""
    from mcp_server import cli, worker
    from mcp_server.tools import TOOLS

    seen = import_count(arena)
    argv = [*ROWS[door].cli(arena), "--json"]
    assert argv[0] == next(spec.command for spec in TOOLS if spec.name == door), argv  # the door's own command
    for key, value in arena.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(arena.ws)
    monkeypatch.setattr(worker, "holds_protocol", True)
    capfd.readouterr()
    try:
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse's refusals
            code = exc.code if isinstance(exc.code, int) else 2
    finally:
        if ROWS[door].reaches or import_count(arena) > seen:
            worker.close_workers()
    out = capfd.readouterr()
    return {"code": code, "stdout": out.out, "stderr": out.err, "pid": os.getpid(),
            "imports": imports_since(arena, seen)}


@pytest.fixture(scope="module", params=list(HOSTILE))
def cli_variant(request, arena):
    from mcp_server import worker

    hostile(arena, request.param)
    yield request.param
    worker.close_workers()  # the last in-process row's worker


@pytest.mark.slow
@pytest.mark.parametrize("door", list(ROWS))
def test_the_clis_json_output_is_its_own(door, cli_variant, arena, capfd, monkeypatch):
    got = cli_row(arena, cli_variant, door) if door in PROCESS_DOORS else cli_row_here(arena, door, capfd, monkeypatch)
    where = f"{cli_variant}/{door}: exit {got['code']}, stderr {got['stderr'][-400:]!r}"
    assert got["code"] in (0, 1, 2), where
    assert "FORGED" not in got["stdout"], where
    if got["code"] == 2:  # bad input: one error line, nothing on stdout
        assert got["stdout"] == "" and "error: " in got["stderr"], where
    else:
        assert isinstance(json.loads(got["stdout"]), dict), where
    here = [name for pid, name in got["imports"] if pid == got["pid"]]
    assert not here, f"{where}: the CLI's own process imported {here}"
    if ROWS[door].reaches:  # the import happened, apart (each command line has a worker of its own)
        assert got["imports"], f"{where}: the call did not import the run's user code"
    if cli_variant == "exiter" and ROWS[door].reaches:
        assert f"(code {EXIT})" in got["stdout"] + got["stderr"], where


# ---------------------------------------------------------------- the reacher: the holder out of reach (W1-W3)
# and, round 16 (F1), the evidence key out of reach of every door that imports a reward module: the keyless worker
# (worker_keyless), evaluate_model's graders included (evaluation.graders_apart: the worker that signs the baseline
# starts a keyless one for them).
REACHING = [door for door, row in ROWS.items() if row.reaches]
KEYED: tuple[str, ...] = ()


def unreached(door: str, lines: list[str]) -> list[str]:
    """What the reacher reached that it must not have (the key where the door keeps its worker keyed)."""
    return [line for line in lines if not (door in KEYED and line.startswith("read the evidence key"))]


@pytest.fixture(scope="module")
def reacher_rows(arena):
    hostile(arena, "reacher")
    seen = len(reached(arena, 0))
    return mcp_table(arena, "reacher", REACHING, fresh=True), seen


@pytest.mark.slow
@pytest.mark.parametrize("door", [d for d in REACHING if ROWS[d].mcp is not None])
def test_over_mcp_workspace_code_cannot_reach_the_server(door, reacher_rows, arena):
    """The reward module, imported apart, finds neither the server's descriptors nor the server to signal, before or
    after unmounting its /proc: the wire carries only the server's replies and the server answers."""
    table, seen = reacher_rows
    got = table[door]
    assert got["imports"], f"{door}: the call did not import the run's user code"
    assert_only_replies("reacher", door, got)
    assert not unreached(door, got["reached"]), got["reached"]


@pytest.mark.slow
@pytest.mark.parametrize("door", [d for d in REACHING if ROWS[d].cli is not None])
def test_through_the_cli_workspace_code_cannot_reach_the_cli(door, arena, capfd, monkeypatch):
    hostile(arena, "reacher")
    name_targets(arena, os.getpid())
    seen = len(reached(arena, 0))
    got = cli_row_here(arena, door, capfd, monkeypatch)
    assert got["imports"], f"{door}: the call did not import the run's user code"
    assert "INJECTED" not in got["stdout"] + got["stderr"], got["stderr"][-400:]
    assert got["stdout"] == "" if got["code"] == 2 else isinstance(json.loads(got["stdout"]), dict), got["stderr"]
    assert not unreached(door, reached(arena, seen)), reached(arena, seen)


# ---------------------------------------------------------------- the table covers every door
@pytest.mark.slow
def test_every_door_has_a_row(tmp_path):
    """The doors as the server lists them (tools/list) and as the CLI parses them: each has a row, and each row
    is a door (a tool removed leaves no stale row)."""
    from mcp_server.cli import build_parser
    from mcp_server.tools import TOOLS

    wire = Wire(env={"LLM_FINETUNING_WORKSPACE": str(tmp_path)})
    try:
        wire.hello()
        wire.send(request(2, "tools/list"))
        (listed,) = wire.until(lambda r: len(r) == 1, 60)
    finally:
        wire.close()
    tools = {t["name"] for t in listed["result"]["tools"]}
    commands = set(next(a for a in build_parser()._actions if a.dest == "command").choices)
    by_command = {spec.command: spec.name for spec in TOOLS}
    assert tools <= {d for d, r in ROWS.items() if r.mcp is not None}, tools - set(ROWS)
    assert {by_command.get(c, c) for c in commands} <= {d for d, r in ROWS.items() if r.cli is not None}
    assert set(ROWS) <= tools | {by_command.get(c, c) for c in commands}, set(ROWS) - tools


@pytest.mark.slow
def test_a_machine_where_the_worker_cannot_start_apart_is_warned(tmp_path):
    """Without bwrap the worker runs beside the server: check-environment says so, naming the fix; with it (this
    machine, and CI's), it says nothing of the kind."""
    empty = tmp_path / "bin"
    empty.mkdir()
    said = {}
    for case, path in (("without bwrap", str(empty)), ("with bwrap", os.environ["PATH"])):
        proc = subprocess.run([sys.executable, "-m", "mcp_server.cli", "check-environment", "--json"], text=True,
                              capture_output=True, timeout=ROW_S, cwd=tmp_path,
                              env=checkout_env({"PATH": path, "LLM_FINETUNING_WORKSPACE": str(tmp_path)}))
        said[case] = [w for w in json.loads(proc.stdout)["warnings"] if "beside the server" in w]
    assert len(said["without bwrap"]) == 1 and "install bubblewrap" in said["without bwrap"][0], said
    assert not said["with bwrap"], said


# Modules named like what the server, the CLI and the worker import (round 12, S1: a yaml.py in the project folder
# ran in the MCP server's own process): each records its importer's pid, then gets out of the way.
SHADOWED = ("yaml", "pydantic", "jsonschema", "anyio", "mcp", "numpy", "torch", "transformers", "trl")
SHADOW = "import os\nopen({log!r}, 'a').write(f'{{os.getpid()}} {{__name__}}\\n')\nraise ImportError('shadow')\n"


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["mcp_server", "mcp_server.cli"])
def test_modules_in_the_working_folder_never_shadow_what_a_door_imports(entry, tmp_path):
    """`python -m ...` puts the working folder first on sys.path, and clients start the server there: nothing in
    it is imported in the door's process (nor in its worker) in place of a library."""
    log = tmp_path / "shadows.log"
    for name in SHADOWED:
        (tmp_path / f"{name}.py").write_text(SHADOW.format(log=str(log)))
    env = checkout_env({"LLM_FINETUNING_WORKSPACE": str(tmp_path)})
    if entry == "mcp_server":
        wire = RawWire(tmp_path, {"LLM_FINETUNING_WORKSPACE": str(tmp_path)})
        try:
            assert dict(wire.hello()).get("result"), "no answer to initialize"
            wire.send(request(2, "tools/call", {"name": "list_rewards", "arguments": {}}))
            (reply,) = wire.until(lambda r: any(x.get("id") == 2 for x in r), 120)
            assert "result" in reply, reply
        finally:
            wire.close()
    else:
        (tmp_path / "config.yaml").write_text("model_name_or_path: tiny\nlearning_rate: 1.0e-6\n")
        proc = subprocess.run([sys.executable, "-m", "mcp_server.cli", "validate-config", "config.yaml", "--gpu",
                               "cpu", "--no-rehearse", "--json"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=ROW_S)
        assert proc.returncode in (0, 1), proc.stderr[-800:]
    assert not log.exists(), log.read_text()
