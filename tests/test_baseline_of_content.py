"""Issue 48, round 10 F3: a baseline is of a model's content, not of its path or name.

The blind round zeroed the embedding and lm_head of `ws/models/tiny`, measured it (a signed 0% baseline), put the
real model back (100%), trained a run on `models/tiny`, and promote_checkpoint said PROMOTE, +100 points, against
the other weights' baseline. A baseline now records its model's pin (inspection.pins.model_pin, the function the
verdict pins the model with) and promote_checkpoint uses only one whose content (pins.model_content) is the run's
reviewed base: the verdict's pin when it has one, else the config's model pinned now. Otherwise, without goldens,
it refuses naming both digests; with goldens, it measures the base model afresh, beside the other baseline.

Table: {a local folder, a hub name resolved in the local cache} x {weights changed, tokenizer or config changed,
unchanged} between the baseline and the run. Cheap: two goldens, two new tokens, the tiny model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from mcp_server.errors import UserInputError
from mcp_server.evaluation.evaluate import baselines_of, evaluate_model
from mcp_server.evaluation.models import EvaluateRequest, PromoteRequest
from mcp_server.evaluation.promote import promote_checkpoint
from mcp_server.inspection.pins import model_content, model_pin
from mcp_server.tiny import make_task, write_jsonl

TOKENS = 2
GRADERS = [{"name": "correctness_reward"}]
FORMS = ("a local folder", "a hub name resolved in the local cache")
CHANGES = ("weights", "tokenizer or config", "unchanged")


def _base(form: str, workspace: Path, tiny_model: Path, tmp_path: Path, monkeypatch) -> tuple[str, Path]:
    """(the name the person gives, the folder whose files are the model): a copy of the tiny model under the
    workspace (models/tiny), or the snapshot of `local/tiny` in a local Hugging Face cache (refs/main -> it)."""
    if form == "a local folder":
        folder = workspace / "models" / "tiny"
        shutil.copytree(tiny_model, folder)
        return str(folder), folder
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    root = tmp_path / "hub" / "models--local--tiny"
    folder = root / "snapshots" / ("c" * 40)
    shutil.copytree(tiny_model, folder)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("c" * 40)
    return "local/tiny", folder


def _change(folder: Path, change: str) -> None:
    """The weights (the embedding and lm_head zeroed, as the round did) or the tokenizer/config edited."""
    if change == "weights":
        from safetensors.torch import load_file, save_file

        tensors = load_file(folder / "model.safetensors")
        for name in tensors:
            if "embed" in name or "lm_head" in name:
                tensors[name] = tensors[name] * 0
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    elif change == "tokenizer or config":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "note": "edited after the baseline"}))


def _run(workspace: Path, name: str, base: str, checkpoint: Path) -> Path:
    """A run as emission and training leave it, never launched: its config naming `base`, its checkpoint."""
    run = workspace / "runs" / "2026-01-01-content"
    (run / "train").mkdir(parents=True)
    shutil.copytree(checkpoint, run / "checkpoints")
    (run / "train" / "config.yaml").write_text(yaml.safe_dump({
        "model_name_or_path": base, "output_dir": "checkpoints", "max_completion_length": TOKENS}))
    (run / "train" / "rewards.json").write_text(json.dumps([{**GRADERS[0], "params": {}, "weight": 1.0}]))
    return run


@pytest.fixture()
def goldens(tmp_path) -> Path:
    path = tmp_path / "goldens.jsonl"
    write_jsonl([{k: r[k] for k in ("prompt", "answer")} for r in make_task(n=2, max_operand=3)], path)
    return path


def _measure(name: str, goldens: Path):
    return evaluate_model(EvaluateRequest(model=name, goldens=str(goldens), graders=GRADERS, max_new_tokens=TOKENS))


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("form", FORMS)
def test_a_baseline_counts_only_for_the_content_it_measured(workspace, tiny_model, tmp_path, monkeypatch, goldens,
                                                             form, change):
    name, folder = _base(form, workspace, tiny_model, tmp_path, monkeypatch)
    real = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    _change(folder, change)
    measured = _measure(name, goldens)  # the baseline of what the folder holds now
    recorded = json.loads(Path(measured.baseline_path).read_text())["model_pin"]
    assert model_content(recorded) == model_content(model_pin(name))
    for relative, data in real.items():  # the real model back, then a run trained from it
        (folder / relative).write_bytes(data)
    run = _run(workspace, "content", name, tiny_model)
    run_content = model_content(model_pin(name))
    if change == "unchanged":
        result = promote_checkpoint(PromoteRequest(run=str(run)))
        assert result.baseline_path == measured.baseline_path, result.baseline_choice
        assert result.improvement_points == 0 and result.verdict == "REJECT", result.reasons
        # the base's drift record is of that content too: filed under its digest, never reused for other weights
        drift = list((workspace / "eval").glob("drift-*.json"))
        assert [p.stem[-12:] for p in drift] == [run_content[:12]], drift
        return
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run)))
    message = str(refused.value)
    assert refused.value.field == "baseline" and Path(measured.baseline_path).name in message, message
    assert model_content(recorded)[:12] in message and run_content[:12] in message, message
    assert not (run / "promotion.json").exists()
    # with goldens, the base as it trained is measured now, beside the other content's baseline (never over it)
    result = promote_checkpoint(PromoteRequest(run=str(run), goldens=str(goldens)))
    assert result.baseline_path != measured.baseline_path and len(baselines_of(name)) == 2
    fresh = json.loads(Path(result.baseline_path).read_text())
    assert model_content(fresh["model_pin"]) == run_content
    assert result.improvement_points == 0 and result.verdict == "REJECT", result.reasons


def test_the_reviewed_pin_decides_not_the_folder_now(workspace, tiny_model, tmp_path, monkeypatch, goldens):
    """A run's base is what its inspection verdict reviewed (the pin the gate and the trainer held the launch to,
    reused, not hashed again): a baseline of the folder's content now, changed since, is another model's."""
    name, folder = _base(FORMS[0], workspace, tiny_model, tmp_path, monkeypatch)
    run = _run(workspace, "reviewed", name, tiny_model)
    (run / "inspection").mkdir()
    reviewed = model_pin(name)
    (run / "inspection" / "verdict.json").write_text(json.dumps({"verdict": "pass", "pins": {"model": reviewed}}))
    _change(folder, "weights")
    measured = _measure(name, goldens)
    with pytest.raises(UserInputError, match=model_content(reviewed)[:12]) as refused:
        promote_checkpoint(PromoteRequest(run=str(run)))
    assert Path(measured.baseline_path).name in str(refused.value)
    # measuring now is refused too: the folder is not what the run trained from
    with pytest.raises(UserInputError, match="is not now what this run trained from") as now:
        promote_checkpoint(PromoteRequest(run=str(run), goldens=str(goldens)))
    assert now.value.field == "model" and len(baselines_of(name)) == 1


@pytest.mark.slow  # CLI processes, as the round ran them
def test_the_rounds_replay_through_the_cli(workspace, tiny_model, tmp_path, monkeypatch, goldens):
    """The round's steps through `llm-finetuning` processes: evaluate-model on the zeroed weights, the real model
    back, promote-checkpoint refused naming both digests (exit 2), then with --goldens measured afresh: +0, REJECT."""
    from conftest import run_cli

    name, folder = _base(FORMS[0], workspace, tiny_model, tmp_path, monkeypatch)
    real = (folder / "model.safetensors").read_bytes()
    _change(folder, "weights")
    zeroed = model_content(model_pin(name))
    proc = run_cli("evaluate-model", "models/tiny", "--goldens", str(goldens), "--graders", json.dumps(GRADERS),
                   "--max-new-tokens", str(TOKENS), cwd=workspace, process=True)
    assert proc.returncode == 0, proc.stderr[-600:]
    (folder / "model.safetensors").write_bytes(real)
    run = _run(workspace, "replay", name, tiny_model)
    proc = run_cli("promote-checkpoint", str(run), cwd=workspace, process=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-600:]
    assert zeroed[:12] in proc.stderr and model_content(model_pin(name))[:12] in proc.stderr, proc.stderr
    proc = run_cli("promote-checkpoint", str(run), "--goldens", str(goldens), "--json", cwd=workspace, process=True)
    assert proc.returncode == 1, proc.stderr[-600:]  # exit 0 only on PROMOTE
    result = json.loads(proc.stdout)
    assert result["verdict"] == "REJECT" and result["improvement_points"] == 0, result["reasons"]
