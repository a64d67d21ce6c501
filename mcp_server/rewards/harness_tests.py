"""The harness's test side (harness.py's tester runs it): the tests' globals, every assert they execute counted,
and how one collected test is called and judged ran, skipped or failed, as pytest and unittest would.

Stdlib only: it runs under the sandbox's Python, installed there by its own name (sandbox_command.HARNESS_MODULES).
"""

from __future__ import annotations

import builtins
import sys
import types


def scope_of_tests(names: list, used: set) -> dict:
    """The tests' globals: the solution's public names as `from solution import *` would give them, except
    that builtins and standard-library module names stay the tester's own (a stdlib name the tests use
    without importing it is the real module). `import solution` has all the public names. The names come
    from the solution process, so they are checked here: public identifiers only, never `__builtins__`."""
    module = types.ModuleType("solution")
    module.__file__ = "/tmp/solution.py"
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    shared = []
    scope = {"__name__": "test_solution", "__file__": "/tmp/test_solution.py", "__builtins__": builtins}
    for name, value in names:
        if not name.isidentifier() or name.startswith("_"):
            continue
        setattr(module, name, value)
        if hasattr(builtins, name):
            continue
        if name in stdlib:
            if name in used:  # imported only when the tests use it (an import can have side effects)
                try:
                    scope[name] = __import__(name)
                except ImportError:
                    pass
            continue
        scope[name] = value
        shared.append(name)
    module.__all__ = shared
    sys.modules["solution"] = module
    return scope


def identifiers(code: types.CodeType) -> set:
    """Every global or attribute name the code and its nested functions and classes use."""
    names = set()
    stack = [code]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return names


ASSERT_HOOK = "__harness_assert__"  # called before each assert statement of the tests (ends with __: never mangled)
SKIPPED = object()  # what a skipped unittest case returns: it ran nothing


def count_asserts(tests: str, hits: list) -> types.CodeType:
    """The tests compiled so that every `assert` they execute (at top level, in a test, in HumanEval's `check`)
    first appends to `hits`: a test file that ends without running any test and without one assert ran
    nothing, and fails (pytest says "no tests ran")."""
    import ast

    class Counter(ast.NodeTransformer):
        def visit_Assert(self, node):  # noqa: N802 - ast's visitor naming
            hit = ast.Expr(ast.Call(ast.Name(ASSERT_HOOK, ast.Load()), [], []))
            return [ast.copy_location(hit, node), node]

    tree = ast.fix_missing_locations(Counter().visit(ast.parse(tests, "test_solution.py")))
    del hits[:]
    return compile(tree, "test_solution.py", "exec")


NEVER_RAN = (types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)


def ran(name: str, value):
    """A test's return value, once it is sure the test's body ran: an `async def` or generator test returns a
    coroutine or generator without running a line of its body (pytest fails such a test too), so it fails."""
    if isinstance(value, NEVER_RAN):
        getattr(value, "close", lambda: None)()
        raise AssertionError(f"{name} is an async def or a generator: calling it did not run its body (write the "
                             "test as a plain def)")
    return value


def call_one(name: str, test):
    """Run one collected test: its return value, or SKIPPED where it raised unittest.SkipTest (pytest skips a
    plain test function that does). Only the tests' own code can raise it: what the solution raises arrives as a
    builtin exception (`_exception`)."""
    try:
        return ran(name, test())
    except BaseException as exc:
        skip = getattr(sys.modules.get("unittest"), "SkipTest", None)
        if skip is not None and isinstance(exc, skip):
            return SKIPPED
        raise


def run_case(cls: type, method: str):
    """One unittest.TestCase method, as unittest runs it (setUp, the test, tearDown); a failure or error is
    raised as an AssertionError carrying unittest's traceback, a skip returns SKIPPED. A method whose body did
    not run (async def outside IsolatedAsyncioTestCase, a generator) fails, where unittest only warns."""
    import unittest

    class Checked(cls):
        def _callTestMethod(self, test):  # noqa: N802 - unittest's name
            call = getattr(self, "_callMaybeAsync", None)  # IsolatedAsyncioTestCase runs coroutines itself
            ran(f"{cls.__name__}.{method}", call(test) if call else test())

    result = unittest.TestResult()
    Checked(method).run(result)
    problems = result.errors + result.failures
    if problems:
        raise AssertionError(problems[0][1][-1500:])
    if result.unexpectedSuccesses:
        raise AssertionError(f"{method}: unexpected success of an expected failure")
    return SKIPPED if result.skipped else None


def human_eval_check(scope: dict, names: dict, entry_point: str | None):
    """HumanEval's form, `def check(candidate): assert ...` and no call: check(the entry point) as HumanEval's
    own runner does. None when this is not that form (no entry point given, or no `check` in the tests)."""
    check = scope.get("check")
    if not entry_point or type(check) is not types.FunctionType or check.__globals__ is not scope:
        return None
    if entry_point not in names:
        raise NameError(f"the solution defines no {entry_point!r} (the row's entry point)")
    return lambda: check(names[entry_point])
