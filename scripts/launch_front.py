"""The first start's front: answer the harness at once while the server's environment builds (issue 49).

A harness's first check starts the launcher and waits for `initialize`; building the server's environment with pip
took 20 to 120 s on a busy machine, and OpenCode's MCP client gives `initialize` 60 s whatever its config's
`timeout` says (MCP error -32001), Claude Code 30 s. So a start that finds no environment does not build it first:
it starts the build in the background (`launch_server.py --prepare`, detached: a harness that ends its check ends
the launcher's process tree, and the build goes on), and answers from this standard-library front what the server
would answer the same way on every machine: `initialize` (for each protocol version the server was asked), `ping`,
an error to `server/discover` (the protocol's signal to fall back to `initialize`), and the lists (`tools/list`,
`prompts/list`, `resources/list`, `resources/templates/list`, `skills/list`), from
`first_answers.json`, the server's own answers written by `--write` (scripts/dump_doors.py --write and --check
run it too; tests/test_tool_registry.py runs the check). Anything else (a tool call) waits for the build; then
the server starts, is given the harness's own `initialize` (its answer kept from the harness: the front gave it)
and `notifications/initialized`, then what waited, and from there the front only carries lines both ways.

A change of what the server answers (a tool's text, a skill) is a change of the doors: `dump_doors.py --write`
refreshes the fixtures and these answers together, and the suite fails until it has run. (A checkout edited
without it answers its first session's lists as committed; the server answers everything else, and every list
from its next start on.)

    python3 scripts/launch_front.py --write     # rewrite first_answers.json from this checkout's server
    python3 scripts/launch_front.py --check     # exit 1 when it differs from what the server answers now
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANSWERS = Path(__file__).with_name("first_answers.json")
LISTS = ("tools/list", "prompts/list", "resources/list", "resources/templates/list", "skills/list")
REPLAY_ID = "llm-finetuning-launcher-initialize"
METHOD_NOT_FOUND = -32601
UNKNOWN_VERSION = "0000-00-00"  # asked at --write: the server's answer to a version it does not know


def load_answers() -> dict | None:
    """first_answers.json, or None when it is missing or unreadable."""
    try:
        answers = json.loads(ANSWERS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return answers if isinstance(answers, dict) and {"initialize", "lists"} <= set(answers) else None


def answer(answers: dict, message: dict) -> dict | None:
    """The server's answer to `message` from `answers`, or None where only the server can answer it."""
    method, params = message.get("method"), message.get("params") or {}
    result = None
    if method == "initialize":
        by_version = answers["initialize"]
        result = by_version.get(str(params.get("protocolVersion")), by_version[UNKNOWN_VERSION])
    elif method == "ping":
        result = {"result": {}}
    elif method == "server/discover":
        # Copilot CLI opens with server/discover (2026-07-28) and, held unanswered, falls back to initialize only
        # after about 10 s, on every first start. An error is the fallback signal the protocol gives a client (the
        # MCP SDK's own client falls back on any error): the front is a handshake-era server until the build ends,
        # so the harness's initialize comes at once and the server is later given that initialize, as every other
        # first start.
        return {"jsonrpc": "2.0", "id": message["id"], "error": {
            "code": METHOD_NOT_FOUND, "message": "llm-finetuning: the server's environment is still being built "
            "(its first start): server/discover is answered from the next start on; use initialize"}}
    elif method in LISTS and not params.get("cursor"):
        if method == "tools/list" and os.environ.get("LLM_FINETUNING_READ_ONLY"):
            return None  # read-only lists fewer tools: the server's to say
        result = answers["lists"].get(method)
    return None if result is None else {"jsonrpc": "2.0", "id": message["id"], **result}


