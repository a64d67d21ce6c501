"""Issue 48, "The server's inputs" as a table: every JSON-RPC message shape a client (or anything writing to the
server's stdin) can send, x the answer JSON-RPC 2.0 and MCP prescribe, and the server outlives each one.

The table is `CELLS`, generated from declarations: every JSON type a request id can have (`ID_VALUES`: MCP takes a
string or an integer; anything else, null included, is an Invalid Request answered with id null, since the id cannot
be read), every JSON type a `notifications/cancelled` requestId can have (unknown, finished or malformed: never
answered, never fatal), every non-object `params` of a notification, invalid JSON, batches, an unknown method, a
client response nobody asked for, a huge request, concurrent requests. The cells run against one server process,
one after another; after each cell a `ping` with its own id must be answered (the server is still there), and a
cell's replies are those with its ids, plus the id-null errors written before its ping's reply.

What needs a server of its own follows the table: a training interpreter that never answers (the call times out,
the server answers meanwhile), the read-only server (imports no reward module), logging/setLevel, the skills
(SEP-2640), the size of tools/list, `python -m mcp_server --help`, and the CLI's --json with a reward that prints.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import ROOT, checkout_env, cli_here, run_cli_json

HELLO = {"jsonrpc": "2.0", "id": "hello", "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "table", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
INVALID_REQUEST, PARSE_ERROR, METHOD_NOT_FOUND, INVALID_PARAMS = -32600, -32700, -32601, -32602

# Every JSON type, as a request id: MCP's id is a string or an integer (JSON-RPC 2.0 allows null and fractions
# but discourages them; MCP does not allow them).
ID_VALUES: dict[str, object] = {"integer": 7, "negative integer": -3, "big integer": 2**70, "string": "s-1",
                                "empty string": "", "float": 1.5, "integral float": 2.0, "boolean": True,
                                "null": None, "object": {"a": 1}, "array": [1],
                                # round 12, M1: its reply could not be written (the SDK's writer died)
                                "lone surrogate": "\ud800", "lone low surrogate in text": "a\udc00b"}
# Every JSON type, as a param that must be an object.
NON_OBJECTS: dict[str, object] = {"string": "x", "number": 3, "array": [1], "boolean": False}


def valid_id(value) -> bool:
    if isinstance(value, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class Cell:
    """Lines sent, the results expected (by id), and the id-null errors expected (their codes, in order)."""

    name: str
    lines: list
    results: dict = field(default_factory=dict)  # id -> "result" or an error code
    nulls: list = field(default_factory=list)
    wait_s: float = 30.0
    says: str = ""  # what every error reply of the cell says


def request(request_id, method: str = "ping", params=None) -> dict:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    return message if params is None else {**message, "params": params}


def notification(method: str, params=None) -> dict:
    message = {"jsonrpc": "2.0", "method": method}
    return message if params is None else {**message, "params": params}


def nested(depth: int):
    """`depth` arrays, each inside the one before."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def cells() -> list[Cell]:
    table = []
    for kind, value in ID_VALUES.items():  # a request id of every JSON type
        table.append(Cell(f"id {kind}", [request(value)], results={value: "result"} if valid_id(value) else {},
                          nulls=[] if valid_id(value) else [INVALID_REQUEST]))
    for kind, value in {**ID_VALUES, "unknown request": 987654, "finished request": "done-1"}.items():
        # cancellation of a request never sent, long answered, or named by a malformed id: no answer, no harm
        unreadable = isinstance(value, str) and not valid_id(value)  # no Unicode: the whole line is refused
        table.append(Cell(f"cancel {kind}", [request("done-1"), notification(
            "notifications/cancelled", {"requestId": value, "reason": "table"})], results={"done-1": "result"},
            nulls=[INVALID_PARAMS] if unreadable else []))
    table.append(Cell("cancel without requestId", [notification("notifications/cancelled", {})]))
    for kind, value in NON_OBJECTS.items():  # a notification's params that are no object: Invalid Request
        for method in ("notifications/cancelled", "notifications/initialized", "notifications/progress"):
            table.append(Cell(f"{method} params {kind}", [notification(method, value)], nulls=[INVALID_REQUEST]))
    table += [
        Cell("progress notification for no request", [notification(
            "notifications/progress", {"progressToken": {"x": 1}, "progress": "half"})]),
        Cell("unknown notification", [notification("notifications/no_such_thing", {"a": 1})]),
        Cell("response nobody asked for", [{"jsonrpc": "2.0", "id": 424242, "result": {}}]),
        Cell("error response nobody asked for", [{"jsonrpc": "2.0", "id": 424243,
                                                   "error": {"code": 1, "message": "x"}}]),
        Cell("response nobody asked for, its id a lone surrogate", [{"jsonrpc": "2.0", "id": "\ud800", "result": {}}],
             nulls=[INVALID_REQUEST]),
        Cell("error response, its id a lone surrogate", [{"jsonrpc": "2.0", "id": "\udc00",
                                                          "error": {"code": 1, "message": "x"}}],
             nulls=[INVALID_REQUEST]),
        Cell("tools/call, its id a lone surrogate", [request("\udc00", "tools/call", {
            "name": "list_rewards", "arguments": {}})], nulls=[INVALID_REQUEST]),
        Cell("invalid JSON", ['{"jsonrpc": "2.0", "id": 5, "method": "ping"'], nulls=[PARSE_ERROR]),
        Cell("not JSON at all", ["hello"], nulls=[PARSE_ERROR]),
        Cell("a JSON string", ['"ping"'], nulls=[INVALID_REQUEST]),
        Cell("batch of requests", [[request("b-1"), request("b-2")]], nulls=[INVALID_REQUEST]),
        Cell("empty batch", [[]], nulls=[INVALID_REQUEST]),
        Cell("jsonrpc 1.0", [{"jsonrpc": "1.0", "id": "v1", "method": "ping"}], results={"v1": INVALID_REQUEST}),
        Cell("no method", [{"jsonrpc": "2.0", "id": "nm"}], results={"nm": INVALID_REQUEST}),
        Cell("request params a string", [request("ps", "tools/list", "x")], results={"ps": INVALID_REQUEST}),
        Cell("unknown method", [request("um", "no/such/method")], results={"um": METHOD_NOT_FOUND}),
        Cell("tools/call of no tool", [request("nt", "tools/call", {"name": "no_such_tool", "arguments": {}})],
             results={"nt": "result"}),
        Cell("tools/call params wrong type", [request("wt", "tools/call", {"name": 5})],
             results={"wt": INVALID_PARAMS}),
        Cell("huge request (8 MB)", [request("huge", "ping", {"_meta": {"pad": "x" * 8_000_000}})],
             results={"huge": "result"}),
        Cell("huge tool argument", [request("ht", "tools/call", {"name": "diagnose_run",
                                                                 "arguments": {"source": "y" * 2_000_000}})],
             results={"ht": "result"}),
        # issue 48, sixth round: 250k unknown argument names held every reply for seconds (2M: a minute); refused
        # unread by the tool, and the ping after it answered at once
        Cell("tools/call with 250k argument names", [request("many", "tools/call", {
            "name": "list_runs", "arguments": {f"k{i}": 0 for i in range(250_000)}})],
             results={"many": INVALID_REQUEST}, wait_s=2.0),
        Cell("ping with 1M keys in its params", [request("keys", "ping", {
            "x": {f"k{i}": 0 for i in range(1_000_000)}})],
             results={"keys": INVALID_REQUEST}, wait_s=2.0),
        Cell("tools/call with 5000 argument names", [request("names", "tools/call", {
            "name": "list_runs", "arguments": {f"k{i}": 0 for i in range(5000)}})], results={"names": INVALID_PARAMS}),
        Cell("tools/call with 1000 unknown argument names", [request("unknown-1000", "tools/call", {
            "name": "list_runs", "arguments": {f"k{i}": 0 for i in range(1000)}})], results={"unknown-1000": "result"}),
        Cell("a line over 16 MiB", [request("long", "ping", {"_meta": {"pad": "x" * 17_000_000}})],
             results={"long": INVALID_REQUEST}, wait_s=5.0),
        Cell("concurrent requests", [request(f"c-{i}", "tools/list" if i % 2 else "ping") for i in range(24)],
             results={f"c-{i}": "result" for i in range(24)}),
        Cell("concurrent tool calls", [request(f"t-{i}", "tools/call", {"name": "list_rewards", "arguments": {}})
                                       for i in range(8)], results={f"t-{i}": "result" for i in range(8)}),
        # issue 48, ninth round: nesting past what the SDK's parser reads was blamed on "a lone surrogate"
        *[Cell(f"tools/call arguments {depth} levels deep", [request(f"deep-{depth}", "tools/call", {
            "name": "list_runs", "arguments": {"x": nested(depth - 3)}})], results={f"deep-{depth}": expected},
            says="" if expected == "result" else f"nests {depth} levels of arrays and objects (itself the first); "
            "at most 201 are read") for depth, expected in ((200, "result"), (201, "result"), (202, INVALID_PARAMS),
                                                            (300, INVALID_PARAMS), (900, INVALID_PARAMS))],
        # round 14, W1: a failed request's traceback (the name in its message) went through rich's log handler on
        # the event loop, in time growing with the square of the name's length (60k characters: 172 s)
        *[Cell(f"{what} 100k characters long", [request(f"long-{what}", method, params)],
               results={f"long-{what}": expected}, wait_s=5.0) for what, method, params, expected in (
            ("unknown prompt name", "prompts/get", {"name": "p" * 100_000}, 0),
            ("unknown tool name", "tools/call", {"name": "t" * 100_000, "arguments": {}}, "result"),
            ("unknown resource uri", "resources/read", {"uri": "file:///" + "r" * 100_000}, INVALID_PARAMS))],
        Cell("duplicate string and integer ids", [request("5"), request(5)], results={"5": "result", 5: "result"}),
    ]
    return table + limit_cells() + reused_id_cells()


