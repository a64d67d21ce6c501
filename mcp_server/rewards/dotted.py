"""Importing a function named by a dotted path (a reward, a judge), the way `trl grpo --reward_funcs` does."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Callable

from mcp_server.errors import UserInputError


def import_dotted(path: str, field: str) -> Callable:
    """A function named by a dotted path, imported the way `trl grpo --reward_funcs` does (cwd on sys.path)."""
    module_path, _, attr = path.rpartition(".")
    try:
        try:
            module = importlib.import_module(module_path)
        except ModuleNotFoundError:
            if os.getcwd() in sys.path:
                raise
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_path)
    except Exception as exc:  # any import failure is the user's path or module
        raise UserInputError(field, f"cannot import module '{module_path}' for reward '{path}': {exc}") from None
    func = getattr(module, attr, None)
    if func is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise UserInputError(
            field, f"module '{module_path}' has no '{attr}'; its callables: {', '.join(public[:20]) or 'none'}"
        )
    if not callable(func):
        raise UserInputError(field, f"'{path}' is not callable; a reward takes (completions, **columns) -> list[float]")
    return func
