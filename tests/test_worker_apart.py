"""Issue 48, round 11 (W1-W3): the worker that imports workspace code starts apart (mcp_server.worker_apart), and
two contracts hold as tables:

- reach: code running in the worker tries every way it has to name the process that started it (its holder) --
  a signal to its own process group (kill 0, killpg), to its parent, to the holder's pid; a write to the holder's
  descriptors and a read of its /proc entry; each again after unmounting its /proc -- and none reaches the holder
  (a holder in a session of its own, so that a failure here signals nothing else on the machine);
- stop: every way the server stops a worker (Started.kill, a silent worker's limit, close() past its grace) leaves
  no process of its namespace behind: not the worker, not a child in a session of its own, not one that ignores
  SIGTERM.
Each row starts bwrap (a few milliseconds) and Python: cheap, but processes, so slow-marked.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from conftest import checkout_env
from mcp_server import worker_apart

# Each way code in the worker reaches for its holder (HOLDER: its pid). A signal is judged by the holder (its
# SIGUSR1 handler: the call succeeds on the worker's own group too); any other way, by the call succeeding.
SIGNALLED = ("kill(0)", "killpg(own group)", "kill(parent)", "kill(holder)")
REACH = {
    "kill(0)": "os.kill(0, signal.SIGUSR1)",
    "killpg(own group)": "os.killpg(os.getpgid(0), signal.SIGUSR1)",
    "kill(parent)": "os.kill(os.getppid(), signal.SIGUSR1) if os.getppid() > 1 else None",
    "kill(holder)": "os.kill(HOLDER, signal.SIGUSR1)",
    "signal 0 to the holder": "os.kill(HOLDER, 0)",
    "write the holder's stdout": "open(f'/proc/{HOLDER}/fd/1', 'w').write('FORGED\\n')",
    "write the holder's stdin": "open(f'/proc/{HOLDER}/fd/0', 'w').write('FORGED\\n')",
    "read the holder's environment": "open(f'/proc/{HOLDER}/environ', 'rb').read()",
    # round 12, W3: the CLI's warm worker listens in this user's runtime folder; a socket put there answers its calls
    "see the warm worker's sockets": "assert os.path.exists(os.environ['MARKER'])",
    "put a socket among them": "open(os.path.join(os.environ['RUNTIME'], 'planted'), 'w').write('x')\n"
                               "assert os.path.exists(os.environ['MARKER'])",
}
ATTACK = textwrap.dedent("""
    import ctypes, os, signal
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # what it sends its own group reaches it too
    HOLDER = int(os.environ["HOLDER"])
    reached = []
    def attempt(tag):
        for name, line in {reach!r}.items():
            try:
                exec(line)
            except (OSError, ValueError, AssertionError):
                continue
            if name not in {signalled!r}:
                reached.append(tag + name)
    attempt("")
    if os.readlink("/proc/self/ns/pid") != os.environ["HOLDER_NS"]:  # apart: the unmount is its namespace's own
        ctypes.CDLL(None, use_errno=True).umount2(b"/proc", 2)
        attempt("after unmounting /proc: ")
    print(repr(reached), flush=True)
""").format(reach=REACH, signalled=SIGNALLED)
HOLDER = textwrap.dedent("""
    import json, os, signal, subprocess, sys, time
    from mcp_server import worker_apart
    got = []
    signal.signal(signal.SIGUSR1, lambda *a: got.append("SIGUSR1"))
    runtime = worker_apart.runtime_dir()
    marker = runtime / f"marker-{os.getpid()}"
    marker.write_text("")
    env = dict(os.environ, HOLDER=str(os.getpid()), HOLDER_NS=os.readlink("/proc/self/ns/pid"),
               RUNTIME=str(runtime), MARKER=str(marker))
    started = worker_apart.start([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True, env=env)
    out, _ = started.proc.communicate(timeout=120)
    time.sleep(0.2)  # a signal in flight
    planted = (runtime / "planted").exists()
    marker.unlink()
    print(json.dumps({"reached": out.strip(), "signals": got, "how": worker_apart.how(), "planted": planted}))
""")


@pytest.mark.slow
def test_code_in_the_worker_cannot_reach_the_process_that_started_it(tmp_path):
    proc = subprocess.run([sys.executable, "-c", HOLDER, ATTACK], capture_output=True, text=True, timeout=180,
                          cwd=tmp_path, env=checkout_env({}), start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said["how"].startswith("apart"), said["how"]  # bwrap works here and on CI
    assert said["reached"] == "[]" and not said["signals"] and not said["planted"], said
    assert "FORGED" not in proc.stdout


def _left(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in " ".join(process.info["cmdline"] or []):
            try:
                if process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process)
            except psutil.NoSuchProcess:
                continue
    return found


def _gone(marker: str, within: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    while _left(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _left(marker)


# A worker that starts a child in a session of its own and one that ignores SIGTERM, then says so and sleeps.
LINGERER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    marker = sys.argv[1]
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker], start_new_session=True)
    subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                      "time.sleep(600)", marker])
    print("ready", flush=True)
    time.sleep(600)
""")


