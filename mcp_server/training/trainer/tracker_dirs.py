"""Where report_to's trackers write: inside the run (trackers/), not under the home directory or the working
directory, unless their own variables already say where. Light (the run layout only) because the training scripts
call it before importing TRL: trackio reads TRACKIO_DIR when it is imported, and TRL imports it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp_server.runs import Run
from mcp_server.training.trainer.written import WRITTEN, written_problems


def keep_trackers_in_run(run_dir: Path | str) -> None:
    trackers = Run(Path(run_dir).resolve()).trackers  # the run's own: never resolved through a link in it
    os.environ.setdefault("TRACKIO_DIR", str(trackers / "trackio"))
    os.environ.setdefault("WANDB_DIR", str(trackers))  # wandb writes its wandb/ folder in it
    # mlflow's local store: a SQLite file (MLflow 3 refuses its ./mlruns file store unless MLFLOW_ALLOW_FILE_STORE)
    os.environ.setdefault("MLFLOW_TRACKING_URI", "sqlite:///" + str(trackers / "mlflow.db"))


def make_tracker_dirs(run_dir: Path | str, report_to) -> None:
    """trackers/, when a chosen tracker writes there: wandb falls back to a temporary folder when WANDB_DIR is
    missing, and SQLite does not create its file's folder."""
    chosen = [report_to] if isinstance(report_to, str) else report_to or []
    run = Run(Path(run_dir).resolve())
    trackers, checked = run.trackers, bool({"wandb", "mlflow", "trackio"} & set(chosen))
    if checked:  # a dangling link there is named, not an error of mkdir
        refuse_trackers_links(run)
    if ("wandb" in chosen and os.environ.get("WANDB_DIR") == str(trackers)) or (
            "mlflow" in chosen and os.environ.get("MLFLOW_TRACKING_URI", "").endswith(str(trackers / "mlflow.db"))):
        trackers.mkdir(parents=True, exist_ok=True)
    if checked:
        refuse_trackers_links(run)


def refuse_trackers_links(run: Run) -> None:
    """The gate's check of trackers/ (written.WRITTEN's row), again where the trainer is about to write there:
    trackers/ a symbolic link, or a link, a second name of a file or a pipe under it (round 19, b01: mlflow.db
    written outside the workspace), refused with exit 3 naming it, before any tracker opens its store."""
    links, shared = written_problems(run, [(t, run.trackers) for t in WRITTEN if t.member == "trackers"])
    if links or shared:
        said = ", ".join([f"{p.relative_to(run.dir)} is a symbolic link" for p in links] + shared)
        print(f"llm-finetuning: refusing to train: {said}: the trackers write only into the run's own files. "
              "Remove them (trackers/ is made afresh), then launch again", file=sys.stderr, flush=True)
        raise SystemExit(3)
