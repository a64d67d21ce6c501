"""The server's warm start: TRL is imported in the training interpreter while the client is still getting ready.

`start(rehearse)` (called by the server as it starts) returns at once; a background thread then has the training
interpreter import TRL and build what validations use (recipe.trl_fields.warm_trl), then calls `rehearse()`: the
server's rehearsal of a first validation through its own door (the SDK's tool call, the core, the result model's
validation and dump, the response's shaping), so what a first call would build or run for the first time, here
and in the worker, is built and run before anyone waits. With the training interpreter in its own worker (the light
server), the worker process is started and warmed; with this Python training (a full install), the import runs in
this process.

Either begins once the server has answered `tools/list` (`tools_listed`, called by the server), or at the latest
LLM_FINETUNING_WARM_UP_DELAY_S (default 0.5 s) after `start`, for a client that never lists its tools: the import
holds this process's GIL or, for the worker, a share of the CPU (on a loaded 2-core machine a worker started with
the server doubled its time to `tools/list`), so `initialize` and `tools/list` come first.
A first validation that comes before the warm-up ends waits for it rather than starting again. Without a training
interpreter it does nothing; LLM_FINETUNING_WARM_UP=0 turns it off. A failure is logged at debug level only: the
call that needs TRL reports it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from mcp_server.worker_targets import WARM_TRL

logger = logging.getLogger("llm-finetuning")
OFF = ("0", "false", "no", "off")
IN_PROCESS_DELAY_S = 0.5
LISTED_GRACE_S = 0.05  # after tools/list is answered: its reply is written before this process's import begins

_thread: threading.Thread | None = None
_lock = threading.Lock()
_listed = threading.Event()  # the server answered tools/list


def start(rehearse: Callable[[], object]) -> threading.Thread | None:
    """Warm the training interpreter, then call `rehearse()`, in the background (once per process); the thread, or
    None when turned off."""
    global _thread
    if os.environ.get("LLM_FINETUNING_WARM_UP", "1").lower() in OFF:
        return None
    from mcp_server import worker

    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_warm, args=(worker.in_training, worker.apart, rehearse),
                                       name="llm-finetuning-warm-up", daemon=True)
            _thread.start()
        return _thread


def tools_listed() -> None:
    """The server answered tools/list: work that holds this process may begin."""
    _listed.set()


def _delay() -> float:
    try:
        return max(0.0, float(os.environ.get("LLM_FINETUNING_WARM_UP_DELAY_S", IN_PROCESS_DELAY_S)))
    except ValueError:
        return IN_PROCESS_DELAY_S


def _client_served() -> None:
    """Wait until the client's first requests are answered: tools/list, or the delay after the start."""
    if _listed.wait(timeout=_delay()):
        time.sleep(LISTED_GRACE_S)


def _warm(in_training, apart, rehearse: Callable[[], object]) -> None:
    from mcp_server.interpreter import training_python

    try:
        python = training_python()
        if python is None:
            return
        _client_served()
        in_training(WARM_TRL)
        apart(WARM_TRL)  # the keyless worker (worker_keyless): reward checks, inspection and the gate run there
        rehearse()
    except Exception as exc:  # the first call that needs TRL says what is wrong
        logger.debug("warm-up of the training interpreter failed: %r", exc)