def sized(request_id, size: int, pad: str = "x") -> str:
    """A ping of exactly `size` characters (its line's ending not counted), padded with `pad` in its _meta."""
    bare = json.dumps(request(request_id, "ping", {"_meta": {"pad": ""}}))
    return json.dumps(request(request_id, "ping", {"_meta": {"pad": pad * (size - len(bare))}}))


def colons(request_id, count: int) -> str:
    """A ping with exactly `count` colons (each object key takes one; these are in a string, counted alike)."""
    bare = json.dumps(request(request_id, "ping", {"_meta": {"pad": ""}}))
    return json.dumps(request(request_id, "ping", {"_meta": {"pad": ":" * (count - bare.count(":"))}}))


def limit_cells() -> list[Cell]:
    """m14 #16: each limit of the wire (jsonrpc.MAX_LINE, MAX_COLONS, MAX_ARGUMENTS; MAX_DEPTH has its rows above)
    at the limit, answered, and one over, refused naming the limit."""
    from mcp_server.jsonrpc import MAX_ARGUMENTS, MAX_COLONS, MAX_LINE

    def call(request_id, names: int) -> dict:
        return request(request_id, "tools/call", {"name": "list_runs", "arguments": {f"k{i}": 0 for i in range(names)}})

    return [
        Cell("a message of MAX_LINE characters", [sized("line-at", MAX_LINE)], results={"line-at": "result"}),
        Cell("a message of MAX_LINE + 1 characters", [sized("line-over", MAX_LINE + 1)],
             results={"line-over": INVALID_REQUEST},
             says=f"a message of {MAX_LINE + 1} characters; at most {MAX_LINE}"),
        Cell("a message of MAX_COLONS colons", [colons("colons-at", MAX_COLONS)], results={"colons-at": "result"}),
        Cell("a message of MAX_COLONS + 1 colons", [colons("colons-over", MAX_COLONS + 1)],
             results={"colons-over": INVALID_REQUEST}, says=f"with {MAX_COLONS + 1} colons; at most {MAX_COLONS}"),
        Cell("tools/call with MAX_ARGUMENTS argument names", [call("args-at", MAX_ARGUMENTS)],
             results={"args-at": "result"}),
        Cell("tools/call with MAX_ARGUMENTS + 1 argument names", [call("args-over", MAX_ARGUMENTS + 1)],
             results={"args-over": INVALID_PARAMS}, says=f"holds {MAX_ARGUMENTS + 1} names; a tool call takes at most "
             f"{MAX_ARGUMENTS}"),
    ]


