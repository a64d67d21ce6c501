"""The tester's own rules, on constructed inputs (no sandbox, no process): what the tests see of the solution,
and how a solution's exception reaches them (issue 48's blind audit). The sandbox runs the same modules
(harness_tests.py, harness.py) by their own names; tests/test_sandbox_table.py judges them end to end."""

from __future__ import annotations

import builtins

from mcp_server.rewards.harness import SolutionError, _exception
from mcp_server.rewards.harness_tests import scope_of_tests


def test_the_tests_see_only_the_solutions_public_names():
    """`from solution import *`: a solution's _private helper (or a name that is not an identifier) is not a name
    of the tests, and `import solution` holds only what the solution defines publicly."""
    scope = scope_of_tests([("_helper", 1), ("__builtins__", {}), ("not a name", 3), ("add", 4)], set())
    assert scope["add"] == 4 and "_helper" not in scope and "not a name" not in scope
    import sys

    module = sys.modules["solution"]
    assert module.add == 4 and module.__all__ == ["add"] and not hasattr(module, "_helper")
    assert scope["__builtins__"] is builtins


def test_a_solutions_exception_reaches_the_tests_as_the_nearest_builtin_exception():
    error = _exception([["BadInput", "ValueError"], "negative"])
    assert type(error) is ValueError and str(error) == "BadInput: negative"
    assert type(_exception([["KeyError"], "'k'"])) is KeyError
    # Nothing but an Exception subclass crosses as itself: an exit or interrupt the solution raised, or a bare
    # Exception, arrives as SolutionError (a test's `except Exception` sees it; it never ends the tester).
    for names in (["SystemExit", "BaseException"], ["KeyboardInterrupt"], ["Odd", "Exception"]):
        error = _exception([names, "1"])
        assert type(error) is SolutionError and str(error).startswith(names[0]), names


def test_only_the_tests_own_check_is_called_with_the_entry_point():
    """HumanEval's form calls the tests' `def check(candidate)`; a `check` the solution defines (it reaches the
    tests' scope as a public name) is never the tests' check: tests that run nothing stay "no tests ran"."""
    from mcp_server.rewards.harness_tests import human_eval_check

    def check(candidate):  # the solution's own: its globals are not the tests'
        return None

    names = {"check": check, "add": lambda a, b: a + b}
    scope = scope_of_tests(list(names.items()), set())
    assert scope["check"] is check and human_eval_check(scope, names, "add") is None
    exec("def check(candidate):\n    assert candidate(2, 3) == 5\n", scope)  # the tests' own check
    called = human_eval_check(scope, names, "add")
    assert called is not None and called() is None
    assert human_eval_check(scope, names, None) is None  # no entry point given: not HumanEval's form


def test_a_batch_holds_at_most_half_the_available_memory():
    """run_many keeps at most batch_room sandboxes alive: each may hold memory_mb in its processes and 5x max_file_mb
    in /tmp and /dev/shm, and together they stay within half of what this machine has available."""
    from mcp_server.rewards.sandbox import Limits, batch_room

    with open("/proc/meminfo") as handle:
        available_mb = next(int(line.split()[1]) for line in handle if line.startswith("MemAvailable:")) / 1024
    for limits in (Limits(memory_mb=16, max_file_mb=64), Limits(), Limits(memory_mb=int(available_mb))):
        per_sandbox_mb = limits.memory_mb + 5 * limits.max_file_mb
        room = batch_room(limits)
        assert room >= 1
        if room > 1:  # within half (the machine's available memory moves a little between the two reads)
            assert room * per_sandbox_mb <= available_mb / 2 * 1.05, (limits, room)
            assert (room + 1) * per_sandbox_mb > available_mb / 2 * 0.95, (limits, room)
    assert batch_room(Limits(memory_mb=int(available_mb))) == 1  # one sandbox always runs
