"""What diagnosis reads a logged value as, as whole tables (issue 48): every form a metric's value takes x every log
format diagnosis reads -> the number, NaN, infinity, missing, or refusal it must read as; and every share of the
base model's samples cut at the limit (the run's inspection) around BASE_CUT -> whether completions_never_terminate
says the cut predates training.

Inputs are constructed (no process, no training) and read through the core API: metrics.load_run, the reader
diagnose_run and training_status share, where what is read is the point, diagnose_run where the finding is.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml
from support import write_signed_lines

from mcp_server.diagnosis.diagnose import diagnose_run
from mcp_server.diagnosis.metrics import load_run
from mcp_server.diagnosis.models import DiagnoseRequest
from mcp_server.errors import UserInputError

NAN, INF = math.nan, math.inf
REFUSED, MISSING = "refused", "missing"
CONFIG = {"model_name_or_path": "tiny", "learning_rate": 1e-6, "beta": 0.04, "loss_type": "dapo",
          "num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 24, "bf16": False,
          "use_vllm": False, "gradient_checkpointing": False, "use_cpu": True, "output_dir": "checkpoints"}

# (form, the value as logged, what loss reads as at that step). TRL's metrics are float32 tensors: past float32's
# range (3.4028e38) is an overflow, an infinity of its sign, whether written as a number or as text.
VALUES = (
    ("JSON number", 0.25, 0.25),
    ("JSON integer", 2, 2.0),
    ("JSON NaN", NAN, NAN),
    ("JSON Infinity", INF, INF),
    ("JSON -Infinity", -INF, -INF),
    ("JSON 1e39", 1e39, INF),
    ("JSON -1e39", -1e39, -INF),
    ("JSON 3.5e38", 3.5e38, INF),
    ("JSON 3.4e38 (within float32)", 3.4e38, 3.4e38),
    ("JSON integer past float32", 10 ** 40, INF),
    ("text number", "0.25", 0.25),
    ("text number, spaced", " 0.25 ", 0.25),
    ("text nan", "nan", NAN),
    ("text NaN", "NaN", NAN),
    ("text inf", "inf", INF),
    ("text Infinity", "Infinity", INF),
    ("text -inf", "-inf", -INF),
    ("text 1e39", "1e39", INF),
    ("text -1e39", "-1e39", -INF),
    ("text 3.5e38", "3.5e38", INF),
    ("text 3.4e38 (within float32)", "3.4e38", 3.4e38),
    ("text integer past float32", str(10 ** 40), INF),
    ("empty string", "", MISSING),
    ("text null", "null", MISSING),
    ("text None", "None", MISSING),
    ("null", None, MISSING),
    ("bool true", True, REFUSED),
    ("bool false", False, REFUSED),
    ("text word", "diverged", REFUSED),
    ("list", [0.25], REFUSED),
    ("object", {"mean": 0.25}, REFUSED),
)


def _rows(value) -> list[dict]:
    """Three logged steps, loss at step 2 the value under test."""
    return [{"step": s, "loss": value if s == 2 else 0.05, "grad_norm": 0.5, "learning_rate": 1e-6, "reward": 0.5,
             "reward_std": 0.3} for s in (1, 2, 3)]


def _text(value) -> str:
    """The cell a CSV export (or a printed dict's text value) holds for `value`: every value is text."""
    return "" if value is None else str(value)


def _csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows([{k: _text(v) for k, v in r.items()} for r in rows])
    return path


def _run(root: Path) -> Path:
    run = root / "runs" / "r"
    (run / "train" / "logs").mkdir(parents=True)
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    return run


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def progress_jsonl(root: Path, rows: list[dict]) -> Path:  # the run's own train/logs/progress.jsonl, signed
    run = _run(root)
    write_signed_lines(run / "train" / "logs" / "progress.jsonl", rows)
    return run


def trainer_state(root: Path, rows: list[dict]) -> Path:  # TRL's checkpoint trainer_state.json log_history
    path = root / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 3, "log_history": rows}))
    return path


def wandb_history_jsonl(root: Path, rows: list[dict]) -> Path:  # W&B run.history() as JSON lines: _step, train/*
    return _jsonl(root / "history.jsonl", [{"_step": r["step"], **{f"train/{k}": v for k, v in r.items()
                                                                  if k != "step"}} for r in rows])


def json_list(root: Path, rows: list[dict]) -> Path:  # a JSON list of metric rows
    path = root / "metrics.json"
    path.write_text(json.dumps(rows))
    return path


def wandb_csv(root: Path, rows: list[dict]) -> Path:  # W&B "Export CSV": "<run> - train/<metric>", train/global_step
    return _csv(root / "wandb.csv", [{"train/global_step": r["step"], **{f"my-run - train/{k}": v
                                                                         for k, v in r.items() if k != "step"}}
                                     for r in rows])


