"""The trusted harness inside the sandbox: a tester process that grades, and the solution process it forks.

`sandbox.run_python` runs this file (its bytecode, compiled once by the same interpreter, else its source)
as `python -I -c ... VERDICT_FD`, as the sandbox's pid 1 (bwrap --as-pid-1), after installing its
helper modules by their own names: harness_wire.py (what crosses between the processes),
harness_solution.py (the solution process's side), harness_watch.py (the budgets) and harness_tests.py (how the
tests are collected, called and judged). That process is the tester. It
makes itself non-dumpable first (no one in the sandbox
can ptrace it or open its /proc/1/mem, fd, environ; as the namespace's init it also ignores every signal
sent from inside), forks the solution process, and only then reads the payload (code, tests, limits) from
stdin. The solution process runs the model-written code and then answers the tester's requests (call this,
read that attribute) over two pipes, one JSON line each way. Values cross as data (`encode`/`decode`): None,
bool, int, float, str, bytes, bytearray, list, tuple, dict, set, frozenset, complex, Fraction, Decimal. Any
other object stays in the solution process and the tester holds a `Remote` handle on it (harness_wire.py).

The tests run in the tester. They see the solution's public names (builtins and standard-library module
names stay the tester's own; `import solution` reaches all of them), and every comparison, truth test and
the verdict happen in the tester on data: a solution object equals only itself and is always true. Only the
tester holds the verdict fd; it writes one JSON object there: {"passed", "error", "tests"}.

So nothing the solution does reaches the verdict: it cannot see the tests (they arrive after the fork), read
the tester's frames or memory, patch its builtins or modules, return an object whose __eq__ lies, print a
pass line, exit early (a solution that stops answering fails), or hook its exit.

Stdlib only, and no import of this package but its own helpers: it runs under the sandbox's Python.
"""

from __future__ import annotations

import builtins
import ctypes
import json
import os
import resource
import signal
import sys
import threading
import time

try:  # on the host, as part of the package
    from .harness_solution import serve
    from .harness_tests import (ASSERT_HOOK, SKIPPED, Fixtures, call_one, case_tests, class_tests, count_asserts,
                                function_test, human_eval_check, identifiers, scope_of_tests, with_optional_argument)
    from .harness_watch import Watch
    from .harness_wire import MAX_MESSAGE, MUTABLE, decode, encode, set_limits
except ImportError:  # in the sandbox, where sandbox.py installs the harness's modules by their own names
    from harness_solution import serve
    from harness_tests import (ASSERT_HOOK, SKIPPED, Fixtures, call_one, case_tests, class_tests, count_asserts,
                               function_test, human_eval_check, identifiers, scope_of_tests, with_optional_argument)
    from harness_watch import Watch
    from harness_wire import MAX_MESSAGE, MUTABLE, decode, encode, set_limits

# traceback and linecache are imported only when needed: start-up time is most of a run's cost.

PR_SET_DUMPABLE = 4
# The longest integer the tester reads from the solution's answers (factorial(2000) has 5736 digits): CPython 3.11
# parses one in time that grows with the square of its digits, so one 15-million-digit number kept the tester
# busy until the timeout, outside the solution's CPU budget (round 17, b08). What the tester spends reading and
# decoding the solution's answers counts in that budget too (Channel.reading_cpu_s, harness_watch.Watch).
REPLY_INT_DIGITS = 10_000


# ------------------------------------------------------------------ the tester process
class SolutionError(Exception):
    """The solution raised an exception that is not a builtin one (its type name and message)."""


class SolutionGone(BaseException):  # noqa: N818 - not an Exception: a test's `except Exception` cannot swallow it
    """The solution process stopped answering or answered with something that is not data: the run fails."""