def _stop_by_kill(marker: str, tmp_path) -> None:
    started = worker_apart.start([sys.executable, "-c", LINGERER, marker], stdout=subprocess.PIPE, text=True)
    assert started.proc.stdout.readline().strip() == "ready"
    started.kill()
    started.proc.wait(timeout=30)


def _worker(tmp_path, monkeypatch, **env):
    from mcp_server import worker

    for key, value in {"LLM_FINETUNING_PYTHON": sys.executable, "LLM_FINETUNING_WORKSPACE": str(tmp_path),
                       **env}.items():
        monkeypatch.setenv(key, value)
    return worker.Worker(sys.executable)


def _stop_when_silent(marker: str, tmp_path, monkeypatch) -> None:
    """The worker's own door: a call that sends nothing (not even its heartbeat) past the silence limit."""
    from mcp_server.errors import UserInputError

    worker = _worker(tmp_path, monkeypatch, LLM_FINETUNING_WORKER_SILENCE_S="3")
    with pytest.raises(UserInputError, match="sent nothing"):
        worker.call("subprocess:run", ([sys.executable, "-c", LINGERER, marker],), {}, lambda *a: None)


def _stop_by_close(marker: str, tmp_path, monkeypatch) -> None:
    """close(): the worker's input ends; one busy past the grace is killed."""
    import threading

    worker = _worker(tmp_path, monkeypatch)
    busy = threading.Thread(target=lambda: _swallow(worker, marker), daemon=True)
    busy.start()
    deadline = time.monotonic() + 60
    while len(_left(marker)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.close()


def _swallow(worker, marker: str) -> None:
    try:
        worker.call("subprocess:run", ([sys.executable, "-c", LINGERER, marker],), {}, lambda *a: None)
    except Exception:  # the call dies with the worker: what is judged is what is left
        pass


STOPS = {"Started.kill": _stop_by_kill, "a silent worker's limit": _stop_when_silent,
         "close past its grace": _stop_by_close}


@pytest.mark.slow
@pytest.mark.parametrize("stop", list(STOPS))
def test_a_stopped_worker_leaves_nothing_of_its_namespace(stop, tmp_path, monkeypatch):
    marker = f"worker-apart-{secrets.token_hex(6)}"
    kwargs = {} if stop == "Started.kill" else {"monkeypatch": monkeypatch}
    try:
        STOPS[stop](marker, tmp_path, **kwargs)
        left = _gone(marker)
        assert not left, [(p.pid, p.cmdline()) for p in left]
    finally:
        for process in _left(marker):
            process.kill()


@pytest.mark.slow
def test_the_worker_is_apart_where_bwrap_works():
    """This machine (and CI) has a bwrap that makes PID namespaces: the worker must start apart here."""
    assert worker_apart.not_apart() is None, worker_apart.how()
    assert os.path.exists("/proc/self/ns/pid")


# ---------------------------------------------------------------- round 12: what the worker sends back, and when
# Reward modules that misbehave toward the server through the worker's own channel, each then imported by a door
# (emit_grpo_config) of a real server; the server answers that call (an error naming what happened, where it is
# refused) and the next one.
FIND_CHANNEL = (
    "import sys\n"
    "def _channel():\n"
    "    frame = sys._getframe()\n"
    "    while frame is not None:\n"
    "        if 'call_id' in frame.f_locals and 'send' in frame.f_locals:\n"
    "            return frame.f_locals['call_id'], frame.f_locals['send']\n"
    "        frame = frame.f_back\n"
    "    raise SystemExit('no channel')\n")
BENIGN = "def reward(completions, **kwargs):\n    return [1.0 for _ in completions]\n"
MISBEHAVING = {
    # W1: an answer naming a module of this package that the server never imported (its import has effects)
    "names a module to import": FIND_CHANNEL + "_id, _send = _channel()\n"
    "_send({'id': _id, 'result': {'object': 'mcp_server.__main__:x', 'data': {}}})\n",
    # W2: one line past what the server reads (64 MiB)
    "sends a line of 65 MiB": FIND_CHANNEL + "_id, _send = _channel()\n"
    "_send({'id': _id, 'report': [0, 1, 'x' * (65 << 20)]})\n",
    # M5: bytes that are no UTF-8 on its stderr, then more than a pipe holds
    "writes binary to stderr": "import os\nos.write(2, b'\\xff\\xfe\\xfd\\n')\nos.write(2, b'log line\\n' * 40000)\n",
    # M4: an import that never returns
    "never finishes its import": "import time\ntime.sleep(10 ** 6)\n",
}
SAYS = {"names a module to import": "not decoded", "sends a line of 65 MiB": "over 64 MiB",
        "writes binary to stderr": None, "never finishes its import": "did not finish within"}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(MISBEHAVING))
