"""The solution process inside the sandbox: harness.py's tester forks it before the tests exist; it runs the
model-written code as module `solution`, sends the tester its public names, then answers the tester's requests
(call this, read that attribute) over two pipes, one JSON line each way, until the tester closes the pipe.

Everything here is the solution's to break: it only ever hurts its own answers (harness.py's docstring says
why nothing it does reaches the verdict).

Stdlib only, and no import of this package: sandbox.py ships it into the sandbox as the module
`harness_solution`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import types

try:  # on the host, as part of the package
    from .harness_wire import MUTABLE, decode, encode, set_limits
except ImportError:  # in the sandbox, where sandbox.py installs the harness's modules by their own names
    from harness_wire import MUTABLE, decode, encode, set_limits


class Objects:
    """The solution's objects the tester holds handles on, by reference id (kept alive, so ids stay unique)."""

    def __init__(self) -> None:
        self.by_ref: dict[int, object] = {}
        self.refs: dict[int, int] = {}  # id(obj) -> reference id

    def ref(self, obj) -> dict:
        rid = self.refs.get(id(obj))
        if rid is None:
            rid = self.refs[id(obj)] = len(self.by_ref) + 1
            self.by_ref[rid] = obj
        node = {"$": "ref", "id": rid, "t": type(obj).__name__[:80]}
        if isinstance(obj, types.CoroutineType):  # the tester makes it a coroutine of its own ("await" below)
            node["co"] = True
        return node

    def enc(self, value):
        try:
            return encode(value, self.ref)
        except (ValueError, RecursionError):  # cyclic or too deep: it stays here
            return self.ref(value)

    def dec(self, node):
        return decode(node, lambda n: self.by_ref[n["id"]])


def failure(exc: BaseException) -> dict:
    """The reply for an exception: its type's names (the MRO) and its message."""
    try:
        message = str(exc)[:2000]
    except BaseException:  # noqa: BLE001 - the solution's own exception may fail to print
        message = "<unprintable>"
    return {"raise": [[c.__name__ for c in type(exc).__mro__][:20], message]}


_LOOP = []  # the solution's one event loop, made at its first coroutine (asyncio loads only then)


def run_coroutine(coroutine):
    """Run one of the solution's coroutines to its end on the solution's event loop (the same loop for all of
    them, as one asyncio.run would hold): the tester awaits it as a coroutine of its own (harness.py)."""
    import asyncio

    if not _LOOP:
        _LOOP.append(asyncio.new_event_loop())
    return _LOOP[0].run_until_complete(coroutine)


def answer(msg: dict, objects: Objects) -> dict:
    """Carry out one request of the tester on a solution object; the reply (raises what the solution raises)."""
    enc, dec = objects.enc, objects.dec
    op, target = msg["op"], objects.by_ref[msg["id"]]
    reply = {}
    if op == "call":
        args, kw = dec(msg["args"]), dict(dec(msg["kw"]))
        reply["value"] = enc(target(*args, **kw))
        reply["after"] = [[i, enc(a)] for i, a in enumerate(args) if type(a) in MUTABLE]
    elif op == "await":
        reply["value"] = enc(run_coroutine(target))
    elif op == "getattr":
        reply["value"] = enc(getattr(target, msg["name"]))
    elif op == "setattr":
        setattr(target, msg["name"], dec(msg["value"]))
    elif op == "delattr":
        delattr(target, msg["name"])
    elif op == "getitem":
        reply["value"] = enc(target[dec(msg["key"])])
    elif op == "setitem":
        target[dec(msg["key"])] = dec(msg["value"])
    elif op == "delitem":
        del target[dec(msg["key"])]
    elif op == "len":
        reply["value"] = len(target)
    elif op == "contains":
        reply["value"] = dec(msg["value"]) in target
    elif op == "str":
        reply["value"] = str(target)
    elif op == "isinstance":
        reply["value"] = isinstance(dec(msg["value"]), target)
    elif op == "iter":
        reply["value"] = enc(iter(target))
    elif op == "next":
        try:
            reply["value"] = enc(next(target))
        except StopIteration:
            reply = {"stop": True}
    else:
        raise ValueError(f"unknown request {op!r}")
    return reply


def load_solution(code: str, objects: Objects, send) -> bool:
    """Run the solution's code as module `solution` and send its public names, or how it failed (False)."""
    module = types.ModuleType("solution")
    module.__file__ = "/tmp/solution.py"
    sys.modules["solution"] = module
    try:
        exec(compile(code, "solution.py", "exec"), module.__dict__)
        send({"names": [[k, objects.enc(v)] for k, v in list(module.__dict__.items()) if not k.startswith("_")]})
    except BaseException as exc:  # noqa: BLE001 - a broken solution fails, it does not crash the harness
        try:
            import traceback

            traceback.print_exc()
        except BaseException:  # noqa: BLE001 - its module code used up what printing needs (descriptors: the import)
            pass
        send(failure(exc))
        return False
    return True


def serve(requests: int, replies: int) -> None:
    """Run the solution's code, send its public names, then answer requests until the tester closes the pipe."""
    inp, out = os.fdopen(requests, "rb"), os.fdopen(replies, "wb")
    objects = Objects()

    def send(message) -> None:
        out.write(json.dumps(message, allow_nan=False).encode() + b"\n")
        out.flush()

    load = json.loads(inp.readline())
    os.chdir("/tmp")
    set_limits(load["limits"])
    # The solution's CPU budget, below the wall-clock timeout: a busy loop dies of SIGPROF (whose default action
    # ends the process) after cpu_s seconds of CPU, so it holds a core no longer than that.
    signal.setitimer(signal.ITIMER_PROF, float(load["limits"].get("cpu_s") or 0))
    if not load_solution(load["code"], objects, send):
        return
    while True:
        line = inp.readline()
        if not line:
            return
        try:
            reply = answer(json.loads(line), objects)
        except BaseException as exc:  # noqa: BLE001 - the solution's exception is an answer, not a crash
            reply = failure(exc)
        try:
            send(reply)
        except (ValueError, TypeError, RecursionError) as exc:  # not JSON after all (e.g. a str subclass's hooks)
            send(failure(exc))