class Channel:
    def __init__(self, requests: int, replies: int, pid: int = 0, cpu_s: float = 0.0) -> None:
        self.out, self.inp = os.fdopen(requests, "wb"), os.fdopen(replies, "rb")
        self.remotes: dict[int, Remote] = {}
        self.coroutines: dict[int, tuple] = {}  # id -> (the tester's coroutine, the solution's one it awaits)
        self.broken: str | None = None
        self.pid, self.cpu_s = pid, cpu_s
        # (CPU seconds spent on the solution's answers, the main thread's CPU clock when the one in hand began or
        # None): one tuple, replaced whole, so the watch's thread reads it consistently
        self._clock = time.pthread_getcpuclockid(threading.get_ident())
        self._reading: tuple[float, float | None] = (0.0, None)

    def reading_cpu_s(self) -> float:
        """CPU seconds the tester has spent reading, parsing and decoding the solution's answers, the answer in hand
        included: the solution's work, counted in its budget (harness_watch.Watch); from any thread."""
        spent, since = self._reading
        return spent + (time.clock_gettime(self._clock) - since if since is not None else 0.0)

    def _begin(self) -> None:
        self._reading = (self._reading[0], time.clock_gettime(self._clock))

    def _end(self) -> None:
        spent, since = self._reading
        if since is not None:
            self._reading = (spent + time.clock_gettime(self._clock) - since, None)

    def _parse(self, line: bytes):
        """The answer line as JSON, no integer in it over REPLY_INT_DIGITS digits (ValueError)."""
        bound = hasattr(sys, "set_int_max_str_digits")
        if bound:
            sys.set_int_max_str_digits(REPLY_INT_DIGITS)
        try:
            return json.loads(line)
        finally:
            if bound:
                sys.set_int_max_str_digits(0)  # the tests' own integers are not bounded

    def _ended(self, tries: int = 20) -> str | None:
        """How the solution process ended, once its pipe closed (it may take a moment to become a zombie); None
        when it still runs after `tries` looks 10 ms apart."""
        import time

        for i in range(tries):
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except (ChildProcessError, OSError):
                break
            if pid:
                if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGPROF:
                    return f"used its {self.cpu_s:g} s of CPU time"
                if os.WIFSIGNALED(status):
                    return f"was killed by signal {os.WTERMSIG(status)}"
                break
            if i + 1 < tries:
                time.sleep(0.01)
        else:
            return None
        return "exited or closed its pipe"

    def gone(self) -> str | None:
        """After the tests: why the solution process is no longer there (its CPU budget, a signal, an exit), None
        while it still waits for requests. A solution whose process died after its last answer (a busy thread
        that used up its CPU budget, an exit from a thread) fails though no test asked it anything after."""
        if self.broken:
            return None
        try:  # a process whose first thread has exited shows Z while its other threads still die: not waitable yet
            with open(f"/proc/{self.pid}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            state = b"X"
        return self._ended(tries=50) if state in (b"Z", b"X") else None

    def remote(self, node: dict):
        rid = node.get("id")
        if type(rid) is not int:
            raise ValueError("bad reference")
        if rid not in self.remotes:
            self.remotes[rid] = Remote(rid, str(node.get("t"))[:80])
        if node.get("co") is True:  # a coroutine of the solution: one of the tester's, for await and asyncio.run
            coroutine = _awaited(self.remotes[rid])
            self.coroutines[id(coroutine)] = (coroutine, rid)
            return coroutine
        return self.remotes[rid]

    def data(self, value):
        def ref(obj):
            if type(obj) is Remote:
                return {"$": "ref", "id": object.__getattribute__(obj, "_rid")}
            if id(obj) in self.coroutines and self.coroutines[id(obj)][0] is obj:  # handed back unawaited
                obj.close()
                return {"$": "ref", "id": self.coroutines[id(obj)][1]}
            raise TypeError(f"cannot pass a {type(obj).__name__} to the solution: only data (None, bool, int, "
                            "float, str, bytes, list, tuple, dict, set, ...) and the solution's own objects cross")
        return encode(value, ref)

    def exchange(self, message: dict) -> dict:
        """Send one request, read one reply. Any failure of the solution's side breaks the channel for good."""
        if self.broken:
            raise SolutionGone(self.broken)
        try:
            self.out.write(json.dumps(message, allow_nan=False).encode() + b"\n")
            self.out.flush()
            self._begin()
            line = self.inp.readline(MAX_MESSAGE + 1)
        except OSError as exc:
            line, why = b"", f"closed its pipe ({exc})"
        else:
            why = (self._ended() or "closed its pipe") if not line else "sent an answer over 16 MB or cut short"
        try:
            if line.endswith(b"\n"):
                reply, why = None, "sent an answer that is not a JSON object"
                try:
                    reply = self._parse(line)
                except (ValueError, RecursionError) as exc:
                    if "integer string conversion" in str(exc):
                        why = f"sent an integer of over {REPLY_INT_DIGITS} digits"
                if type(reply) is dict:
                    return reply
        finally:
            self._end()
        self.broken = f"the solution process {why}"[:300]
        raise SolutionGone(self.broken)

    def decode(self, node):
        self._begin()
        try:
            return decode(node, self.remote)
        except Exception as exc:  # noqa: BLE001 - e.g. an unhashable key, Fraction(1, 0), a bad Decimal
            self.broken = f"the solution answered with something that is not data ({exc})"[:300]
            raise SolutionGone(self.broken) from None
        finally:
            self._end()

    def ask(self, message: dict, args: tuple = ()):
        reply = self.exchange(message)
        if "raise" in reply:
            raise _exception(reply["raise"])
        if reply.get("stop") is True:
            if message.get("op") != "next":  # only the end of an iteration the tests asked for
                self.broken = "the solution process sent an answer that is not a reply"
                raise SolutionGone(self.broken)
            raise StopIteration
        after = reply.get("after") or []
        if type(after) is not list or not all(type(p) is list and len(p) == 2 for p in after):
            self.broken = "the solution process sent an answer that is not a reply"
            raise SolutionGone(self.broken)
        for i, node in after:  # the call's changes to a mutable argument
            local = args[i] if type(i) is int and 0 <= i < len(args) else None
            if type(local) in MUTABLE:
                new = self.decode(node)
                if type(new) is type(local):
                    if type(local) in (dict, set):
                        local.clear()
                        local.update(new)
                    else:
                        local[:] = new
        return self.decode(reply.get("value"))


def _exception(raised) -> Exception:
    """A builtin exception of the type the solution raised (or its nearest builtin base), else SolutionError."""
    names, message = (raised if type(raised) is list and len(raised) == 2 else ([], "?"))
    message = str(message)[:2000]
    names = [n for n in names if type(n) is str] if type(names) is list else []
    if names and names[0] in ("StopIteration", "StopAsyncIteration"):
        # As PEP 479 does for generators: a StopIteration out of a call would end the test's own loop
        # (`all(map(f, xs))` would stop at the first item and pass), so it is an error here.
        return RuntimeError(f"the solution raised {names[0]}" + (f": {message}" if message else ""))
    for name in names:
        cls = getattr(builtins, name, None)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls is not Exception:
            try:
                return cls(message) if name == names[0] else cls(f"{names[0]}: {message}")
            except Exception:  # noqa: BLE001, S112 - a builtin exception that wants other arguments
                continue
    return SolutionError(f"{names[0] if names else '?'}: {message}")


_CHANNEL: Channel | None = None


async def _awaited(remote: Remote):
    """A coroutine of the solution, as the tests see it: awaiting it (IsolatedAsyncioTestCase, asyncio.run,
    gather) runs the solution's coroutine to its end on the solution's own event loop and returns its value."""
    return remote._ask("await")


class Remote:
    """A handle on an object that lives in the solution process. Calls, attributes, items, len, iteration,
    str and isinstance against a solution class ask the solution and get data back. Identity, equality,
    hashing, ordering and truth are the tester's own: a solution object equals only itself, is always true
    and has no order, so its __eq__ cannot pass a test."""

    __slots__ = ("_rid", "_rtype")

    def __init__(self, rid: int, rtype: str) -> None:
        object.__setattr__(self, "_rid", rid)
        object.__setattr__(self, "_rtype", rtype)

    def _ask(self, op: str, local_args: tuple = (), **fields):
        return _CHANNEL.ask({"op": op, "id": object.__getattribute__(self, "_rid"), **fields}, local_args)

    def __getattr__(self, name: str):
        return self._ask("getattr", name=name)

    def __setattr__(self, name: str, value) -> None:
        self._ask("setattr", name=name, value=_CHANNEL.data(value))

    def __delattr__(self, name: str) -> None:
        self._ask("delattr", name=name)

    def __call__(self, *args, **kwargs):
        return self._ask("call", args, args=_CHANNEL.data(list(args)), kw=_CHANNEL.data(list(kwargs.items())))

    def __getitem__(self, key):
        return self._ask("getitem", key=_CHANNEL.data(key))

    def __setitem__(self, key, value) -> None:
        self._ask("setitem", key=_CHANNEL.data(key), value=_CHANNEL.data(value))

    def __delitem__(self, key) -> None:
        self._ask("delitem", key=_CHANNEL.data(key))

    def __len__(self) -> int:
        return self._ask("len")

    def __contains__(self, item) -> bool:
        return self._ask("contains", value=_CHANNEL.data(item)) is True

    def __iter__(self):
        iterator = self._ask("iter")
        if type(iterator) is not Remote:
            yield from iterator
            return
        while True:
            try:
                yield iterator._ask("next")
            except StopIteration:
                return

    def __next__(self):
        return self._ask("next")

    def __instancecheck__(self, obj) -> bool:  # isinstance(x, SolutionClass)
        return self._ask("isinstance", value=_CHANNEL.data(obj)) is True

    def __str__(self) -> str:
        text = self._ask("str")
        return text if type(text) is str else repr(self)

    def __repr__(self) -> str:
        return f"<solution {object.__getattribute__(self, '_rtype')} #{object.__getattribute__(self, '_rid')}>"

    def __bool__(self) -> bool:
        return True

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


def _collect(scope: dict) -> list:
    """pytest's default collection, with pytest's and unittest's setups and teardowns (harness_tests.py):
    `test*` functions, every unittest.TestCase subclass (whatever its name) and the `test*` methods of other
    `Test*` classes without an `__init__` (pytest skips those); all of them between the module's setup_module
    (or setUpModule) and teardown_module (or tearDownModule). Only the tests' own functions are collected or
    called as setups: the solution's names in their scope stay the solution's."""
    case = getattr(sys.modules.get("unittest"), "TestCase", None)

    def own(*names):
        found = [scope[n] for n in names if callable(scope.get(n)) and type(scope[n]) is not Remote]
        return found[0] if found else None

    tests = []
    for name, obj in list(scope.items()):
        if type(obj) is Remote:
            continue
        if case is not None and isinstance(obj, type) and issubclass(obj, case):
            import unittest

            tests += case_tests(obj, name, unittest.TestLoader().getTestCaseNames(obj))
        elif name.startswith("test") and callable(obj) and not isinstance(obj, type):
            tests.append(function_test(name, obj, own("setup_function"), own("teardown_function")))
        elif name.startswith("Test") and isinstance(obj, type) and "__init__" not in obj.__dict__:
            tests += class_tests(obj, name, [m for m in obj.__dict__
                                             if m.startswith("test") and callable(getattr(obj, m))])
    module, setup, teardown = scope["__harness_module__"], own("setUpModule", "setup_module"), own(
        "tearDownModule", "teardown_module")
    return Fixtures(setup and (lambda: with_optional_argument(setup, module)),
                    teardown and (lambda: with_optional_argument(teardown, module))).wrap(tests)


def _where(exc: BaseException, stage: str) -> str:
    import traceback

    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == "test_solution.py"]
    at = f" (test line {lines[-1]})" if lines else ""
    message = str(exc)
    return (f"{stage}{at}: {type(exc).__name__}" + (f": {message}" if message else ""))[:300]