# Each kind of reply a request with a readable id gets (m14 #20): the request, and what it is answered with.
REPLY_KINDS: dict[str, tuple[str, dict | None, object]] = {
    "result": ("ping", None, "result"),
    "a tool's error result": ("tools/call", {"name": "no_such_tool", "arguments": {}}, "result"),
    "Method not found": ("no/such/method", None, METHOD_NOT_FOUND),
    "Invalid params": ("tools/call", {"name": 5}, INVALID_PARAMS),
    "Invalid params (no resource)": ("resources/read", {"uri": "file:///no/such/resource"}, INVALID_PARAMS),
    "an error of code 0 (no prompt)": ("prompts/get", {"name": "no_such_prompt"}, 0),
}


def reused_id_cells() -> list[Cell]:
    """m14 #20: an id whose request was answered, with a result or any error, is free again: the same id sent
    after the answer is run and answered (refused only while its first request is in flight). Two cells a kind:
    the table sends a cell's ping, and waits for its answer, before the next cell."""
    table = []
    for kind, (method, params, expected) in REPLY_KINDS.items():
        table += [Cell(f"id answered with {kind}", [request(f"again {kind}", method, params)],
                       results={f"again {kind}": expected}),
                  Cell(f"id answered with {kind}, sent again", [request(f"again {kind}")],
                       results={f"again {kind}": "result"})]
    return table


