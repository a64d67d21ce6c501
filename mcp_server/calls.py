"""A tool call's work in a thread, stopped when the client cancels it: the thread is left at once (the client gets
its cancellation) and the work raises CallCancelled at its next progress report, so a cancelled call neither runs
on nor writes its files after a newer call's. (Calls that need the training interpreter also run one at a time:
worker.in_training.)"""

from __future__ import annotations

import threading

import anyio
import anyio.to_thread


class CallCancelled(Exception):
    """The client cancelled this call; raised inside the work at its next progress report."""


def stop_point(stop: threading.Event) -> None:
    """Where the work checks whether its call was cancelled (each progress report)."""
    if stop.is_set():
        raise CallCancelled("the client cancelled this call")


async def run_cancellable(work, stop: threading.Event):
    """`work()` in a worker thread; when this task is cancelled, `stop` is set and the cancellation goes on."""
    try:
        return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        stop.set()
        raise