def grade(payload: dict, channel: Channel) -> tuple[bool, str | None, int]:
    """Load the solution, run the tests against it; (passed, why not, tests run)."""
    try:
        reply = channel.exchange({"code": payload["code"], "limits": payload["limits"]})
    except SolutionGone as exc:
        return False, f"solution: {exc} before the tests ran", 0
    if "raise" in reply:
        return False, _where(_exception(reply["raise"]), "solution"), 0
    names = reply.get("names")
    if type(names) is not list or not all(type(p) is list and len(p) == 2 and type(p[0]) is str for p in names):
        return False, "solution: the solution process did not report its names", 0
    try:
        names = [(name, channel.decode(node)) for name, node in names]
    except SolutionGone as exc:
        return False, f"solution: {exc}", 0
    tests = payload["tests"]
    stage, count, hits, top = "tests", 0, [], 0
    try:
        code = count_asserts(tests, hits)
        scope = scope_of_tests(names, identifiers(code))
        scope[ASSERT_HOOK] = lambda: hits.append(1)
        exec(code, scope)
        # Asserts the file runs at its top level count as a test; those of a setup, a teardown or a skipped
        # test do not (pytest: "no tests ran").
        top = len(hits)
        for stage, test in _collect(scope):
            if call_one(stage, test) is not SKIPPED:
                count += 1
        check = None if count or top else human_eval_check(scope, dict(names), payload.get("entry_point"))
        if check is not None:
            stage = "check(candidate)"
            check()
            count += 1
    except BaseException as exc:  # noqa: BLE001 - any failure of a test is a failed run
        import linecache
        import traceback

        # The tests' source for the printed traceback (never a file: the solution could plant one).
        linecache.cache["test_solution.py"] = (len(tests), None, tests.splitlines(True), "test_solution.py")
        traceback.print_exc()
        return False, channel.broken or _where(exc, stage), count
    if channel.broken:  # a test swallowed the failure; the run still fails
        return False, channel.broken, count
    if not count and not top:
        return False, ("no tests ran: the tests define no test function, Test class or TestCase, run no assert"
                       + (", and no entry point was given to call their check(candidate) with"
                          if "check" in scope else "")), 0
    return True, None, count


