"""report_to's trackers acting in a real run: `emit-config --report-to trackio,wandb,mlflow`, then 2 GRPO steps on
the tiny model with the run's own train/train.py, then, a row per tracker, `train/reward` read back through the
tracker's own API from the files it wrote inside the run (trackers/): trackio's SQLite store, wandb's offline run
file (its records parsed with wandb's own protobuf schema), mlflow's local SQLite store (MLflow 3 refuses its old
./mlruns file store). One run logs to all three (issue 45: a training process per tracker cost a TRL start each);
each row reads only its own tracker's files.

The trackers pin other versions of packages the test venv shares, so they live in a venv of their own, the training
interpreter here (`make trackers`: .venv-trackers, or LLM_FINETUNING_TRACKERS_PYTHON)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from conftest import ANY_TEXT_REWARDS, ROOT, checkout_env, run_cli_json, skip_unless_ci

pytestmark = pytest.mark.slow  # every test here starts a process or trains (the lanes: conftest.py)

STEPS = {"max_steps": 2, "per_device_train_batch_size": 4, "num_generations": 4, "gradient_accumulation_steps": 1,
         "max_completion_length": 8, "logging_steps": 1, "save_strategy": "no"}

# Each prints [[step, train/reward], ...] read with the tracker's own API from what it wrote under the run.
READERS = Path(__file__).resolve().parent / "fixtures" / "trackers"


def trackers_python() -> str:
    python = os.environ.get("LLM_FINETUNING_TRACKERS_PYTHON") or str(ROOT / ".venv-trackers" / "bin" / "python")
    if not Path(python).is_file():
        skip_unless_ci(f"no trackers venv at {python} (make trackers builds it)")
    return python


TRACKERS = ["trackio", "wandb", "mlflow"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model):
    """The run emitted with every tracker and trained (2 steps), its environment and its own progress rewards."""
    from support import module_workspace

    python = trackers_python()
    flags = [arg for key, value in STEPS.items() for arg in ("--override", f"{key}={value}")]
    with module_workspace(tmp_path_factory, "trackers-ws") as workspace:
        proc, out = run_cli_json("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu",
                                 "--run-name", "trackers", "--report-to", ",".join(TRACKERS),
                                 "--rewards", json.dumps(ANY_TEXT_REWARDS), *flags, here=True)
        assert proc.returncode == 0, proc.stderr
        run = Path(out["run_dir"])
        config = yaml.safe_load((run / "train/config.yaml").read_text())
        assert config["report_to"] == TRACKERS
        # the trackers' own variables unset: the run decides where they write; wandb offline, as the skill says
        env = {k: v for k, v in checkout_env().items()
               if k not in ("TRACKIO_DIR", "WANDB_DIR", "MLFLOW_TRACKING_URI", "WANDB_MODE")}
        env.update(WANDB_MODE="offline", WANDB_SILENT="true", PROJECT=str(config.get("project", "")),
                   HF_HOME=str(workspace / "hf-home"), MPLCONFIGDIR=str(workspace / "mpl"))
        train = subprocess.run([python, "train/train.py", "--config", "train/config.yaml"], cwd=run, env=env,
                               capture_output=True, text=True, timeout=600)
        assert train.returncode == 0, train.stderr[-3000:]
        progress = [json.loads(line) for line in (run / "train/logs/progress.jsonl").read_text().splitlines()]
        yield SimpleNamespace(python=python, run=run, env=env, workspace=workspace,
                              rewards={r["step"]: r["reward"] for r in progress if r.get("reward") is not None})


@pytest.mark.parametrize("tracker", TRACKERS)
def test_tracker_logs_the_reward_of_a_real_run_inside_it(tracker, trained):
    run = trained.run
    assert (run / "trackers").is_dir() and not (trained.workspace / "hf-home" / "trackio").exists()
    reader_env = {**trained.env, "TRACKIO_DIR": str(run / "trackers" / "trackio")}  # where the run said it writes
    read = subprocess.run([trained.python, str(READERS / f"read_{tracker}.py")], cwd=run, env=reader_env,
                          capture_output=True, text=True, timeout=300)
    assert read.returncode == 0, read.stderr[-3000:]
    logged = json.loads(read.stdout.strip().splitlines()[-1])
    assert [step for step, _ in logged] == [1, 2], logged
    # the same rewards this project's own progress file holds for those steps
    assert all(abs(value - trained.rewards[step]) < 1e-6 for step, value in logged), (logged, trained.rewards)
