"""Whether the run trains at its config's learning rate (issue 49: a resume patch of learning_rate was reported as
applied, and the resumed steps trained at the launched rate, restored from the checkpoint's optimizer.pt and
scheduler.pt).

The trainer's train-begin record (signed) holds the rate its schedule runs from, read after a resume's loads and
after training/trainer/resumed_settings.py put the config's back; a rate other than the config's is said. A trainer
that recorded none (resumed before the fix) is held to what every transformers schedule keeps: a factor of at most
1 on the base rate, so a logged learning_rate above the config's after the resume cannot be the config's schedule.
"""

from __future__ import annotations

import math

from mcp_server.config.grpo_fields import GRPOView
from mcp_server.evidence import valid_run
from mcp_server.runs import Run, read_json_if_present


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def rate_note(home: Run | None, config: dict, logged: list[tuple[int, float]]) -> str | None:
    """A sentence when the run's schedule does not run from its config's learning_rate, else None."""
    if home is None:
        return None
    configured = _number(config.get("learning_rate", GRPOView.DEFAULTS["learning_rate"]))
    try:
        begin = read_json_if_present(home.train_begin)
    except Exception:  # noqa: BLE001 - a record that cannot be read says nothing here
        begin = None
    if configured is None or not isinstance(begin, dict) or not valid_run(home, home.train_begin, begin):
        return None
    applied, since = _number(begin.get("learning_rate")), begin.get("global_step")
    if applied is not None:
        if math.isclose(applied, configured, rel_tol=1e-6):
            return None
        return (f"the trainer's schedule runs from learning_rate {applied:g} (train/logs/train-begin.json), the "
                f"config says {configured:g}: the change did not act (resume with the patch again, or launch anew)")
    above = [(s, v) for s, v in logged if isinstance(since, int) and s > since and v > configured * (1 + 1e-6)]
    if above:
        step, value = above[0]
        return (f"learning_rate logged {value:g} at step {step}, above the config's {configured:g}, which no "
                "schedule reaches: the resumed steps train at the checkpoint's rate, not the config's (a resume "
                "patch of learning_rate before issue 49's fix did not act)")
    return None