CELLS = cells()


class Wire:
    """A server process over stdio, read line by line with a deadline."""

    def __init__(self, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "mcp_server", *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                                     env=checkout_env({"LLM_FINETUNING_WORKSPACE": os.getcwd(), **(env or {})}))
        self.buffer = b""

    def send(self, message) -> None:
        line = message if isinstance(message, str) else json.dumps(message)
        self.proc.stdin.write(line.encode("utf-8", "surrogatepass") + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def until(self, done, timeout: float) -> list[dict]:
        """Replies until `done(replies)` is true or the deadline passes (notifications from the server dropped)."""
        replies, deadline = [], time.monotonic() + timeout
        while not done(replies):
            reply = self.read(max(0.0, deadline - time.monotonic()))
            if reply is None:
                break
            if "method" not in reply:
                replies.append(reply)
        return replies

    def hello(self) -> dict:
        self.send(HELLO)
        (reply,) = self.until(lambda r: len(r) == 1, 120)
        self.send(INITIALIZED)
        return reply

    def close(self) -> str:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stderr.read().decode(errors="replace")


@pytest.fixture(scope="module")
def table_run():
    """Every cell against one server; per cell its replies, whether its ping was answered after it, and the
    server's exit code. A server that dies (or stops answering) is replaced, so each later cell is still judged."""
    outcomes, stderr, wire = {}, [], None
    try:
        for index, cell in enumerate(CELLS):
            if wire is None:
                wire = Wire()
                wire.hello()
            ping = f"alive-{index}"
            try:
                for line in [*cell.lines, request(ping)]:
                    wire.send(line)
            except BrokenPipeError:
                pass
            wanted = {json.dumps(i) for i in cell.results} | {json.dumps(ping)}
            replies = wire.until(lambda r: wanted <= {json.dumps(x.get("id")) for x in r}, cell.wait_s)
            alive = any(r.get("id") == ping for r in replies)
            outcomes[cell.name] = ([r for r in replies if r.get("id") != ping], alive, wire.proc.poll())
            if not alive or wire.proc.poll() is not None:
                stderr.append(wire.close())
                wire = None
    finally:
        if wire is not None:
            stderr.append(wire.close())
    return outcomes, "\n".join(stderr)


@pytest.mark.slow
@pytest.mark.parametrize("cell", CELLS, ids=[c.name for c in CELLS])
def test_each_input_gets_its_answer_and_the_server_lives_on(table_run, cell):
    outcomes, stderr = table_run
    assert cell.name in outcomes, f"the server was gone before this cell: {stderr[-2000:]}"
    replies, alive, exit_code = outcomes[cell.name]
    assert alive and exit_code is None, f"no answer to the ping after this cell (exit {exit_code}): {stderr[-2000:]}"
    by_id = {json.dumps(r["id"]): r for r in replies if r.get("id") is not None}
    for request_id, expected in cell.results.items():
        reply = by_id.pop(json.dumps(request_id), None)
        assert reply is not None, f"no reply to id {request_id!r}: {replies}"
        if expected == "result":
            assert "result" in reply, reply
        else:
            assert reply.get("error", {}).get("code") == expected, reply
            assert cell.says in reply["error"]["message"], reply
    assert not by_id, f"replies to ids never sent: {by_id}"
    nulls = [r for r in replies if r.get("id") is None]
    assert [r.get("error", {}).get("code") for r in nulls] == cell.nulls, replies
    for reply in nulls:
        assert len(reply["error"]["message"]) > 20, reply  # says what was wrong


@pytest.mark.slow
def test_a_refused_size_names_its_limit_and_unknown_names_are_counted_past_ten(table_run):
    """The two size refusals name the limit; a call with 1000 unknown names names ten and counts the rest (naming
    each, with its "did you mean", took seconds for 250k)."""
    outcomes, stderr = table_run
    (many,) = outcomes["tools/call with 250k argument names"][0]
    assert " colons; " in many["error"]["message"] and "at most 100000" in many["error"]["message"], many
    (names,) = outcomes["tools/call with 5000 argument names"][0]
    assert "5000 names" in names["error"]["message"] and "at most 1000" in names["error"]["message"], names
    (long,) = outcomes["a line over 16 MiB"][0]
    assert f"at most {16 * 1024 * 1024}" in long["error"]["message"], long
    (unknown,) = outcomes["tools/call with 1000 unknown argument names"][0]
    text = unknown["result"]["content"][0]["text"]
    assert unknown["result"]["isError"] and "'k9'" in text and "'k10'" not in text and "990 more" in text, text


def test_the_table_covers_every_json_type_as_an_id_and_a_cancelled_request_id():
    kinds = {type(v) for v in ID_VALUES.values()}
    assert kinds == {int, str, float, bool, type(None), dict, list}
    names = {c.name for c in CELLS}
    for kind in ID_VALUES:
        assert {f"id {kind}", f"cancel {kind}"} <= names, kind
    for kind in NON_OBJECTS:
        assert any(n.endswith(f"params {kind}") for n in names), kind


# ---------------------------------------------------------------- inputs that need a server of their own
ENDS_WITHIN_S = 60  # a server answers and exits in about a second once its input ends; one that waits never does


@pytest.mark.slow
@pytest.mark.parametrize("kind", REPLY_KINDS)
def test_the_end_of_input_after_each_kind_of_reply_ends_the_server_every_request_answered(kind):
    """m14 #20: a client closes the server's input to end it, then reads the answers still due. After a request of
    each reply kind (a result, each error code) and a ping sent behind it, the input's end: both are answered and
    the server exits (0). An error reply not taken for an answer held the end of input forever."""
    method, params, expected = REPLY_KINDS[kind]
    wire = Wire()
    try:
        wire.hello()
        wire.send(request("last", method, params))
        wire.send(request("behind"))
        wire.proc.stdin.close()
        deadline = time.monotonic() + ENDS_WITHIN_S
        replies = wire.until(lambda r: False, ENDS_WITHIN_S)  # every line until the server's output ends
        try:
            code = wire.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
    finally:
        stderr = wire.close()
    by_id = {r.get("id"): r for r in replies}
    assert set(by_id) == {"last", "behind"}, replies
    assert (expected == "result") == ("result" in by_id["last"]), by_id["last"]
    if expected != "result":
        assert by_id["last"]["error"]["code"] == expected, by_id["last"]
    assert "result" in by_id["behind"], by_id["behind"]
    assert code == 0, f"the server did not end after its input ended (exit {code}): {stderr[-2000:]}"


@pytest.mark.slow
def test_a_training_interpreter_that_never_answers_times_out_and_the_server_answers_meanwhile(tmp_path):
    """A training interpreter that takes the call and says nothing (hung, or no worker at all) held the call, every
    later call needing it and the end of input forever. Now the worker's silence past its limit (its heartbeat
    stopped) ends the call with an error naming the interpreter and the limit; pings are answered meanwhile."""
    hung = tmp_path / "hung-python"
    hung.write_text("#!/bin/sh\nexec sleep 100000\n")
    hung.chmod(0o755)
    wire = Wire(env={"LLM_FINETUNING_PYTHON": str(hung), "LLM_FINETUNING_WORKER_SILENCE_S": "2",
                     "LLM_FINETUNING_WORKSPACE": str(tmp_path)})
    try:
        wire.hello()
        call = {"name": "validate_grpo_config", "arguments": {"config": {
            "model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "learning_rate": 1e-6,
            "reward_funcs": ["mcp_server.rewards.format_reward"]}, "gpu": "H100", "rehearse": False}}
        started = time.monotonic()
        wire.send(request("call", "tools/call", call))
        wire.send(request("meanwhile"))
        first = wire.until(lambda r: len(r) >= 1, 30)
        assert first and first[0]["id"] == "meanwhile", first  # answered while the call waits on the interpreter
        (answer,) = wire.until(lambda r: len(r) == 1, 90)
        waited = time.monotonic() - started
        wire.send(request("again", "tools/call", call))  # the next call starts a fresh worker, and times out too
        (again,) = wire.until(lambda r: len(r) == 1, 90)
    finally:
        stderr = wire.close()
    text = json.dumps(answer)
    assert answer["id"] == "call" and f"{hung}" in text and "sent nothing for 2 s" in text, answer
    assert waited < 60 and again["id"] == "again" and "sent nothing for 2 s" in json.dumps(again), (waited, again)
    assert "Traceback" not in stderr


def _loud_reward(folder: Path, name: str) -> Path:
    """A reward module that prints and leaves a mark when imported (its module runs)."""
    folder.mkdir(parents=True, exist_ok=True)
    module = folder / f"{name}.py"
    module.write_text(
        "import pathlib\n"
        "print('IMPORTED: this module ran')\n"
        "pathlib.Path(__file__).with_suffix('.ran').write_text('ran')\n\n\n"
        "def reward(completions, **kwargs):\n"
        "    texts = [c if isinstance(c, str) else c[-1]['content'] for c in completions]\n"
        "    return [1.0 if t.strip() else 0.0 for t in texts]\n")
    return module


@pytest.mark.slow
def test_the_read_only_server_runs_no_reward_module_and_still_judges_the_gate(workspace, tiny_model, tmp_path,
                                                                               monkeypatch):
    """The read-only server imported (ran) a run's reward module to answer check_inspection_gate and
    validate_grpo_config. Now it finds the module's source on disk and imports nothing: the gate still opens (the
    reward code's hash, read from the source, is the one the verdict pinned), validation still finds the reward,
    and a misspelt one is still refused by name; the module never ran in the read-only server."""
    from support import emit_run, pass_inspection

    folder = tmp_path / "user-code"
    module = _loud_reward(folder, "loud_gate_reward")
    monkeypatch.syspath_prepend(str(folder))
    run = emit_run("read-only", rewards=[{"name": "loud_gate_reward.reward", "params": {}, "weight": 1.0}])
    pass_inspection(run)  # in this process (not read-only): the module ran here
    marker = module.with_suffix(".ran")
    marker.unlink()
    config = str(run / "train" / "config.yaml")
    env = {"LLM_FINETUNING_READ_ONLY": "1", "LLM_FINETUNING_WORKSPACE": str(workspace),
           "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    wire = Wire(env=env)
    try:
        wire.hello()
        wire.send(request("gate", "tools/call", {"name": "check_inspection_gate", "arguments": {"run": str(run)}}))
        wire.send(request("valid", "tools/call", {"name": "validate_grpo_config", "arguments": {
            "config": {"model_name_or_path": str(tiny_model), "learning_rate": 1e-6,
                       "reward_funcs": ["loud_gate_reward.reward", "loud_gate_reward.no_such"]}, "gpu": "cpu"}}))
        wire.send(request("run", "tools/call", {"name": "validate_grpo_config", "arguments": {"config_path": config}}))
        replies = {r["id"]: r for r in wire.until(lambda r: len(r) == 3, 300)}
    finally:
        stderr = wire.close()
    assert not marker.exists(), "the read-only server ran the reward module"
    assert "IMPORTED" not in stderr
    gate = replies["gate"]["result"]["structuredContent"]
    assert gate["passed"], gate
    findings = replies["valid"]["result"]["structuredContent"]["findings"]
    unresolvable = [f for f in findings if f["code"] == "reward_unresolvable"]
    assert [f["field"] for f in unresolvable] == ["reward_funcs[1]"], findings
    assert "defines no 'no_such'" in unresolvable[0]["message"]
    run_result = replies["run"]["result"]["structuredContent"]  # its rewards.json, resolved from the source
    assert run_result["valid"] and "rehearsal_not_run" in {f["code"] for f in run_result["findings"]}, run_result


def test_the_cli_prints_only_its_json_when_a_reward_module_prints_at_import(tmp_path, tiny_model, monkeypatch):
    """A reward module that prints at import put its line before the JSON of `validate-config --json`: the output
    was no JSON. Stdout carries only the result; what the work prints goes to stderr."""
    folder = tmp_path / "user-code"
    _loud_reward(folder, "loud_cli_reward")
    monkeypatch.syspath_prepend(str(folder))
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"model_name_or_path": str(tiny_model), "learning_rate": 1e-6,
                                  "reward_funcs": ["loud_cli_reward.reward"]}))
    proc = cli_here("validate-config", str(config), "--gpu", "cpu", "--no-rehearse", "--json")
    assert (folder / "loud_cli_reward.ran").exists()  # the module did run (this CLI is not read-only)
    result = json.loads(proc.stdout)  # nothing but the result
    assert "reward_unresolvable" not in {f["code"] for f in result["findings"]}, result
    assert "IMPORTED" in proc.stderr


