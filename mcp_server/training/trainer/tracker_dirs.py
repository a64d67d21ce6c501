"""Where report_to's trackers write: inside the run (trackers/), not under the home directory or the working
directory, unless their own variables already say where. Light (the run layout only) because the training scripts
call it before importing TRL: trackio reads TRACKIO_DIR when it is imported, and TRL imports it."""

from __future__ import annotations

import os
from pathlib import Path

from mcp_server.runs import Run


def keep_trackers_in_run(run_dir: Path | str) -> None:
    trackers = Run(Path(run_dir)).trackers
    os.environ.setdefault("TRACKIO_DIR", str(trackers / "trackio"))
    os.environ.setdefault("WANDB_DIR", str(trackers))  # wandb writes its wandb/ folder in it
    # mlflow's local store: a SQLite file (MLflow 3 refuses its ./mlruns file store unless MLFLOW_ALLOW_FILE_STORE)
    os.environ.setdefault("MLFLOW_TRACKING_URI", "sqlite:///" + str((trackers / "mlflow.db").resolve()))


def make_tracker_dirs(run_dir: Path | str, report_to) -> None:
    """trackers/, when a chosen tracker writes there: wandb falls back to a temporary folder when WANDB_DIR is
    missing, and SQLite does not create its file's folder."""
    chosen = [report_to] if isinstance(report_to, str) else report_to or []
    trackers = Run(Path(run_dir)).trackers
    if ("wandb" in chosen and os.environ.get("WANDB_DIR") == str(trackers)) or (
            "mlflow" in chosen and os.environ.get("MLFLOW_TRACKING_URI", "").endswith(str(trackers / "mlflow.db"))):
        trackers.mkdir(parents=True, exist_ok=True)