def trackio_csv(root: Path, rows: list[dict]) -> Path:  # Trackio's CSV: train/global_step, train/<metric>
    return _csv(root / "trackio.csv", [{"train/global_step": r["step"], **{f"train/{k}": v for k, v in r.items()
                                                                           if k != "step"}} for r in rows])


def stdout_log(root: Path, rows: list[dict]) -> Path:  # a training known only by the dicts the Trainer prints
    path = root / "stdout.log"  # by path: a run of this project reads only its signed progress log (round 10 F1)
    path.write_text("".join(repr({k: _text(v) for k, v in r.items() if k != "step"}) + "\n" for r in rows))
    return path


FORMATS = (progress_jsonl, trainer_state, wandb_history_jsonl, json_list, wandb_csv, trackio_csv, stdout_log)


def _same(read: float, expected: float) -> bool:
    if math.isnan(expected):
        return math.isnan(read)
    return read == expected


@pytest.mark.parametrize("write", FORMATS, ids=[f.__name__ for f in FORMATS])
@pytest.mark.parametrize("form, value, expected", VALUES, ids=[v[0] for v in VALUES])
def test_a_logged_value_reads_as_its_form_says_in_every_log_format(tmp_path, workspace, write, form, value,
                                                                  expected):
    """m7-diagnosis-text-beyond-float32 (text past float32 is an infinity, as a number is), m7-diagnosis-bool-
    metric-accepted (a bool is refused, never read as missing): one table of every value form x every format."""
    source = write(tmp_path, _rows(value))
    if expected == REFUSED:
        with pytest.raises(UserInputError, match="metric 'loss' is a "):
            load_run(source)
        return
    loss = dict(load_run(source).series("loss"))
    if expected == MISSING:
        assert 2 not in loss and set(loss) == {1, 3}, loss
    else:
        assert set(loss) == {1, 2, 3} and _same(loss[2], expected), (form, loss)


def _never_ends(root: Path, meta: dict | None) -> Path:
    """A run whose completions ended until step 1 and none has since, its inspection's samples.meta.json `meta`."""
    run = _run(root)
    rows = [{"step": s, "loss": 0.05, "grad_norm": 0.5, "learning_rate": 1e-6, "reward": 0.5, "reward_std": 0.3,
             "completions/clipped_ratio": 0.5 if s == 1 else 1.0, "completions/mean_length": 24.0,
             "completions/mean_terminated_length": 6.0 if s == 1 else 0.0} for s in (1, 2, 3, 4)]
    write_signed_lines(run / "train" / "logs" / "progress.jsonl", rows)
    if meta is not None:
        (run / "inspection").mkdir()
        (run / "inspection" / "samples.meta.json").write_text(json.dumps(meta))
    return run


BEFORE = "This was so before training"


@pytest.mark.parametrize("meta, predates", [
    (None, False),  # no inspection
    ({}, False),  # an inspection that measured no lengths
    ({"lengths": {"truncated_share": 0.0, "max_new_tokens": 24}}, False),
    ({"lengths": {"truncated_share": 0.25, "max_new_tokens": 24}}, False),
    ({"lengths": {"truncated_share": 0.49, "max_new_tokens": 24}}, False),
    ({"lengths": {"truncated_share": 0.4999, "max_new_tokens": 24}}, False),
    ({"lengths": {"truncated_share": 0.5, "max_new_tokens": 24}}, True),  # BASE_CUT: at the threshold
    ({"lengths": {"truncated_share": 0.5001, "max_new_tokens": 24}}, True),
    ({"lengths": {"truncated_share": 0.51, "max_new_tokens": 24}}, True),
    ({"lengths": {"truncated_share": 1.0, "max_new_tokens": 24}}, True),
    ({"lengths": {"truncated_share": 1, "max_new_tokens": None}}, True),  # an integer share, no limit recorded
    ({"lengths": {"truncated_share": True, "max_new_tokens": 24}}, False),  # a bool is no share
    ({"lengths": {"truncated_share": "0.9", "max_new_tokens": 24}}, False),  # nor is text
], ids=["no inspection", "no lengths", "0%", "25%", "49%", "49.99%", "50% (at)", "50.01%", "51%", "100%",
        "100% as 1, no limit", "bool", "text"])
def test_completions_never_terminate_says_the_cut_predates_training_only_from_base_cut(tmp_path, workspace, meta,
                                                                                      predates):
    """m7-diagnosis-base-cut-any-share: the base model's own samples cut at the limit in at least BASE_CUT (50%)
    of the inspection's samples: the finding says the cut was there before training; under it (0% included), or
    with no inspection, it says training broke the stopping and never blames the limit."""
    d = diagnose_run(DiagnoseRequest(source=str(_never_ends(tmp_path, meta)), validate_patches=False))
    finding = next(f for f in d.findings if f.code == "completions_never_terminate")
    assert (BEFORE in finding.explanation) == predates, finding.explanation
    assert any(e.metric.startswith("inspection: base samples cut") for e in finding.evidence) == predates
    if not predates:
        assert "Completions ended on their own until step 1" in finding.explanation, finding.explanation
