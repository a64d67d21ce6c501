"""The CLI's warm worker: one per-user daemon of the training interpreter, on a unix socket.

Every CLI call is a new process, and importing TRL costs it seconds. The light checks the CLI makes in the
training interpreter (TRL's fields, its argument parser, a GRPOConfig: worker_targets.DAEMON_TARGETS, routed by
mcp_server.worker.route) go instead to a daemon the first such call starts; later calls find TRL imported there.

One daemon per user, training interpreter, version of this package's code and PYTHONPATH: all four are in the
socket's name (<runtime dir>/llm-finetuning/worker-<key>.sock, the runtime dir being XDG_RUNTIME_DIR or a private
folder in the temp dir), and the daemon repeats its key when a caller connects. It binds its socket, imports TRL,
then serves one connection at a time with mcp_server.worker's JSON lines, and exits after
LLM_FINETUNING_WORKER_IDLE_S seconds without a caller (default 600), removing its socket and log. A socket whose
daemon died is removed by the next caller; when a daemon cannot start (no TRL there, no unix sockets here), it
leaves nothing behind and the caller does the work as it would without one (in its own process or its own
worker), with that path's messages. LLM_FINETUNING_CLI_WORKER=0 turns the daemon off.

    python -m mcp_server.worker_daemon SOCKET [WARM_UP]    (started by the CLI; not meant to be run by hand)
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from mcp_server.errors import UserInputError
from mcp_server.worker_apart import runtime_dir
from mcp_server.interpreter import training_env
from mcp_server.reporting import Report
from mcp_server.worker import WORKER_FLAG, _resolve, handle, receive, request_message, silence_limit

PACKAGE = Path(__file__).resolve().parent
IDLE_S = 600.0
START_TIMEOUT_S = 30.0  # for the daemon to bind its socket (it imports TRL after that)
HELLO_TIMEOUT_S = 300.0  # for its answer to a new caller, which waits for TRL's import on the first call
OFF = ("0", "false", "no", "off")


def enabled() -> bool:
    return hasattr(socket, "AF_UNIX") and os.environ.get("LLM_FINETUNING_CLI_WORKER", "1").lower() not in OFF


def idle_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get("LLM_FINETUNING_WORKER_IDLE_S", IDLE_S)))
    except ValueError:
        return IDLE_S


def daemon_key(python: str) -> str:
    """Interpreter, PYTHONPATH it gets, and this package's code (every module's path, size and mtime)."""
    digest = hashlib.sha256()
    digest.update(f"{os.path.abspath(python)}\0{training_env(python).get('PYTHONPATH', '')}\0".encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def socket_path(python: str) -> Path | None:
    folder = runtime_dir()
    path = folder / f"worker-{daemon_key(python)}.sock" if folder else None
    return path if path and len(os.fsencode(path)) < 104 else None  # a unix socket's path: at most ~104 bytes


# ---------------------------------------------------------------- the caller's side
def call(python: str, target: str, args: tuple, kwargs: dict, report: Report,
         warm_up: str | None = None, starting: Callable[[], None] | None = None) -> tuple[bool, object]:
    """(True, result) from the daemon for `python`, started when none runs (it calls `warm_up`, a
    "module:function", before its first caller; `starting` is called first, before anything is spawned: the CLI
    says there what the wait is for); (False, None) when there is none to be had (the caller then does the work
    itself). Errors of the call itself are raised as the worker's."""
    path = socket_path(python) if enabled() else None
    if path is None:
        return False, None
    conn = _connect(path)
    if conn is None:
        if starting is not None:
            starting()
        conn = _start(python, path, warm_up)
    if conn is None:
        return False, None
    conn.settimeout(silence_limit())  # the daemon sends a heartbeat while it works (worker.handle)
    with conn, conn.makefile("rw", encoding="utf-8", newline="\n") as stream:
        stream.write(json.dumps(request_message(1, target, args, kwargs)) + "\n")
        stream.flush()

        def readline() -> str:
            try:
                return stream.readline()
            except TimeoutError:
                raise UserInputError("LLM_FINETUNING_PYTHON", f"the CLI's worker for {python} sent nothing for "
                                     f"{silence_limit():g} s during {target}; run the command again "
                                     "(LLM_FINETUNING_CLI_WORKER=0 runs it without the worker)") from None

        return True, receive(readline, 1, target, report, python, lambda: _died(python, target))