def main() -> None:
    global _CHANNEL
    verdict_fd = int(sys.argv[1])
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        os.write(verdict_fd, b'{"passed": false, "error": "cannot make the tester non-dumpable"}')
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # pid 1 ignores signals it has no handler for
    if hasattr(sys, "set_int_max_str_digits"):  # big ints cross as JSON numbers (e.g. factorial(2000))
        sys.set_int_max_str_digits(0)
    os.closerange(3, verdict_fd)  # e.g. bwrap's --info-fd: the solution gets nothing but its own pipes
    os.closerange(verdict_fd + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    solution_pid = os.fork()
    if solution_pid == 0:  # the solution process: nothing of the tests or the verdict exists yet
        try:
            for fd in (verdict_fd, requests_w, replies_r):
                os.close(fd)
            os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
            sys.stdout.reconfigure(line_buffering=True)
            serve(requests_r, replies_w)
        finally:
            os._exit(0)
    os.close(requests_r)
    os.close(replies_w)
    verdict = {"passed": False, "error": None, "tests": 0}
    try:
        payload = json.loads(sys.stdin.buffer.read())
        limits = payload["limits"]
        _CHANNEL = channel = Channel(requests_w, replies_r, solution_pid, float(limits.get("cpu_s") or 0))
        # the whole sandbox's CPU and memory (harness_watch.py); started before the rlimits, as one of the tasks
        # the process limit allows the tester
        watch = Watch(channel.cpu_s, limits["as"], lambda why: setattr(channel, "broken", why),
                      channel.reading_cpu_s)
        watch.start()
        os.chdir("/tmp")
        set_limits(limits)
        passed, error, count = grade(payload, channel)
        watch.stop()
        watch.check()  # what the last interval used
        gone = channel.gone() if passed else None
        if watch.exceeded:  # over the budget, even where the tests had finished by then
            passed, error = False, watch.exceeded
        elif gone:
            passed, error = False, f"the solution process {gone} before the tests ended"
        verdict.update(passed=passed, error=error, tests=count)
    except BaseException as exc:  # noqa: BLE001 - whatever happens, the verdict is written (as a failure)
        verdict["error"] = f"harness: {type(exc).__name__}: {exc}"[:300]
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os.write(verdict_fd, json.dumps(verdict).encode())
            os._exit(0)


if __name__ == "__main__":
    main()
