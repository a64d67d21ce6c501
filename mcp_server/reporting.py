"""How a long operation reports progress: a callable (done, total or None, message), never required."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Optional

Report = Callable[[float, Optional[float], str], None]


def silent(done: float, total: float | None, message: str) -> None:
    """The default reporter: says nothing."""


PIPE_EVERY_S = 10.0  # output not a terminal (a log, an agent's pipe): at most one progress line this often


class ProgressLines:
    """A Report that prints lines, each with its elapsed time and, once two counts are seen, the time left at the
    measured rate: with `every` 0 every line, else the first of each kind (a message's first word), the last and
    one every `every` seconds. The CLI's progress on stderr and the demo's off a terminal (issue 49)."""

    def __init__(self, stream, every: float):
        self.stream, self.every = stream, every
        self.start = time.monotonic()
        self.printed = None  # when the last line was printed
        self.phase = None  # its first word
        self.first: tuple[float, float] | None = None  # (time, done) of the first count above zero

    def __call__(self, done: float, total: float | None, message: str) -> None:
        now = time.monotonic()
        if done and self.first is None:
            self.first = (now, done)
        final = total is not None and done >= total
        phase = message.split(" ", 1)[0]  # a new kind of line ("decoding", "sampled", a stage) is always shown
        if self.printed is not None and not final and phase == self.phase and now - self.printed < self.every:
            return
        self.printed, self.phase = now, phase
        timing = f"{_clock(now - self.start)} elapsed"
        if total and self.first and done > self.first[1] and not final and " left" not in message:
            timing += f", about {_clock((total - done) * (now - self.first[0]) / (done - self.first[1]))} left"
        count = "" if total is None or f"{total:g}" in message else f" ({done:.0f}/{total:g})"
        print(f"  ... {message}{count} [{timing}]", file=self.stream, flush=True)


def _clock(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


@contextlib.contextmanager
def ticking(report: Report, every: float, message: Callable[[float], str]):
    """While the block runs, `report(0, None, message(seconds elapsed))` every `every` seconds from a thread of its
    own: a wait that has no counts of its own still says it is waiting (issue 49: `stop-training` printed one line,
    then nothing for 6 minutes). A report that fails (a client gone, a cancelled call) ends the ticks, never the
    work."""
    done, start = threading.Event(), time.monotonic()

    def tick() -> None:
        while not done.wait(every):
            try:
                report(0, None, message(time.monotonic() - start))
            except BaseException:  # noqa: BLE001 - the work goes on; its own report says what went wrong
                return

    thread = threading.Thread(target=tick, name="progress-ticks", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)