def _died(python: str, target: str) -> UserInputError:
    return UserInputError("LLM_FINETUNING_PYTHON", f"the CLI's worker for {python} stopped during {target}; run "
                          "the command again (LLM_FINETUNING_CLI_WORKER=0 runs it without the worker)")


def _connect(path: Path) -> socket.socket | None:
    """A connection whose daemon answered with the same key, or None (a dead daemon's socket is removed)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(HELLO_TIMEOUT_S)
    try:
        conn.connect(str(path))
        conn.sendall(b'{"hello": 1}\n')
        answer = json.loads(conn.makefile("r", encoding="utf-8").readline() or "{}")
    except ConnectionRefusedError:
        conn.close()
        path.unlink(missing_ok=True)  # its daemon is gone
        return None
    except (OSError, ValueError):
        conn.close()
        return None
    if answer.get("key") != path.stem.removeprefix("worker-"):
        conn.close()
        return None
    conn.settimeout(None)
    return conn


def _start(python: str, path: Path, warm_up: str | None) -> socket.socket | None:
    """Start the daemon, detached (it outlives this process), and connect once its socket is up."""
    env = training_env(python)
    env[WORKER_FLAG] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    try:
        fd = os.open(path.with_suffix(".log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with open(fd, "w", encoding="utf-8") as log:  # never through a link planted in its place
            proc = subprocess.Popen([python, "-m", "mcp_server.worker_daemon", str(path), *filter(None, [warm_up])],
                                    stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=log, cwd=path.parent, env=env,
                                    start_new_session=True)
    except OSError:
        path.with_suffix(".log").unlink(missing_ok=True)
        return None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if path.exists():
            conn = _connect(path)
            if conn is not None:
                return conn
        if proc.poll() is not None:  # it could not start (a daemon that ran removes what it wrote)
            path.with_suffix(".log").unlink(missing_ok=True)
            return None
        time.sleep(0.05)
    return None


# ---------------------------------------------------------------- the daemon's side
def _serve_connection(conn: socket.socket, key: str, idle: float) -> None:
    conn.settimeout(idle)  # a caller that hangs does not hold the daemon forever
    with conn.makefile("rw", encoding="utf-8", newline="\n") as stream:

        def send(message: dict) -> None:
            stream.write(json.dumps(message, default=str) + "\n")
            stream.flush()

        try:
            if not stream.readline():
                return
            send({"key": key, "pid": os.getpid(), "python": sys.executable})
            for line in stream:
                if line.strip():
                    handle(json.loads(line), send)
        except (OSError, ValueError):  # the caller went away or sent garbage: serve the next one
            return


def serve(path: Path, warm_up: str | None = None) -> None:
    key, idle = path.stem.removeprefix("worker-"), idle_seconds()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped: still remove the socket and log
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    server.bind(str(staging))
    os.replace(staging, path)  # atomic: a caller sees no socket or a bound one
    mine = path.stat().st_ino
    try:
        server.listen(16)
        if warm_up:  # what the light checks need, imported and built before the first caller is served
            _resolve(warm_up)()
        server.settimeout(idle)
        while True:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                break
            with conn:
                _serve_connection(conn, key, idle)
            os.chdir(path.parent)  # hold no caller's folder while idle
    finally:
        server.close()
        try:
            if path.stat().st_ino == mine:  # not a newer daemon's socket
                path.unlink()
        except OSError:
            pass
        path.with_suffix(".log").unlink(missing_ok=True)


if __name__ == "__main__":
    serve(Path(sys.argv[1]), *sys.argv[2:3])