def test_the_cli_json_holds_when_a_reward_module_writes_to_descriptor_1(tmp_path, tiny_model, monkeypatch, capfd):
    """A reward module that writes to file descriptor 1 at import (`os.write(1, ...)`, as a C extension or a child
    process would) put its bytes before the JSON of `validate-config --json`: the fix had redirected sys.stdout,
    not the descriptor (issue 48, fifth round). While the core runs, descriptor 1 is stderr."""
    folder = tmp_path / "user-code"
    folder.mkdir()
    (folder / "fd_cli_reward.py").write_text(
        "import os\n"
        "os.write(1, b'FD1-BYTES-AT-IMPORT\\n')\n\n\n"
        "def reward(completions, **kwargs):\n"
        "    return [1.0 for _ in completions]\n")
    monkeypatch.syspath_prepend(str(folder))
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"model_name_or_path": str(tiny_model), "learning_rate": 1e-6,
                                  "reward_funcs": ["fd_cli_reward.reward"]}))
    capfd.readouterr()
    proc = cli_here("validate-config", str(config), "--gpu", "cpu", "--no-rehearse", "--json")
    descriptors = capfd.readouterr()
    assert "FD1-BYTES-AT-IMPORT" not in descriptors.out  # the process's real stdout holds nothing of the module's
    assert "FD1-BYTES-AT-IMPORT" in descriptors.err  # its bytes went to stderr: the module did run
    result = json.loads(proc.stdout)
    assert "reward_unresolvable" not in {f["code"] for f in result["findings"]}, result


