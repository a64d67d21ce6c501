"""The live guard: the diagnosis rules for hard failures, run by the progress callback on every logged step.

Modes (the run's train/request.json `guard`, set by emit_grpo_config): "warn" (the default) records the live
findings in train/logs/guard.json (signed, tagged with the launch id, as the trainer's other records); "stop" also
stops the run at the first hard failure, after saving a checkpoint (not after a non-finite loss: the weights are
non-finite too, and the previous checkpoint is the one to resume from); "off" skips the check. Hard failures are
the findings of the codes diagnosis/registry.py marks `guard`, at error severity: the ones that only get worse with
more steps (a lost signal among them).

The rules are diagnose_run's own (the same thresholds, explanations and patches) on the last WINDOW logged
rows, kept in memory: each check costs a fixed, small amount whatever the run's length (bench/bench_guard.py
measures it against the step time). Patches are not validated here (that imports the validator); diagnose_run
validates them.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque

from mcp_server.errors import UserInputError
from mcp_server.evidence import sign_run, valid_run
from mcp_server.recipe.recorded import RecordedRequest, read_recorded
from mcp_server.runs import LAUNCH_ID_ENV, Run, read_json_if_present
from mcp_server.diagnosis.context import Ctx
from mcp_server.diagnosis.metrics import LoadedRun, normalize_row, rows_from_records
from mcp_server.diagnosis.progress_log import run_progress
from mcp_server.diagnosis.registry import GUARD_CODES, GUARD_RULES
from mcp_server.userfiles import load_config_file
from mcp_server.workspace import atomic_write_json

WINDOW = 64  # logged rows the live rules read
NO_CHECKPOINT = {"nan_loss", "no_steps_trained"}  # non-finite weights are not worth saving; 0 steps have none to save


def run_request(run: Run) -> RecordedRequest:
    """train/request.json (recipe.recorded); an empty record when absent, or when it is not a record this version
    reads, which is said once on stderr (the run's stdout.log): a broken request must not stop training."""
    try:
        return read_recorded(run.request)
    except UserInputError as exc:
        print(f"llm-finetuning guard: {exc}; the guard runs without the recorded request (mode warn)",
              file=sys.stderr, flush=True)
        return RecordedRequest()


def run_config(run: Run) -> dict:
    """train/config.yaml, {} when absent or unreadable (the guard then reads the GRPOConfig alone)."""
    try:
        config = load_config_file(run.config, field="config") if run.config.is_file() else {}
    except Exception:
        return {}
    return config if isinstance(config, dict) else {}


def guard_mode(run: Run) -> str:
    """The run's guard mode from train/request.json: off, warn or stop ("warn" when the record names none)."""
    return run_request(run).guard


def read_guard(run: Run, launch_id: str | None = None) -> dict | None:
    """train/logs/guard.json as the guard wrote it: signed there with the key outside the workspace (evidence.py)
    and, given `launch_id`, tagged with it; None when absent, unreadable, unsigned (written by hand: it would set
    the stop and the patch training_status shows, and whether an outcome is a lost signal) or of another launch."""
    try:
        data = read_json_if_present(run.guard)
    except Exception:
        return None
    if not isinstance(data, dict) or not valid_run(run, run.guard, data):
        return None
    return data if launch_id is None or data.get("launch_id") == launch_id else None


def earlier_rows(run: Run, step: int) -> list[dict]:
    """The rows the run logged before this launch, up to `step` (the checkpoint a resume starts from), as
    diagnose_run reads them: only the lines the trainer signed (evidence.py: a line written by hand reads as
    absent), an earlier attempt's lines past its checkpoint dropped. [] when none reads."""
    try:
        signed = run_progress(run).records  # the one reader of a run's own log: its signed lines
        return [row for row in rows_from_records(signed, run.progress, restarts=True) if row["step"] <= step]
    except (OSError, UserInputError):
        return []


class LiveGuard:
    """The guard judges the run, not the launch: a resumed launch's window starts with the run's earlier lines
    (`resume`), so a signal lost over two launches of two logs each is seen."""

    def __init__(self, run: Run, mode: str, config: dict, request: RecordedRequest | None = None):
        self.run, self.mode = run, mode
        self.config, self.request = config, request or RecordedRequest()
        self.rows: deque[dict] = deque(maxlen=WINDOW)
        self.first_step: int | None = None  # the run's first logged step (it precedes the run's first update)
        self._last_codes: tuple = ()
        self.stopped: dict | None = None

    def resume(self, step: int) -> None:
        """A launch resumed at `step`: the window starts with the run's signed lines up to it; without any, the
        run's first line is not among the rows (0: none of them precedes the run's first update)."""
        earlier = earlier_rows(self.run, step)
        self.rows.extend(earlier)
        self.first_step = earlier[0]["step"] if earlier else 0

    def observe(self, line: dict) -> list:
        """Add one progress line; the hard-failure findings on the window (errors first)."""
        row = normalize_row(line, len(self.rows))
        if row is not None:
            self.rows.append(row)
            if self.first_step is None:
                self.first_step = row["step"]
        loaded = LoadedRun(kind="live", metrics_path=None, rows=list(self.rows), home=self.run,
                           config=self.config, request=self.request, first_step=self.first_step)
        ctx = Ctx(loaded)
        found = [f for rule in GUARD_RULES for f in rule(ctx) if f.code in GUARD_CODES]
        return sorted(found, key=lambda f: f.severity != "error")

    def check(self, line: dict, write: bool) -> dict | None:
        """Run the rules on a new line; record the findings when they change (rank 0 writes). Returns the stop
        decision {code, step, save} when mode is "stop" and a hard failure is found."""
        if self.mode == "off" or self.stopped:
            return None
        findings = self.observe(line)
        hard = [f for f in findings if f.severity == "error"]
        step = line.get("step")
        decision = None
        if hard and self.mode == "stop":
            decision = {"code": hard[0].code, "step": step, "time": time.time(),
                        "save": not any(f.code in NO_CHECKPOINT for f in hard)}
            self.stopped = decision
        codes = tuple((f.code, f.severity) for f in findings)
        if write and (codes != self._last_codes or decision):
            self._last_codes = codes
            tag = os.environ.get(LAUNCH_ID_ENV)  # whose record this is (the launcher's launch id)
            atomic_write_json(self.run.inside(self.run.guard), sign_run(self.run, self.run.guard, {
                "mode": self.mode, "step": step, "time": time.time(), "stopped": decision,
                "findings": [f.model_dump() for f in findings], **({"launch_id": tag} if tag else {}),
            }))  # signed as the trainer's other records (evidence.py): one written by hand reads as absent
        return decision
