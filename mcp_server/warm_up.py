"""The server's warm start: TRL is imported in the training interpreter while the client is still getting ready.

`start()` (called by `python -m mcp_server` before it imports the server, and by the server as it starts: the
second call is a no-op) returns at once; a background thread then has the training interpreter import TRL and
build what validations use (recipe.trl_fields.warm_trl), caches TRL's field table here, and runs one validation
(the rules' own imports, here and in the worker).

When the training interpreter is another Python (the light server), its worker process is started at once: the
import runs in that process and holds nothing of this one, so it overlaps this process's own start. When this
Python trains (a full install), the import runs in this process and holds its GIL (or a core of a small
machine): it begins once the server has answered `tools/list` (`tools_listed`, called by the server), or at the
latest LLM_FINETUNING_WARM_UP_DELAY_S (default 0.5 s) after the server began serving for a client that never
lists its tools, so `initialize` and `tools/list` are not slowed. The server-side part of the warm-up (the field
table, the validation's imports) waits the same way in both cases. A first validation that comes before the
warm-up ends waits for it rather than starting again. Without a training interpreter it does nothing;
LLM_FINETUNING_WARM_UP=0 turns it off. A failure is logged at debug level only: the call that needs TRL reports it.
"""

from __future__ import annotations

import logging
import os
import threading
import time

logger = logging.getLogger("llm-finetuning")
OFF = ("0", "false", "no", "off")
IN_PROCESS_DELAY_S = 0.5
LISTED_GRACE_S = 0.05  # after tools/list is answered: its reply is written before this process's import begins
WARM_TRL = "mcp_server.recipe.trl_fields:warm_trl"

_thread: threading.Thread | None = None
_lock = threading.Lock()
_serving = threading.Event()  # the server reads its input: the client's requests are being answered
_listed = threading.Event()  # the server answered tools/list


def start() -> threading.Thread | None:
    """Warm the training interpreter in the background (once per process); the thread, or None when turned off."""
    global _thread
    if os.environ.get("LLM_FINETUNING_WARM_UP", "1").lower() in OFF:
        return None
    from mcp_server import worker  # imported here, not in the thread: it would contend with the server's imports

    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_warm, args=(worker.in_training,), name="llm-finetuning-warm-up",
                                       daemon=True)
            _thread.start()
        return _thread


def serving() -> None:
    """The server reads its client's requests from now on (the fallback delay counts from here)."""
    _serving.set()


def tools_listed() -> None:
    """The server answered tools/list: work that holds this process may begin."""
    _listed.set()


def _delay() -> float:
    try:
        return max(0.0, float(os.environ.get("LLM_FINETUNING_WARM_UP_DELAY_S", IN_PROCESS_DELAY_S)))
    except ValueError:
        return IN_PROCESS_DELAY_S


def _client_served() -> None:
    """Wait until the client's first requests are answered: tools/list, or the delay after serving began."""
    _serving.wait()
    if _listed.wait(timeout=_delay()):
        time.sleep(LISTED_GRACE_S)


def _warm(in_training) -> None:
    from mcp_server.interpreter import is_this_python, training_python

    try:
        python = training_python()
        if python is None:
            return
        here = is_this_python(python)
        if not here:  # the worker imports TRL in its own process: at once, beside this process's own start
            in_training(WARM_TRL)
        _client_served()
        if here:
            in_training(WARM_TRL)
        from mcp_server.recipe.trl_fields import installed_trl
        from mcp_server.recipe.validate import validate_values

        installed_trl()  # the field table, cached in this process
        # One validation: what the rules import, here and in the worker (rewards, the local HF cache lookup of a
        # hub model's config: never the network).
        validate_values({"model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "learning_rate": 1e-6,
                         "reward_funcs": ["mcp_server.rewards.format_reward"]}, gpu="H100")
    except Exception as exc:  # the first call that needs TRL says what is wrong
        logger.debug("warm-up of the training interpreter failed: %r", exc)