class Front:
    """Answers from `answers` until the server is up, then carries lines between the harness and the server."""

    def __init__(self, answers: dict, build: list[str], server: list[str], env: dict, say, ready, log: Path) -> None:
        self.answers, self.server_cmd, self.env, self.say, self.ready = answers, server, env, say, ready
        self.lock = threading.Lock()
        self.waiting: list[bytes] = []  # lines for the server, in order
        self.initialize: dict | None = None  # the harness's initialize, replayed to the server
        self.initialized = False
        self.server: subprocess.Popen | None = None
        self.state = "front"  # then "replaying" (the server has the harness's initialize), "proxy", "failed"
        self.build_pid, self.log = detach(build, log), log
        threading.Thread(target=self._after_build, daemon=True).start()

    def send(self, data: bytes) -> None:
        with self.lock:
            sys.stdout.buffer.write(data if data.endswith(b"\n") else data + b"\n")
            sys.stdout.buffer.flush()

    def _after_build(self) -> None:
        while not self.ready():
            if not _alive(self.build_pid) and not self.ready():
                with self.lock:
                    self.state = "failed"
                    waiting, self.waiting = self.waiting, []
                for line in waiting:
                    self._refuse(line)
                return
            time.sleep(0.25)
        self.server = subprocess.Popen(self.server_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       env=self.env)
        threading.Thread(target=self._from_server, daemon=True).start()
        with self.lock:
            if self.initialize is None:  # the harness has not said initialize yet: the server answers it
                self._to_server_all()
            else:
                self.state = "replaying"
                self._write_server(json.dumps({**self.initialize, "id": REPLAY_ID}).encode())

    def _write_server(self, line: bytes) -> None:
        try:
            self.server.stdin.write(line if line.endswith(b"\n") else line + b"\n")
            self.server.stdin.flush()
        except (OSError, ValueError):
            pass  # the server ended: _from_server ends this process with its code

    def _to_server_all(self) -> None:
        """Under the lock: what waited, in order, then every line straight through."""
        if self.initialized:
            self._write_server(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
        for line in self.waiting:
            self._write_server(line)
        self.waiting = []
        self.state = "proxy"

    def _from_server(self) -> None:
        for line in self.server.stdout:
            if self.state == "replaying" and _id_of(line) == REPLAY_ID:
                with self.lock:
                    self._to_server_all()
                continue
            self.send(line)
        os._exit(self.server.wait())  # the server ended: so does its front

    def _refuse(self, line: bytes) -> None:
        message = _parse(line)
        if isinstance(message, dict) and "id" in message and "method" in message:
            self.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": -32603, "message": f"llm-finetuning: building the server's environment failed: {self.log} "
                "says why; restart the server (or run scripts/launch_server.py --prepare) once it is fixed"}}).encode())

    def take(self, line: bytes) -> None:
        """One line from the harness."""
        with self.lock:
            state = self.state
            if state == "proxy":
                self._write_server(line)
                return
            message = _parse(line)
            if state == "front" and isinstance(message, dict):
                if message.get("method") == "notifications/initialized" and "id" not in message:
                    self.initialized = True
                    return
                reply = answer(self.answers, message) if "id" in message else None
                if reply is not None:
                    if message.get("method") == "initialize":
                        self.initialize = message
                    sys.stdout.buffer.write(json.dumps(reply).encode() + b"\n")
                    sys.stdout.buffer.flush()
                    return
            if state != "failed":
                self.waiting.append(line)
                return
        self._refuse(line)

    def run(self) -> int:
        for line in iter(sys.stdin.buffer.readline, b""):
            if line.strip():
                self.take(line)
        with self.lock:  # the harness closed its end: the server (when up) finishes and ends
            server, self.state = self.server, "closed"
        if server is None:
            return 0  # the build goes on in its own session: the next start finds the environment ready
        try:
            server.stdin.close()
        except OSError:
            pass
        return server.wait()


def detach(command: list[str], log: Path) -> int:
    """Start `command` apart from this process (its child's child, in a session of its own, its output to `log`):
    a harness that ends its check ends the launcher and every process under it (OpenCode does), and the build must
    go on so that the next start finds the environment ready. Its process id."""
    log.parent.mkdir(parents=True, exist_ok=True)
    starter = ("import subprocess, sys\n"
               "with open(sys.argv[1], 'ab') as log:\n"
               "    child = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=log,\n"
               "                             start_new_session=True)\n"
               "print(child.pid)\n")
    said = subprocess.run([sys.executable, "-c", starter, str(log), *command], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, check=True)
    return int(said.stdout.strip())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process under that id: not ours, but there
        return True
    return True


def _parse(line: bytes):
    try:
        return json.loads(line)
    except ValueError:
        return None


def _id_of(line: bytes):
    message = _parse(line)
    return message.get("id") if isinstance(message, dict) else None


def server_answers(python: str = sys.executable) -> dict:
    """What this checkout's server answers: `initialize` for each handshake version it knows (and one it does not),
    each list once (the same under every version, checked)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("LLM_FINETUNING_READ_ONLY", None)
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    answers: dict = {"initialize": {}, "lists": {}}
    for version in (*HANDSHAKE_PROTOCOL_VERSIONS, UNKNOWN_VERSION):
        with subprocess.Popen([python, "-m", "mcp_server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              cwd=ROOT, env=env) as server:
            said = _ask(server, [("initialize", {"protocolVersion": version, "capabilities": {},
                                                 "clientInfo": {"name": "launch_front", "version": "0"}}),
                                 *((method, None) for method in LISTS)])
        answers["initialize"][version] = said[0]
        for method, reply in zip(LISTS, said[1:]):
            if answers["lists"].setdefault(method, reply) != reply:
                raise SystemExit(f"{method} differs under protocol version {version}: the front cannot answer it")
    return answers


def _ask(server: subprocess.Popen, requests: list) -> list[dict]:
    replies = []
    for number, (method, params) in enumerate(requests):
        request = {"jsonrpc": "2.0", "id": number, "method": method, **({} if params is None else {"params": params})}
        server.stdin.write(json.dumps(request).encode() + b"\n")
        server.stdin.flush()
        reply = json.loads(server.stdout.readline())
        replies.append({k: v for k, v in reply.items() if k in ("result", "error")})
        if number == 0:
            server.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    server.stdin.close()
    return replies


def write() -> None:
    ANSWERS.write_text(json.dumps(server_answers(), sort_keys=True) + "\n", encoding="utf-8")


def stale() -> bool:
    """first_answers.json differs from what this checkout's server answers now (or is missing)."""
    try:
        return json.loads(ANSWERS.read_text(encoding="utf-8")) != server_answers()
    except (OSError, ValueError):
        return True


def main() -> int:
    if sys.argv[1:2] == ["--write"]:
        write()
        print(f"wrote {ANSWERS.relative_to(ROOT)}")
        return 0
    if stale():
        print(f"{ANSWERS.relative_to(ROOT)} is stale: run `python scripts/launch_front.py --write` (or "
              "scripts/dump_doors.py --write)")
        return 1
    print(f"{ANSWERS.relative_to(ROOT)} is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
