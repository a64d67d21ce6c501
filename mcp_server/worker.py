"""Run work that needs torch, TRL or transformers in the training interpreter.

`in_training(target, *args, report=report, **kwargs)` (a "module:function" declared in mcp_server.worker_targets)
calls the function in this process when this Python is the training interpreter (mcp_server.interpreter), else in
one persistent worker process (`python -m mcp_server.worker`) started on first need in the training interpreter,
apart (mcp_server.worker_apart: the workspace code it imports cannot reach or signal this process).
The worker stays up, so only its first call pays for importing TRL; one call runs at a time; a worker that died is
started again on the next call. Requests and answers are JSON lines over its stdin/stdout; progress (`report`)
comes back as lines of their own while the call runs, and so does a heartbeat every HEARTBEAT_S seconds: a worker
that sends nothing for LLM_FINETUNING_WORKER_SILENCE_S seconds (default 120: hung, or no worker at all) is stopped
and the call fails saying so, so the server stays responsive and the next call starts a fresh one. Pydantic models
travel as {"model", "data"}, a run (runs.Run) as {"run": its directory}, any other value with `to_wire` (a JSON
value) and `from_wire` (recipe.runspec.RunSpec) as {"object", "data"}; a class is named only from this package.
A process may send some calls elsewhere first (`route`: the CLI's light checks go to its per-user warm worker,
mcp_server.worker_daemon, which speaks the same lines over a unix socket).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import json
import os
import queue
import secrets
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from mcp_server import worker_apart, worker_keyless, worker_stderr, worker_targets
from mcp_server.errors import UserInputError, one_line
from mcp_server.interpreter import (HOW_TO_GET_ONE, PRIVATE_CACHES, SCRATCH, broken_companions, companions_problem,
                                    is_this_python, keep_caches_private, require_training_python, training_env)
from mcp_server.reporting import Report, silent
from mcp_server.runs import Run
from mcp_server.workspace import current_directory, workspace_root

WORKER_FLAG = "LLM_FINETUNING_WORKER"  # set in the worker: everything there runs in-process
# Settings that follow each call into the worker (tests and harnesses may change them between calls).
SYNCED_ENV_PREFIXES = ("LLM_FINETUNING_", "HF_", "TRANSFORMERS_", "CUDA_VISIBLE_DEVICES")
# Where a process sends some calls instead: route(python, target, args, kwargs, report) -> (handled, result).
# The CLI sets it (its light checks go to the per-user warm worker, mcp_server.worker_daemon); None elsewhere.
route = None
# True in a process whose own descriptors carry a protocol (the MCP server's stdio, the CLI's result): workspace
# code (reward modules, graders, environments) must never run there, as it could write to them (issue 48, ninth
# round, M7/M6b), so every call goes to the worker, even when this Python is the training interpreter.
holds_protocol = False
# Called (no arguments) on the worker's side before each call: rewards.source_only registers forget_changed (a user
# module whose file changed since it ran is imported again, with every user module: what a fresh process would run).
BEFORE_EACH_CALL: list = []
HEARTBEAT_S = 5.0  # the worker says it is alive this often while a call runs
MAX_LINE_CHARS = 64 << 20  # the longest answer line read from a worker (its results are far smaller)
OVERSIZED = "\0oversized"  # what the reader queues for a line past MAX_LINE_CHARS (compared by identity)
SILENCE_S = 120.0  # a worker that says nothing for this long is taken for hung (LLM_FINETUNING_WORKER_SILENCE_S)


def silence_limit() -> float:
    try:
        return max(0.1, float(os.environ.get("LLM_FINETUNING_WORKER_SILENCE_S", SILENCE_S)))
    except ValueError:
        return SILENCE_S


class TrainingInterpreterError(RuntimeError):
    """An unexpected exception in the training interpreter, with its type, message and where it came from."""


def _resolve(target: str):
    """`module:name` or `module:name.attribute` (a decorated function's `__wrapped__`)."""
    module, _, name = target.partition(":")
    value = importlib.import_module(module)
    for part in name.split("."):
        value = getattr(value, part)
    return value


def _encode(value):
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        cls = type(value)
        return {"model": f"{cls.__module__}:{cls.__qualname__}", "data": value.model_dump(mode="json")}
    if isinstance(value, Run):
        return {"run": str(value.dir)}
    if isinstance(value, Path):
        value = str(value)
    if callable(getattr(value, "to_wire", None)) and not isinstance(value, type):
        cls = type(value)
        return {"object": f"{cls.__module__}:{cls.__qualname__}", "data": value.to_wire()}
    return {"value": value}


def _class(name) -> type:
    """A class a line names: an answer is written by a process that ran workspace code, so only a result class
    (pydantic, or with from_wire) of this package whose module this process already imported; nothing is imported
    on a line's word (a reward module's name would run it in this process)."""
    module, _, qualname = name.partition(":") if isinstance(name, str) else ("", "", "")
    value = sys.modules.get(module) if module.startswith("mcp_server.") else None
    for part in qualname.split(".") if value is not None else ():
        value = getattr(value, part, None)
    # never imported on a line's word (round 12, W1: "mcp_server.__main__" started a second server in this one)
    if not isinstance(value, type) or not (hasattr(value, "model_validate") or hasattr(value, "from_wire")):
        raise TrainingInterpreterError(f"a line named the class {one_line(repr(name))[:120]}, which is no result "
                                       "class of this package already imported here: it is not decoded")
    return value


def _decode(item: dict):
    if "model" in item:
        return _class(item["model"]).model_validate(item["data"])
    if "object" in item:
        return _class(item["object"]).from_wire(item["data"])
    if "run" in item:
        return Run(Path(item["run"]))
    return item["value"]


@functools.lru_cache(maxsize=256)  # asked on every call (a validation makes several): inspect is ~0.1 ms
def _takes_report(fn) -> bool:
    return "report" in inspect.signature(fn).parameters


def _call_here(fn, args, kwargs, report: Report):
    if _takes_report(fn):
        kwargs = {**kwargs, "report": report}
    try:
        return fn(*args, **kwargs)
    except (ImportError, RuntimeError) as exc:
        # transformers' lazy import fails as "Failed to import trl.trainer.grpo_config ... Could not import module
        # 'TrainingArguments'" when a torch companion built for another torch is installed: name the library.
        broken = broken_companions()
        if not broken:
            raise
        import torch

        cause = companions_problem(broken, torch.__version__)
        raise UserInputError("environment", f"{one_line(str(exc))[:200]}: {cause}") from exc


# One call at a time in this process too, as in the worker: concurrent calls (an MCP client's parallel tool calls
# run in threads) raced transformers' lazy imports and each other's model loading (meta tensors), and a late
# call's files could replace a newer call's.
_HERE = threading.RLock()


def in_training(target: str, *args, report: Report = silent, **kwargs):
    """Call `module:function` with these arguments in the training interpreter; see the module docstring.
    Without a training interpreter: UserInputError naming prepare_environment and LLM_FINETUNING_PYTHON."""
    if os.environ.get(WORKER_FLAG):
        return _call_here(_resolve(target), args, kwargs, report)
    python = require_training_python()
    if route is not None:
        handled, result = route(python, target, args, kwargs, report)
        if handled:
            return result
    if is_this_python(python) and not holds_protocol:
        with _HERE:
            return _call_here(_resolve(target), args, kwargs, report)
    return _worker_for(python, target in worker_targets.KEYLESS_TARGETS).call(target, args, kwargs, report)


def apart(target: str, *args, report: Report = silent, **kwargs):
    """Call `module:function`, which imports workspace code, out of a process that holds a protocol
    (`holds_protocol`): in the worker (the training interpreter's, else one of this Python); elsewhere here."""
    if not holds_protocol or os.environ.get(WORKER_FLAG):
        return _call_here(_resolve(target), args, kwargs, report)
    try:
        python = require_training_python()
    except UserInputError:  # the light server without one: the worker runs this Python
        python = sys.executable
    return _worker_for(python, keyless=True).call(target, args, kwargs, report)


def keyless(target: str, *args, report: Report = silent, **kwargs):
    """Call `module:function`, which runs user code (a grader, a reward), in the keyless worker (worker_keyless)
    from any process, a keyed worker included (the one evaluate_model signs in); here only in that worker."""
    if os.environ.get(worker_keyless.FLAG):
        return _call_here(_resolve(target), args, kwargs, report)
    python = sys.executable if os.environ.get(WORKER_FLAG) else require_training_python()
    return _worker_for(python, keyless=True).call(target, args, kwargs, report)


def runs_in_training(fn):
    """Decorator for a core function whose work needs torch, TRL or transformers: a call from a Python that
    is not the training interpreter goes to the worker (its arguments and result must be JSON or pydantic;
    a `report` keyword is relayed)."""
    target = f"{fn.__module__}:{fn.__qualname__}"

    @functools.wraps(fn)
    def call(*args, **kwargs):
        report = kwargs.pop("report", silent)
        return in_training(target + ".__wrapped__", *args, report=report, **kwargs)

    return call


# ---------------------------------------------------------------- the protocol, both directions
DIED_WAIT_S = 10.0  # a worker whose input or output failed gets this long to exit before it is killed


def request_message(call_id: int | str, target: str, args: tuple, kwargs: dict) -> dict:
    """One call: the target, its arguments, and the caller's settings and working directory."""
    env = {k: v for k, v in os.environ.items() if k.startswith(SYNCED_ENV_PREFIXES)}
    env["LLM_FINETUNING_WORKSPACE"] = str(workspace_root())
    env.pop("LLM_FINETUNING_PYTHON", None)
    return {"id": call_id, "target": target, "args": [_encode(a) for a in args],
            "kwargs": {k: _encode(v) for k, v in kwargs.items()}, "env": env, "cwd": current_directory()}


def receive(readline, call_id: int | str, target: str, report: Report, python: str, died, ask=None):
    """Read answer lines until this call's result (returned) or error (raised); `died()` makes the exception
    for a worker whose output ended; `ask` answers a keyless worker's evidence question (worker_keyless)."""
    while True:
        line = readline()
        if not line:
            raise died()
        try:
            answer = json.loads(line)
        except json.JSONDecodeError:
            continue
        if answer.get("id") != call_id or "alive" in answer:  # another call's line, or a heartbeat
            continue
        if "report" in answer:
            report(*answer["report"])
        elif "evidence" in answer:
            if ask is not None:
                ask(answer["evidence"])
        elif "result" in answer:
            return _decode(answer["result"])
        else:
            raise _error(answer["error"], target, python)


def _error(error: dict, target: str, python: str) -> BaseException:
    if error["kind"] == "interrupted":
        return KeyboardInterrupt()
    if error["kind"] == "input":
        return UserInputError(error["field"], error["message"])
    if error["type"] in ("ModuleNotFoundError", "ImportError"):
        return UserInputError("LLM_FINETUNING_PYTHON", (
            f"the training interpreter {python} cannot import what {target} needs: "
            f"{error['message']}. It needs torch, trl, transformers (the package's train extra) "
            f"and pydantic, pyyaml, jsonschema; install them there, or {HOW_TO_GET_ONE}"))
    return TrainingInterpreterError(f"{error['type']}: {error['message']} (in the training "
                                    f"interpreter {python})\n{error['traceback']}")


def handle(request: dict, send, mark: bool = False) -> None:
    """Run one request here (the worker's side) and send its progress, a heartbeat every HEARTBEAT_S seconds
    while it runs, and its answer (after worker_stderr.MARK on stderr when `mark`: the caller waits for it)."""
    call_id = request["id"]
    lock, finished = threading.Lock(), threading.Event()
    raw_send = send

    def send(message: dict) -> None:  # noqa: F811 - the heartbeat's thread and the call's share the channel
        with lock:
            if mark and ("result" in message or "error" in message):  # the call's stderr comes before it
                worker_stderr.mark(call_id)
            raw_send(message)

    def heartbeat() -> None:
        while not finished.wait(HEARTBEAT_S):
            try:
                send({"id": call_id, "alive": True})
            except (OSError, ValueError):  # the caller went away
                return

    def relay(done, total, message):
        send({"id": call_id, "report": [done, total, message]})

    threading.Thread(target=heartbeat, name="llm-finetuning-heartbeat", daemon=True).start()
    worker_keyless.ASKER.call = (call_id, send)
    try:
        _answer(request, call_id, send, relay)
    finally:
        worker_keyless.ASKER.call = None
        finished.set()


def _answer(request: dict, call_id, send, relay) -> None:
    try:
        _apply(request.get("env", {}), request.get("cwd", os.getcwd()))
        for prepare in list(BEFORE_EACH_CALL):
            prepare()
        fn = _resolve(request["target"])
        args = [_decode(a) for a in request["args"]]
        kwargs = {k: _decode(v) for k, v in request["kwargs"].items()}
        send({"id": call_id, "result": _encode(_call_here(fn, args, kwargs, relay))})
    except UserInputError as exc:
        send({"id": call_id, "error": {"kind": "input", "field": exc.field,
                                       "message": str(exc).removeprefix(f"{exc.field}: ")}})
    except KeyboardInterrupt:  # the caller's Ctrl-C, passed on (worker_apart.Started.interrupt): no traceback
        send({"id": call_id, "error": {"kind": "interrupted"}})
    except Exception as exc:  # the caller reports it; the worker keeps serving
        send({"id": call_id, "error": {"kind": "exception", "type": type(exc).__name__, "message": str(exc),
                                       "traceback": traceback.format_exc(limit=8)}})


# ---------------------------------------------------------------- the server's side
class Worker:
    def __init__(self, python: str, keyless: bool = False):
        self.python, self.keyless, self.hidden = python, keyless, ()
        self.proc: subprocess.Popen | None = None
        self.started: worker_apart.Started | None = None
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.stderr = worker_stderr.StderrCopy()  # its tail explains a death
        self.lines: queue.Queue[str] = queue.Queue()

    def _start(self) -> None:
        env = training_env(self.python)
        env[WORKER_FLAG] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        if self.keyless:  # no evidence key readable there (worker_keyless)
            env[worker_keyless.FLAG] = "1"
            self.hidden = worker_keyless.key_files()
        try:
            self.started = worker_apart.start(  # apart: the code it imports cannot reach this process
                [self.python, "-m", "mcp_server.worker"], worker_keyless.bwrap_args(self.hidden),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
                errors="replace", bufsize=1, env=env,
            )
            self.proc = self.started.proc
        except OSError as exc:
            raise UserInputError("LLM_FINETUNING_PYTHON", f"cannot start the training interpreter {self.python}: "
                                 f"{exc}; {HOW_TO_GET_ONE}") from None
        self.stderr.start(self.proc)
        self.lines = queue.Queue()
        threading.Thread(target=self._pump_stdout, args=(self.proc, self.lines), daemon=True).start()

    @staticmethod
    def _pump_stdout(proc: subprocess.Popen, lines: queue.Queue) -> None:
        """The worker's answer lines, for `_readline` to wait on with a limit ('' at the end of its output); a line
        over MAX_LINE_CHARS ends the reading (OVERSIZED): one unbounded line held the server's memory (round 12)."""
        while line := proc.stdout.readline(MAX_LINE_CHARS + 1):
            if len(line) > MAX_LINE_CHARS:
                lines.put(OVERSIZED)
                return
            lines.put(line)
        lines.put("")

    def _stop(self) -> None:
        """Kill the worker and its namespace; the next call starts a fresh one."""
        self.started.kill()
        self.proc.wait()
        self.proc = None

    def _readline(self, target: str) -> str:
        limit = silence_limit()
        try:
            line = self.lines.get(timeout=limit)
        except queue.Empty:
            line = None
        if line is OVERSIZED:
            self._stop()
            raise UserInputError("LLM_FINETUNING_PYTHON", (
                f"the training interpreter {self.python} sent a line over {MAX_LINE_CHARS >> 20} MiB during {target}: "
                "it was stopped (no answer of the worker is that long; the code it ran wrote to its answer channel)"))
        if line is not None:
            return line
        self._stop()  # hung: its call is abandoned, the next call starts a fresh worker
        raise UserInputError("LLM_FINETUNING_PYTHON", (
            f"the training interpreter {self.python} sent nothing for {limit:g} s during {target} (not even its "
            f"heartbeat): it was stopped, and the next call starts it again. A Python that does not run "
            f"`-m mcp_server.worker` answers nothing; {HOW_TO_GET_ONE}"))

    def _died(self, target: str) -> UserInputError:
        try:
            code = self.proc.wait(timeout=DIED_WAIT_S)
        except subprocess.TimeoutExpired:  # its input failed while it runs: stopped, never waited on without end
            self.started.kill()
            code = self.proc.wait()
        self.stderr.ended()  # its last lines copied and in the tail
        self.started.kill()  # what it left in its namespace ends with it
        self.proc = None
        tail = "\n".join(self.stderr.tail)[-1500:]
        return UserInputError(
            "LLM_FINETUNING_PYTHON",
            f"the training interpreter {self.python} exited (code {code}) during {target}: {tail or 'no output'}. "
            f"It needs torch, trl and transformers; {HOW_TO_GET_ONE}",
        )

    def call(self, target: str, args: tuple, kwargs: dict, report: Report):
        with self.lock:
            if self.keyless and self.proc is not None and not worker_keyless.still_hides(self.hidden):
                self._stop()  # before the key it does not hide is made (worker_keyless)
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            # An id no line written before this request can name (a number and a random part), and the lines
            # left over from earlier calls dropped: a worker's line answers only the call it was written for.
            call_id = f"{next(self.ids)}-{secrets.token_hex(8)}"
            while not self.lines.empty():
                self.lines.get_nowait()
            line = json.dumps(request_message(call_id, target, args, kwargs)) + "\n"  # its errors are the call's
            try:
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise self._died(target) from None
            try:
                return receive(lambda: self._readline(target), call_id, target, report, self.python,
                               lambda: self._died(target), worker_keyless.replier(self.proc) if self.keyless else None)
            except KeyboardInterrupt:
                self.started.interrupt()
                raise
            finally:
                self.stderr.copied(call_id)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()  # the worker ends at end of input
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.started.kill()  # and what it left in its namespace (its namespace's first process keeps it)
            self.proc.wait()
        self.proc = None


_workers: dict[tuple[str, bool], Worker] = {}
_workers_lock = threading.Lock()


def _worker_for(python: str, keyless: bool = False) -> Worker:
    """The worker for the current training interpreter (another interpreter replaces both): the keyless one
    (worker_keyless) for code no one has reviewed yet, the other for what signs (sampling, evaluation)."""
    with _workers_lock:
        for other in [p for p in _workers if p[0] != python]:
            _workers.pop(other).close()
        if (python, keyless) not in _workers:
            _workers[(python, keyless)] = Worker(python, keyless)
        return _workers[(python, keyless)]


def started_any() -> bool:
    """Whether this process has started a worker (the CLI says what it loads before the first one starts)."""
    return any(w.proc is not None for w in _workers.values())


def close_workers() -> None:
    with _workers_lock:
        for worker in _workers.values():
            worker.close()
        _workers.clear()


# ---------------------------------------------------------------- the worker's side
def _apply(env: dict, cwd: str) -> None:
    own = (WORKER_FLAG, worker_keyless.FLAG, "LLM_FINETUNING_PYTHON", SCRATCH,
           *PRIVATE_CACHES)  # the worker's, never the caller's
    for key in [k for k in os.environ if k.startswith(SYNCED_ENV_PREFIXES) and k not in env]:
        if key not in own:
            del os.environ[key]
    os.environ.update({k: v for k, v in env.items() if k not in own})
    if os.path.isdir(cwd):
        os.chdir(cwd)


def serve() -> None:
    threading.Thread(target=worker_apart.end_with_caller, name="llm-finetuning-lifeline", daemon=True).start()
    keep_caches_private()
    worker_keyless.install()
    # stdout carries only the protocol: whatever the called code prints goes to stderr.
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    write_lock = threading.Lock()
    ours = os.fstat(channel.fileno())

    def send(message: dict) -> None:
        with write_lock:
            now = os.fstat(channel.fileno())
            if (now.st_dev, now.st_ino) != (ours.st_dev, ours.st_ino):  # the called code put another file there
                sys.stderr.write("llm-finetuning: the code this call ran replaced the worker's answer channel; "
                                 "the worker stops\n")
                sys.stderr.flush()
                os._exit(70)
            channel.write(json.dumps(message, default=str) + "\n")
            channel.flush()

    for line in sys.stdin:
        if line.strip():
            handle(json.loads(line), send, mark=True)


if __name__ == "__main__":  # the module's own copy serves, so what code registers on it (BEFORE_EACH_CALL) is seen
    from mcp_server import worker

    worker.serve()
