"""export_model's provenance is what trained, never the files as they are at export (issue 48, round 14 F2: after a
run succeeded, config.yaml, the reward code and verdict.json's reviewer were edited, and the model card described a
training that never happened). Table: each provenance field x unchanged / edited after training / launch record
missing, tampered with, or of another launch -> the card's value and its note; and a resumed run's checkpoints x
the launch that saved each (the ledger keeps each earlier launch's record). Signed records as the launcher and the
trainer write them (tests/support.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from support import append_signed, record_launch

from mcp_server.evaluation.export import model_card
from mcp_server.evaluation.provenance import trained_provenance
from mcp_server.evidence import _launch_entry, record_emission, record_launch as launcher_records
from mcp_server.inspection.trained import REWARD_SHA_ENV, VERDICT_SHA_ENV
from mcp_server.rewards import reward_code_sha256
from mcp_server.runs import Run
from mcp_server.training.launchers.base import trained_record
from mcp_server.workspace import sha256_file

LAUNCH = "a" * 32
REWARDS = [{"name": "correctness_reward", "params": {}, "weight": 1.0}]


def launched(workspace: Path, name: str = "prov", record: str = "trained") -> tuple[Run, Path, dict]:
    """A run whose checkpoint-4 the launch LAUNCH saved (its signed save line), and, per `record`, the launcher's
    signed record of that launch with what trained ("trained"), without it ("old"), or none ("none")."""
    run = Run(workspace / "runs" / f"2026-01-01-{name}")
    ckpt = run.dir / "checkpoints" / "checkpoint-4"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    run.logs.mkdir(parents=True)
    run.config.write_text(yaml.safe_dump({"model_name_or_path": "tiny", "learning_rate": 1e-5, "max_steps": 4}))
    run.rewards.write_text(json.dumps(REWARDS))
    run.verdict.parent.mkdir(parents=True, exist_ok=True)
    run.verdict.write_text(json.dumps({"verdict": "pass", "reviewer": "Ada Lovelace", "rewards": REWARDS}))
    saved(run, ckpt, LAUNCH)
    pins = {REWARD_SHA_ENV: reward_code_sha256(REWARDS), VERDICT_SHA_ENV: sha256_file(run.verdict)}
    trained = trained_record(run, sha256_file(run.config), pins, run.verdict.read_text())
    if record == "trained":
        launcher_records(run.dir, LAUNCH, trained=trained)
    elif record == "old":
        record_launch(run.dir, LAUNCH)
    return run, ckpt, {"config": trained["config_sha256"], "reward": trained["reward_code_sha256"]}


def saved(run: Run, ckpt: Path, launch: str) -> None:
    """The trainer's signed save line: `launch` saved `ckpt` (its config.json, written here when absent)."""
    if not (ckpt / "config.json").is_file():
        (ckpt / "config.json").write_text("{}")
    step = int(ckpt.name.split("-")[-1])
    append_signed(run.saves, {"save": f"checkpoints/{ckpt.name}", "step": step, "final": False,
                              "files": {"config.json": {"bytes": 2, "sha256": sha256_file(ckpt / "config.json")}},
                              "launch_id": launch})


def edit_config(run: Run) -> None:
    run.config.write_text(yaml.safe_dump({"model_name_or_path": "tiny", "learning_rate": 0.5, "max_steps": 4000}))


def edit_reward(run: Run) -> None:
    run.rewards.write_text(json.dumps([{**REWARDS[0], "weight": 2.0}]))


def edit_verdict(run: Run) -> None:
    run.verdict.write_text(json.dumps({"verdict": "pass", "reviewer": "Security Review Board (signed off)"}))


def card_of(run: Run, ckpt: Path):
    rewards = json.loads(run.rewards.read_text())
    trained = trained_provenance(run, ckpt, rewards)
    return trained, model_card(run, "tiny", trained, None, False, "c" * 64)


