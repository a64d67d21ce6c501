"""The server's warm start: TRL is imported in the training interpreter while the client is still getting ready.

`start()` (called by the server as it starts) returns at once; a background thread then asks the training
interpreter to import TRL and build what validations use (recipe.trl_fields.warm_trl), caches TRL's field
table here, and runs one validation (the rules' own imports, here and in the worker). With the
training interpreter in its own worker (the light server), the worker process is started and warmed; with this
Python training (a full install), the import runs in this process. Either begins once the server has answered
the client's first requests (LLM_FINETUNING_WARM_UP_DELAY_S, default 0.5 s: the import holds this process's
GIL, or a core of a small machine, and would slow `initialize` and `tools/list`). A first validation that comes
before the warm-up ends waits for it rather than starting again. Without a training interpreter it does
nothing; LLM_FINETUNING_WARM_UP=0 turns it off. A failure is logged at debug level only: the call that needs
TRL reports it.
"""

from __future__ import annotations

import logging
import os
import threading
import time

logger = logging.getLogger("llm-finetuning")
OFF = ("0", "false", "no", "off")
IN_PROCESS_DELAY_S = 0.5


def start() -> threading.Thread | None:
    """Warm the training interpreter in the background; the thread, or None when turned off."""
    if os.environ.get("LLM_FINETUNING_WARM_UP", "1").lower() in OFF:
        return None
    thread = threading.Thread(target=_warm, name="llm-finetuning-warm-up", daemon=True)
    thread.start()
    return thread


def _delay() -> float:
    try:
        return max(0.0, float(os.environ.get("LLM_FINETUNING_WARM_UP_DELAY_S", IN_PROCESS_DELAY_S)))
    except ValueError:
        return IN_PROCESS_DELAY_S


def _warm() -> None:
    from mcp_server.interpreter import training_python
    from mcp_server.recipe.trl_fields import installed_trl
    from mcp_server.recipe.validate import validate_values
    from mcp_server.worker import in_training
    from mcp_server.worker_targets import WARM_TRL

    try:
        if training_python() is None:
            return
        time.sleep(_delay())  # let the client's first requests through
        in_training(WARM_TRL)
        installed_trl()  # the field table, cached in this process
        # One validation: what the rules import, here and in the worker (rewards, the local HF cache lookup of a
        # hub model's config: never the network).
        validate_values({"model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "learning_rate": 1e-6,
                         "reward_funcs": ["mcp_server.rewards.format_reward"]}, gpu="H100")
    except Exception as exc:  # the first call that needs TRL says what is wrong
        logger.debug("warm-up of the training interpreter failed: %r", exc)
