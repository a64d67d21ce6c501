"""The stdio transport with JSON-RPC error replies: a line the MCP SDK cannot read as a message (not JSON, nested
past what a parser reads, no `method`, `jsonrpc` other than "2.0", a batch, a request whose id is no string or
integer) gets the reply JSON-RPC 2.0 prescribes (-32700 Parse error, -32600 Invalid Request, -32602 Invalid params
for text that is no Unicode, a lone surrogate, or nested past MAX_DEPTH; with the request's id when it can be read,
else null), where the SDK's own transport drops it silently and leaves the client waiting. At the end of input,
each request still running is answered before the session ends. A line over MAX_LINE characters or MAX_COLONS
colons, or a tools/call with over MAX_ARGUMENTS argument names, is refused before it is parsed or validated, so one
huge message cannot hold every other reply. A request whose id a request still in flight holds is refused (id
null) and not run. The table of inputs and answers: tests/test_server_inputs.py.

Each line is checked with the SDK's own message model before the SDK sees it; a good line goes on unchanged, and
the reply to a bad one goes out through the SDK's write stream, so frames never interleave. An initialize after a
2026-07-28 opening (Copilot CLI's fallback when its server/discover goes unanswered) is answered (_serve_eras).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from functools import partial

import anyio
import mcp_types as types
from mcp.server.runner import serve_dual_era_loop
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mcp_server.errors import one_line, short

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
# Issue 48: one huge message held every reply (a ping's too) while it was read: 250k unknown argument names took
# seconds of validation, 2M a minute. A line longer than MAX_LINE is refused before it is parsed (the table's 8 MB
# request still passes), as is one with more than MAX_COLONS colons (every object key has one), and a tools/call
# with more than MAX_ARGUMENTS argument names before the tool sees it (no tool has a hundred fields).
MAX_LINE = 16 * 1024 * 1024  # characters
MAX_COLONS = 100_000  # each object key takes one; parsing is slow per key (1M keys: seconds), not per character
MAX_ARGUMENTS = 1000
MODERN_KEY = "io.modelcontextprotocol/protocolVersion"  # in `_meta`: a 2026-07-28 request
MAX_DEPTH = 201  # levels of arrays and objects the SDK's JSON parser (jiter) reads, the message object the first
_LEADING_ID = re.compile(r'\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*"[^"\\]*"\s*,)*'  # simple keys before "id"
                         r'\s*"id"\s*:\s*(-?\d{1,30}|"[^"\\]{0,200}")\s*[,}]')
JSON_TYPES = {float: "a fraction", bool: "a boolean", dict: "an object", list: "an array", str: "a string",
              int: "an integer", type(None): "null"}


def valid_id(value) -> bool:
    """MCP's request id: a string or an integer (JSON-RPC allows null and fractions; MCP does not); a string that
    can be written back (a lone surrogate, "\ud800", cannot: the SDK's writer died on its reply, round 12 M1)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    return isinstance(value, int) and not isinstance(value, bool)


def bad_id_reply(line: str) -> types.JSONRPCError | None:
    """The Invalid Request error for a message with a `method` and an `id` that is no string or integer (a float,
    a boolean, null, an object, a list), which the SDK reads as a notification and never answers; else None."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or "id" not in data or valid_id(data["id"]):
        return None
    got = "null" if data["id"] is None else f"{JSON_TYPES[type(data['id'])]}, {short(json.dumps(data['id']), 40)}"
    return _error(None, INVALID_REQUEST, f"Invalid Request: id must be a string or an integer, got {got} (a "
                  "notification carries no id)")


def error_reply(line: str, exc: Exception) -> types.JSONRPCError:
    """The JSON-RPC error for a line that is no valid message."""
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        data = None
    request_id = data.get("id") if isinstance(data, dict) else None
    if isinstance(request_id, str) and not valid_id(request_id):
        return _error(None, INVALID_REQUEST, "Invalid Request: the id must be Unicode text (a lone surrogate escape "
                      "such as \\ud800 is not)")
    if not valid_id(request_id):
        request_id = None
    if any(e.get("type") == "json_invalid" for e in errors) or not errors:
        why = errors[0]["msg"] if errors else str(exc)
        depth = _depth(data)
        if depth > MAX_DEPTH:  # the SDK's parser reads MAX_DEPTH levels (issue 48, ninth round: was "a surrogate")
            return _error(request_id, INVALID_PARAMS, f"Invalid params: the message nests {depth} levels of arrays "
                          f"and objects (itself the first); at most {MAX_DEPTH} are read")
        if data is not None:  # JSON after all, but text the SDK's parser refuses (a lone surrogate, \ud800)
            return _error(request_id, INVALID_PARAMS, f"Invalid params: {one_line(short(why))}: every string must be "
                          "Unicode text (a lone surrogate escape such as \\ud800 is not)")
        return _error(None, PARSE_ERROR, f"Parse error: {one_line(short(why))}")
    if isinstance(data, list):
        why = "a batch (a JSON array) is not accepted: MCP (since 2025-06-18) takes one message object per line"
    elif not isinstance(data, dict):
        why = f"expected a JSON object (one message per line), got {type(data).__name__}"
    elif data.get("jsonrpc") != "2.0":
        why = f'"jsonrpc" must be "2.0", got {short(json.dumps(data.get("jsonrpc")), 40)}'
    elif not ({"method", "result", "error"} & data.keys()):
        why = 'no "method" (a request or notification names one)'
    elif "method" in data and not isinstance(data.get("params", {}), dict):
        why = f'"params" must be an object, got {JSON_TYPES.get(type(data["params"]), type(data["params"]).__name__)}'
    else:
        first = errors[0]
        why = f"{'.'.join(str(p) for p in first.get('loc', ())) or 'message'}: {first.get('msg')}"
    return _error(request_id, INVALID_REQUEST, f"Invalid Request: {one_line(short(why))}")


def too_big_reply(line: str) -> types.JSONRPCError | None:
    """The error for a line over MAX_LINE characters or MAX_COLONS colons, unparsed, else None: its id when the
    line starts with it (after "jsonrpc" and "method", as clients write them), else null."""
    size = len(line) - line.endswith("\n") - line.endswith("\r\n")  # the message, less its line's ending
    colons = line.count(":") if size > MAX_COLONS else 0
    if size > MAX_LINE:
        why = f"a message of {size} characters; at most {MAX_LINE} are read (one line)"
    elif colons > MAX_COLONS:
        why = f"a message with {colons} colons; at most {MAX_COLONS} are read (each object key takes one)"
    else:
        return None
    found = _LEADING_ID.match(line[:1000])
    request_id = json.loads(found.group(1)) if found else None
    return _error(request_id if valid_id(request_id) else None, INVALID_REQUEST, f"Invalid Request: {why}")


def too_many_arguments_reply(message) -> types.JSONRPCError | None:
    """The error for a tools/call with more than MAX_ARGUMENTS argument names, else None."""
    params = message.params if isinstance(message.params, dict) else {}
    arguments = params.get("arguments")
    if message.method != "tools/call" or not isinstance(arguments, dict) or len(arguments) <= MAX_ARGUMENTS:
        return None
    return _error(message.id, INVALID_PARAMS, f"Invalid params: arguments holds {len(arguments)} names; a tool "
                  f"call takes at most {MAX_ARGUMENTS} (tools/list gives each tool's fields)")


def _depth(data) -> int:
    """How many arrays and objects deep `data` nests (0 for a scalar), walked without recursion."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        value, level = todo.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, level)
            todo += [(v, level + 1) for v in (value.values() if isinstance(value, dict) else value)]
    return deepest


def _error(request_id, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


class _Unanswered:
    """The requests handed to the SDK and neither answered nor cancelled by the client yet. At the end of input
    the SDK cancels every request still running and answers it "Connection closed", though its work (in a
    thread) goes on and completes: a run emitted, a launch started, reported failed. So the end of input is
    passed on only once each of them has its answer (a client closes its input to shut the server down, then
    reads the answers still due)."""

    def __init__(self) -> None:
        self.ids: set = set()
        self.changed = anyio.Event()

    def add(self, request_id) -> None:
        self.ids.add(request_id)

    def reused(self, request_id) -> types.JSONRPCError | None:
        """The error for a request whose id a request still in flight holds (JSON-RPC ids are unique among them;
        issue 48, ninth round: both ran and one answer was lost). Its id is null: a reply with the id would be taken
        for the first request's answer, which still comes."""
        if request_id not in self.ids:
            return None
        return _error(None, INVALID_REQUEST, f"Invalid Request: id {short(json.dumps(request_id), 60)} is already "
                      "used by a request still in flight (ids must be unique among them): this one was not run")

    def done(self, request_id) -> None:
        self.ids.discard(request_id)
        self.changed.set()

    async def drained(self) -> None:
        while self.ids:
            self.changed = anyio.Event()
            await self.changed.wait()


class _Answering:
    """The SDK's write stream, noting each answer it carries (the request it answers is no longer unanswered)."""

    def __init__(self, stream, unanswered: _Unanswered):
        self.stream, self.unanswered = stream, unanswered

    async def send(self, item: SessionMessage) -> None:
        await self.stream.send(item)
        if isinstance(item.message, (types.JSONRPCResponse, types.JSONRPCError)):
            self.unanswered.done(item.message.id)

    def __getattr__(self, name):
        return getattr(self.stream, name)

    async def __aenter__(self):
        await self.stream.__aenter__()
        return self

    async def __aexit__(self, *exc):
        return await self.stream.__aexit__(*exc)


class _CheckedLines:
    """The wire's lines for the SDK's reader: valid messages pass; a bad one is answered on `write` and skipped.
    The end of input waits for the requests still unanswered (_Unanswered)."""

    def __init__(self, lines, ready: anyio.Event, write: dict, unanswered: _Unanswered):
        self.lines, self.ready, self.write, self.unanswered = lines.__aiter__(), ready, write, unanswered

    def __aiter__(self):
        return self

    async def __anext__(self) -> str:
        await self.ready.wait()
        while True:
            try:
                line = await self.lines.__anext__()
            except StopAsyncIteration:  # the end of input ends the SDK's reader, once every request is answered
                await self.unanswered.drained()
                raise
            if not line.strip():
                continue
            refused = too_big_reply(line)
            if refused is not None:
                await self.write["stream"].send(SessionMessage(refused))
                continue
            try:
                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except Exception as exc:  # noqa: BLE001 - whatever the SDK would refuse gets its error reply
                await self.write["stream"].send(SessionMessage(error_reply(line, exc)))
                continue
            if isinstance(message, types.JSONRPCRequest):
                refused = too_many_arguments_reply(message) or self.unanswered.reused(message.id)
                if refused is not None:
                    await self.write["stream"].send(SessionMessage(refused))
                    continue
                self.unanswered.add(message.id)
            elif isinstance(message, types.JSONRPCNotification):
                refused = bad_id_reply(line)
                if refused is not None:
                    await self.write["stream"].send(SessionMessage(refused))
                    continue
                cancelled = message.params.get("requestId") if isinstance(message.params, dict) else None
                if message.method == "notifications/cancelled" and valid_id(cancelled):
                    self.unanswered.done(cancelled)  # a cancelled request is never answered
            return line


def _wire_stdin():
    """The wire's stdin as text lines; fd 0 then reads the null device, so no child process takes protocol bytes
    (as the SDK's transport does for the stdin it opens itself)."""
    wire = os.dup(sys.stdin.fileno())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, sys.stdin.fileno())
    os.close(null)
    return anyio.wrap_file(open(wire, encoding="utf-8", errors="replace", closefd=True))


async def serve_stdio(server, experimental: dict | None = None) -> None:
    """Run an MCPServer over stdio (its `run("stdio")`), with error replies for bad lines; `experimental` is
    declared under the capabilities' `experimental` (what protocol versions before 2026-07-28 can carry)."""
    ready, write, unanswered = anyio.Event(), {}, _Unanswered()
    lines = _CheckedLines(_wire_stdin(), ready, write, unanswered)
    async with stdio_server(stdin=lines) as (read_stream, write_stream):
        write["stream"] = write_stream
        ready.set()
        lowlevel = server._lowlevel_server
        options = lowlevel.create_initialization_options(experimental_capabilities=experimental)
        try:
            async with lowlevel.lifespan(lowlevel) as state:
                await _serve_eras(lowlevel, read_stream, _Answering(write_stream, unanswered), options, state,
                                  unanswered)
        finally:
            await write_stream.aclose()


class _Kept:
    """A write stream a serving loop cannot close (the next era's loop writes on it too)."""

    def __init__(self, stream):
        self.stream = stream

    def __getattr__(self, name):
        return getattr(self.stream, name)

    async def aclose(self) -> None:
        return None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return None


def _opens_modern(message) -> bool:
    """A request carrying the 2026-07-28 envelope (the SDK's own test: the protocol-version key in `_meta`)."""
    meta = (message.params or {}).get("_meta") if isinstance(message.params, dict) else None
    return message.method != "initialize" and isinstance(meta, dict) and MODERN_KEY in meta


async def _serve_eras(lowlevel, read_stream, write_stream, options, state, unanswered: _Unanswered) -> None:
    """The SDK's dual-era loop (the first request decides 2026-07-28 or the initialize handshake), except that an
    initialize after a 2026-07-28 opening is answered: Copilot CLI sends server/discover, and when no answer comes
    within about 10 s (a first start on a busy machine) sends initialize on the same connection; the SDK refused it
    (-32022) and Copilot showed the server failed (issue 49). The requests of the first era are answered, then a
    fresh loop serves the rest of the connection from that initialize, in the version it negotiates."""
    serve = partial(serve_dual_era_loop, lowlevel, lifespan_state=state, init_options=options)
    send, receive = anyio.create_memory_object_stream(math.inf)
    modern = None
    async with anyio.create_task_group() as group:
        group.start_soon(serve, receive, _Kept(write_stream))
        async for item in read_stream:
            message = getattr(item, "message", None)
            if isinstance(message, types.JSONRPCRequest):
                if modern is None:
                    modern = _opens_modern(message)
                elif modern and message.method == "initialize":
                    while unanswered.ids - {message.id}:  # the first era's requests keep their answers
                        unanswered.changed = anyio.Event()
                        await unanswered.changed.wait()
                    send.close()
                    send, receive = anyio.create_memory_object_stream(math.inf)
                    group.start_soon(serve, receive, _Kept(write_stream))
                    modern = False
            await send.send(item)
        send.close()
