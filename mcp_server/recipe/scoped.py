"""Lookups that repeat within one piece of work: the lever search validates a dozen configs of one run, and each
validation would read the model's chat template and build its rewards again. Inside `one_scope()` each distinct
call of a `@scoped` function runs once and later calls get a copy of its answer; outside a scope every call runs
(files may change between calls)."""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import json

_memo: contextvars.ContextVar[dict | None] = contextvars.ContextVar("scoped_memo", default=None)


@contextlib.contextmanager
def one_scope(memo: dict | None = None):
    """Answers of @scoped functions are kept in `memo` (a fresh dict by default) while the block runs."""
    token = _memo.set({} if memo is None else memo)
    try:
        yield
    finally:
        _memo.reset(token)


def scoped(fn):
    """Answer each distinct call (arguments as JSON) once inside one_scope(); an exception is never kept."""
    name = f"{fn.__module__}:{fn.__qualname__}"

    @functools.wraps(fn)
    def call(*args, **kwargs):
        memo = _memo.get()
        if memo is None:
            return fn(*args, **kwargs)
        key = (name, json.dumps([args, kwargs], sort_keys=True, default=repr))
        if key not in memo:
            memo[key] = fn(*args, **kwargs)
        return copy.deepcopy(memo[key])

    return call
