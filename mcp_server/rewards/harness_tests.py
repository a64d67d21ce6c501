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
    tests = types.ModuleType("test_solution")  # the tests' own module: setup_module(module) gets it
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    shared = []
    scope = tests.__dict__
    scope.update(__file__="/tmp/test_solution.py", __builtins__=builtins, __harness_module__=tests)
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


def is_skip(exc: BaseException) -> bool:
    skip = getattr(sys.modules.get("unittest"), "SkipTest", None)
    return skip is not None and isinstance(exc, skip)


def call_one(name: str, test):
    """Run one collected test: its return value, or SKIPPED where it raised unittest.SkipTest (pytest skips a
    plain test function that does). Only the tests' own code can raise it: what the solution raises arrives as a
    builtin exception (`_exception`)."""
    try:
        return ran(name, test())
    except BaseException as exc:
        if is_skip(exc):
            return SKIPPED
        raise


def with_optional_argument(func, arg):
    """pytest's call of an xunit setup or teardown: func(arg) where it takes an argument besides a bound self
    or cls (setup_module(module), setup_class(cls), setup_method(method), setup_function(function)), else func()."""
    code = getattr(getattr(func, "__func__", func), "__code__", None)
    count = (code.co_argcount if code is not None else 0) - isinstance(func, types.MethodType)
    return func(arg) if count > 0 else func()


class Fixtures:
    """A setup run before the first of a group's tests and a teardown after the last of them (a module's
    setup_module or setUpModule, a pytest class's setup_class, a TestCase's setUpClass), as pytest and unittest
    run them: a setup that raises SkipTest skips the group, one that fails fails the first test, and the
    teardown runs only after a setup that ran."""

    def __init__(self, setup=None, teardown=None) -> None:
        self.setup, self.teardown, self.state = setup, teardown, None

    def wrap(self, tests: list) -> list:
        if not (self.setup or self.teardown):
            return tests
        last = len(tests) - 1
        return [(name, lambda test=test, name=name, i=i: self.run(name, test, i == last))
                for i, (name, test) in enumerate(tests)]

    def run(self, name: str, test, last: bool):
        if self.state is None:
            self.state = "failed"
            try:
                self.setup and self.setup()
                self.state = "up"
            except BaseException as exc:
                if not is_skip(exc):
                    raise
                self.state = SKIPPED
        if self.state != "up":
            return SKIPPED
        result = call_one(name, test)
        if last:
            self.state = "down"
            self.teardown and self.teardown()
        return result


def function_test(name: str, test, setup=None, teardown=None):
    """A pytest test function, between the module's setup_function(function) and teardown_function(function)."""
    def run():
        setup and with_optional_argument(setup, test)
        result = call_one(name, test)
        teardown and with_optional_argument(teardown, test)
        return result
    return name, run


def class_tests(cls: type, name: str, methods: list) -> list:
    """A pytest `Test*` class's tests: a new instance for each (pytest's), between its setup_method(method) and
    teardown_method(method), all of them between the class's setup_class(cls) and teardown_class(cls)."""
    def one(method: str):
        instance = cls()
        test = getattr(instance, method)
        return function_test(f"{name}.{method}", test, getattr(instance, "setup_method", None),
                             getattr(instance, "teardown_method", None))[1]

    def of_class(attr: str):
        func = getattr(cls, attr, None)
        return func and (lambda: with_optional_argument(getattr(func, "__func__", func), cls))

    return Fixtures(of_class("setup_class"), of_class("teardown_class")).wrap(
        [(f"{name}.{m}", lambda m=m: one(m)()) for m in methods])


def case_tests(cls: type, name: str, methods: list) -> list:
    """A unittest.TestCase's tests as unittest runs them: setUpClass before the first (not for a class decorated
    as skipped), each method as its own case (setUp, the test, tearDown, cleanups; IsolatedAsyncioTestCase
    awaits its coroutines and asyncSetUp), tearDownClass and the class cleanups after the last. A failure or
    error is raised as an AssertionError carrying unittest's traceback, a skip returns SKIPPED. A method whose
    body did not run (async def outside IsolatedAsyncioTestCase, a generator) fails, where unittest only warns."""
    import unittest

    class Checked(cls):
        def _callTestMethod(self, test):  # noqa: N802 - unittest's name
            call = getattr(self, "_callMaybeAsync", None)  # IsolatedAsyncioTestCase runs coroutines itself
            ran(f"{cls.__name__}.{self._testMethodName}", call(test) if call else test())

    def one(method: str):
        result = unittest.TestResult()
        Checked(method).run(result)
        problems = result.errors + result.failures
        if problems:
            raise AssertionError(problems[0][1][-1500:])
        if result.unexpectedSuccesses:
            raise AssertionError(f"{method}: unexpected success of an expected failure")
        return SKIPPED if result.skipped else None

    def teardown():
        try:
            cls.tearDownClass()
        finally:
            cls.doClassCleanups()
        if getattr(cls, "tearDown_exceptions", None):
            raise cls.tearDown_exceptions[0][1]

    setup = None if getattr(cls, "__unittest_skip__", False) else cls.setUpClass
    return Fixtures(setup, teardown if setup else None).wrap(
        [(f"{name}.{m}", lambda m=m: one(m)) for m in methods])


def human_eval_check(scope: dict, names: dict, entry_point: str | None):
    """HumanEval's form, `def check(candidate): assert ...` and no call: check(the entry point) as HumanEval's
    own runner does. None when this is not that form (no entry point given, or no `check` in the tests)."""
    check = scope.get("check")
    if not entry_point or type(check) is not types.FunctionType or check.__globals__ is not scope:
        return None
    if entry_point not in names:
        raise NameError(f"the solution defines no {entry_point!r} (the row's entry point)")
    return lambda: check(names[entry_point])