@pytest.mark.slow
def test_the_cli_process_json_holds_and_ends_when_a_reward_module_starts_a_writing_thread(workspace, tiny_model):
    """A reward module whose import starts a thread (not a daemon) that writes to descriptor 1 and prints, on and
    on: its bytes came after the core returned, on the real stdout, and the CLI waited for the thread before it
    exited (issue 48, sixth round). `inspect-rewards --json` imports the run's reward in the CLI's own process:
    its output is the result alone, and the process ends once it is written."""
    from support import hand_made_run

    module = f"thread_reward_{os.getpid()}"
    (workspace / f"{module}.py").write_text(
        "import os, threading, time\n\n\n"
        "def _on_and_on():\n"
        "    end = time.monotonic() + 600\n"
        "    while time.monotonic() < end:\n"
        "        os.write(1, b'THREAD-BYTES\\n')\n"
        "        print('THREAD-PRINT', flush=True)\n"
        "        time.sleep(0.02)\n\n\n"
        "threading.Thread(target=_on_and_on, daemon=False).start()\n\n\n"
        "def reward(completions, **kwargs):\n"
        "    return [1.0 for _ in completions]\n")
    run_dir = hand_made_run(workspace, tiny_model, "threaded", [["4", "5"], ["6", "7"]], ["4", "6"],
                            rewards=[{"name": f"{module}.reward"}])
    try:
        proc = subprocess.run([sys.executable, "-m", "mcp_server.cli", "inspect-rewards", str(run_dir), "--json"],
                              cwd=workspace, env=checkout_env(), capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the CLI waited for the reward module's thread: {str(exc.stdout)[-300:]}")
    result = json.loads(proc.stdout)  # nothing but the result
    assert proc.returncode == 0 and result["num_samples"] == 4, proc.stderr[-2000:]
    assert "THREAD-BYTES" in proc.stderr and "THREAD-PRINT" in proc.stderr  # the thread ran; its output: stderr


@pytest.mark.slow
def test_the_server_stream_holds_when_a_reward_module_writes_to_descriptor_1(workspace, tiny_model, tmp_path):
    """The MCP door of the row above: validate_grpo_config imports a reward module that writes to descriptor 1;
    every line the server writes is still a JSON-RPC message (Wire.read parses each), and the reward resolved."""
    folder = tmp_path / "user-code"
    folder.mkdir()
    (folder / "fd_mcp_reward.py").write_text(
        "import os\nos.write(1, b'FD1-BYTES-AT-IMPORT\\n')\n\n\n"
        "def reward(completions, **kwargs):\n    return [1.0 for _ in completions]\n")
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace),
           "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    wire = Wire(env=env)
    try:
        wire.hello()
        wire.send(request("valid", "tools/call", {"name": "validate_grpo_config", "arguments": {
            "config": {"model_name_or_path": str(tiny_model), "learning_rate": 1e-6,
                       "reward_funcs": ["fd_mcp_reward.reward"]}, "gpu": "cpu", "rehearse": False}}))
        replies = {r["id"]: r for r in wire.until(lambda r: len(r) == 1, 300)}
        wire.send(request("after", "ping"))
        assert wire.until(lambda r: len(r) == 1, 60)[0]["id"] == "after"
    finally:
        stderr = wire.close()
    findings = replies["valid"]["result"]["structuredContent"]["findings"]
    assert "reward_unresolvable" not in {f["code"] for f in findings}, findings
    assert "FD1-BYTES-AT-IMPORT" in stderr  # the module ran; its bytes went to stderr