@pytest.mark.parametrize("edit, note", [
    (None, None),
    (edit_config, "train/config.yaml changed since training: the card gives what trained"),
    (edit_reward, "the reward code changed since training: the card gives what trained"),
    (edit_verdict, "inspection/verdict.json changed since training: the card gives what trained"),
])
def test_the_card_gives_what_trained_and_says_what_changed(workspace, edit, note):
    run, ckpt, was = launched(workspace)
    if edit:
        edit(run)
    trained, card = card_of(run, ckpt)
    assert trained.recorded and trained.config_sha256 == was["config"]
    assert f"| Training config sha256 | `{was['config']}` |" in card
    assert f"| Reward code sha256 | `{was['reward']}` |" in card
    assert "| Inspection verdict | pass by Ada Lovelace |" in card and "Security Review Board" not in card
    assert "| Reward functions | `correctness_reward` |" in card, card  # as reviewed: x1.0, whatever rewards.json says
    assert trained.notes == ([note] if note else []), trained.notes
    assert (note in card) if note else "## Provenance" not in card
    if edit is edit_config:
        assert sha256_file(run.config) not in card


def tamper(run: Run) -> None:
    path = _launch_entry(run.dir)[0]
    entry = json.loads(path.read_text())
    entry["trained"]["reviewer"] = "Security Review Board (signed off)"  # the signature no longer holds
    path.write_text(json.dumps(entry))


def other_launch(run: Run) -> None:
    launcher_records(run.dir, "b" * 32, trained={"config_sha256": "f" * 64, "verdict": "pass", "reviewer": "X"})


def saved_by_unrecorded(run: Run) -> None:
    """The checkpoint's last signed save line names a launch the ledger never recorded for this run."""
    saved(run, run.dir / "checkpoints" / "checkpoint-4", "c" * 32)


def emitted_again(run: Run) -> None:
    """The run emitted again at its path (a new run: no earlier launch is its), then launched."""
    record_emission(run.dir)
    other_launch(run)


@pytest.mark.parametrize("record, then, why", [
    ("none", None, "has no signed launch record"),
    ("trained", tamper, "has no signed launch record"),
    ("old", None, "names no config, reward code or verdict"),
    ("trained", saved_by_unrecorded, f"saved by a launch ({'c' * 32}) that is not the one recorded"),
    ("trained", emitted_again, f"saved by a launch ({LAUNCH}) that is not the one recorded ({'b' * 32})"),
])
def test_without_a_signed_record_of_what_trained_the_card_says_unrecorded(workspace, record, then, why):
    run, ckpt, _ = launched(workspace, record=record)
    if then:
        then(run)
    for edit in (edit_config, edit_reward, edit_verdict):  # the files as now are never printed as what trained
        edit(run)
    trained, card = card_of(run, ckpt)
    assert not trained.recorded and trained.config_sha256 is None
    assert "| Training config sha256 | `unrecorded` |" in card and "| Reward code sha256 | `unrecorded` |" in card
    assert "| Inspection verdict | unrecorded |" in card and "| Reward functions | unrecorded |" in card
    assert sha256_file(run.config) not in card and "Security Review Board" not in card and "Ada" not in card
    assert len(trained.notes) == 1 and trained.notes[0].startswith("provenance unrecorded: ") and why in card


@pytest.mark.parametrize("resumes", [1, 2])
def test_a_resumed_run_s_checkpoints_export_with_the_launch_that_saved_each(workspace, resumes):
    """checkpoint-4 saved by the first launch, checkpoint-4k by the k-th resume (its own config, verdict, reviewer
    and rewards): each card gives what its own launch trained, read from the signed ledger."""
    run, first, was = launched(workspace)
    saves = {first: (was["config"], "Ada Lovelace", "`correctness_reward`")}
    for k in range(1, resumes + 1):
        launch, step = f"{k}" * 32, 4 * (k + 1)
        ckpt = run.dir / "checkpoints" / f"checkpoint-{step}"
        ckpt.mkdir()
        saved(run, ckpt, launch)
        launcher_records(run.dir, launch, trained={"config_sha256": f"{k}" * 64, "verdict": "pass",
                                                   "reviewer": f"Reviewer {k}",
                                                   "rewards": [{"name": "format_reward", "weight": float(k + 1)}]})
        saves[ckpt] = (f"{k}" * 64, f"Reviewer {k}", f"`format_reward` x{float(k + 1)}")
    for ckpt, (config, reviewer, rewards) in saves.items():
        trained, card = card_of(run, ckpt)
        assert trained.recorded and trained.config_sha256 == config, (ckpt.name, trained)
        assert f"| Inspection verdict | pass by {reviewer} |" in card, card
        assert f"| Reward functions | {rewards} |" in card, card