def test_a_worker_that_misbehaves_gets_an_answer_and_the_server_serves_on(case, tmp_path):
    from test_server_inputs import Wire, request

    (tmp_path / "odd_reward.py").write_text(MISBEHAVING[case] + BENIGN)
    wire = Wire(env={"LLM_FINETUNING_WORKSPACE": str(tmp_path), "LLM_FINETUNING_IMPORT_LIMIT_S": "5",
                     "PYTHONPATH": str(tmp_path)})
    try:
        wire.hello()
        wire.send(request(2, "tools/call", {"name": "emit_grpo_config", "arguments": {
            "model": "tiny", "dataset": "tiny", "gpu": "cpu", "run_name": "odd",
            "rewards": [{"name": "odd_reward.reward", "params": {}, "weight": 1.0}]}}))
        (reply,) = wire.until(lambda r: any(x.get("id") == 2 for x in r), 300)
        wire.send(request(3, "tools/call", {"name": "list_rewards", "arguments": {}}))
        (after,) = wire.until(lambda r: any(x.get("id") == 3 for x in r), 120)
    finally:
        wire.close()
    text = json.dumps(reply)
    assert "result" in reply and "stdio_server" not in text, text[:600]
    if SAYS[case]:  # an error, or a NOT VALID emission whose finding names it
        assert SAYS[case] in text, text[:600]
    assert "result" in after and not after["result"].get("isError"), json.dumps(after)[:400]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "end of input"])
def test_a_worker_ends_with_its_server(how, tmp_path):
    """A worker hung in a reward module's import ends within seconds of its server's end, however the server ends
    (round 12, M6: it outlived a SIGTERM'd server indefinitely); at the end of its input the server first answers
    what it was asked, which the import limit bounds."""
    import signal

    from test_server_inputs import Wire, request

    marker = f"hung_{secrets.token_hex(5)}"
    (tmp_path / f"{marker}.py").write_text("import time\ntime.sleep(10 ** 6)\n" + BENIGN)
    # the import limit bounds how long the server answers what it was asked after the end of its input
    limit = {"LLM_FINETUNING_IMPORT_LIMIT_S": "5"} if how == "end of input" else {}
    wire = Wire(env={"LLM_FINETUNING_WORKSPACE": str(tmp_path), "PYTHONPATH": str(tmp_path), **limit})
    try:
        wire.hello()
        wire.send(request(2, "tools/call", {"name": "emit_grpo_config", "arguments": {
            "model": "tiny", "dataset": "tiny", "gpu": "cpu", "run_name": "hung",
            "rewards": [{"name": f"{marker}.reward", "params": {}, "weight": 1.0}]}}))
        deadline = time.monotonic() + 120
        while not _workers_in(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _workers_in(tmp_path), "no worker started"
        time.sleep(1.0)  # inside the import
        if how == "end of input":
            wire.proc.stdin.close()
        else:
            wire.proc.send_signal(getattr(signal, how))
        # a signal: seconds; the end of input: the answer first (each import of the module waits out the limit)
        deadline = time.monotonic() + (20 if how != "end of input" else 120)
        while _workers_in(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _workers_in(tmp_path), [p.cmdline() for p in _workers_in(tmp_path)]
    finally:
        for process in _workers_in(tmp_path):
            process.kill()
        wire.proc.kill()
        wire.proc.wait()


def _workers_in(workspace) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if "mcp_server.worker" in (process.info["cmdline"] or []) and \
                    process.environ().get("LLM_FINETUNING_WORKSPACE") == str(workspace) and \
                    process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