def _bad_name_workspace(root: Path) -> Path:
    """A workspace with a run folder whose name is not UTF-8 (b"bad\\xffname") beside a plain one."""
    os.makedirs(os.fsencode(root / "runs") + b"/bad\xffname/train")
    (root / "runs" / "good" / "train").mkdir(parents=True)
    return root


def _listed(runs: list[dict]) -> dict:
    return {row["run"]: row for row in runs}


def test_a_run_folder_whose_name_is_not_utf8_is_listed_unreadable_by_the_cli_and_the_rest_listed(tmp_path):
    """Issue 48, round 9 (M2a): `mkdir runs/$'bad\\xffname'` made list-runs --json a UnicodeEncodeError."""
    root = _bad_name_workspace(tmp_path / "ws")
    proc, out = run_cli_json("list-runs", here=True, env={"LLM_FINETUNING_WORKSPACE": str(root)})
    rows = _listed(out["runs"])
    assert proc.returncode == 0 and rows["good"]["state"] == "not_launched", out
    assert rows["bad\\xffname"]["state"] == "unreadable" and "not UTF-8" in rows["bad\\xffname"]["error"], out
    assert rows["bad\\xffname"]["run_dir"].endswith("runs/bad\\xffname"), out


@pytest.mark.slow
def test_a_run_folder_whose_name_is_not_utf8_leaves_the_mcp_list_runs_whole(tmp_path):
    """The same folder made the MCP tool list_runs answer "Error executing tool list_runs": no run listed."""
    root = _bad_name_workspace(tmp_path / "ws")
    wire = Wire(env={"LLM_FINETUNING_WORKSPACE": str(root)})
    try:
        wire.hello()
        wire.send(request("list", "tools/call", {"name": "list_runs", "arguments": {}}))
        (reply,) = wire.until(lambda r: len(r) == 1, 120)
    finally:
        wire.close()
    result = reply["result"]
    assert not result.get("isError"), result
    rows = _listed(result["structuredContent"]["runs"])
    assert rows["good"]["state"] == "not_launched" and rows["bad\\xffname"]["state"] == "unreadable", rows
