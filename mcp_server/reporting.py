"""How a long operation reports progress: a callable (done, total or None, message), never required."""

from __future__ import annotations

from typing import Callable, Optional

Report = Callable[[float, Optional[float], str], None]


def silent(done: float, total: float | None, message: str) -> None:
    """The default reporter: says nothing."""
