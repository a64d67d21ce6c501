"""What is measured or sampled is the model whose pin is recorded (round 18, b05/b06; issue 48): evaluate_model's
baseline (its model_pin), promote's drift decodes of the base (the baseline's pin) and sample_completions' samples
(samples.meta.json's model pin) each pinned the model folder, then loaded it by path. Each row runs the door with a
file renamed over the pinned one at a deterministic point (a hook around the load, never a sleep race) and put
back after it: the door must refuse, naming the file, with nothing recorded, or have used the pinned bytes.
Constructed with the tiny model, no training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mcp_server.errors import UserInputError
from test_loaded_is_what_was_checked import EVIL_TEMPLATE, MARKED, _evil_weights, _placed_run, _rename_over


def _swapped_when(folder: Path, name: str, evil: bytes, owner, method: str, monkeypatch) -> list:
    """Wrap `owner.method` (a load): its first call that loads `folder` runs with `evil` renamed over `name` there,
    put back after it (the round's racer at its exact point). Returns the log of swaps."""
    real, log, target = getattr(owner, method), [], folder / name

    def swapped(ref, *args, **kwargs):
        if log or Path(str(ref)).resolve() != folder.resolve():
            return real(ref, *args, **kwargs)
        good = target.read_bytes()
        _rename_over(target, evil)
        log.append(str(target))
        try:
            return real(ref, *args, **kwargs)
        finally:
            _rename_over(target, good)
    monkeypatch.setattr(owner, method, swapped)
    return log


def _goldens(workspace: Path) -> Path:
    from mcp_server.tiny import make_task, write_jsonl

    goldens = workspace / "goldens.jsonl"
    write_jsonl([{k: r[k] for k in ("prompt", "question", "answer")} for r in make_task(n=4, max_operand=3)], goldens)
    return goldens


def _baselines(workspace: Path) -> list[Path]:
    return sorted((workspace / "eval").glob("baseline-*.json")) if (workspace / "eval").is_dir() else []


@pytest.mark.parametrize("name", ["model.safetensors", "chat_template.jinja"])
def test_a_baseline_measures_the_base_its_pin_records(workspace, tiny_model, monkeypatch, name):
    """b05: evaluate_model pins the base folder (the baseline's model_pin), then loads it: weights renamed over it for
    that load and put back are refused, naming the tensor, and no baseline is filed; a chat template renamed in for
    the tokenizer's read never renders the prompts measured."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest

    base = Path(shutil.copytree(tiny_model, workspace / "base"))
    weights = name == "model.safetensors"
    evil = _evil_weights(base / name) if weights else EVIL_TEMPLATE.encode()
    log = _swapped_when(base, name, evil, AutoModelForCausalLM if weights else AutoTokenizer, "from_pretrained",
                        monkeypatch)
    request = EvaluateRequest(model=str(base), goldens=str(_goldens(workspace)), max_new_tokens=4)
    if weights:
        with pytest.raises(UserInputError, match=f"nothing was measured or filed.*{name}: {MARKED}"):
            evaluate_model(request)
        assert log and not _baselines(workspace)
        return
    result = evaluate_model(request)
    assert log and result.baseline_path and all("EVIL" not in item.prompt for item in result.items)
    assert "EVIL" not in json.dumps(json.loads(Path(result.baseline_path).read_text())["items"])


def test_promote_decodes_the_base_its_baseline_pins_on_the_drift_suite(workspace, tiny_model, monkeypatch):
    """b05's drift half: promote decodes the base model on the drift suite as the content its baseline pins; weights
    renamed over the base for that load and put back are refused, naming the tensor, and no promotion is written."""
    from transformers import AutoModelForCausalLM

    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest, PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    base = Path(shutil.copytree(tiny_model, workspace / "base"))
    evaluate_model(EvaluateRequest(model=str(base), goldens=str(_goldens(workspace)), max_new_tokens=4))
    assert _baselines(workspace)
    run = _placed_run(workspace, tiny_model, base=str(base))
    log = _swapped_when(base, "model.safetensors", _evil_weights(base / "model.safetensors"), AutoModelForCausalLM,
                        "from_pretrained", monkeypatch)
    with pytest.raises(UserInputError, match=f"nothing was decoded.*model.safetensors: {MARKED}"):
        promote_checkpoint(PromoteRequest(run=str(run)))
    assert log and not (run / "promotion.json").exists()


def test_samples_for_review_are_the_pinned_models(workspace, tiny_model, monkeypatch):
    """b06: sample_completions pins the run's model folder (samples.meta.json's model pin, the verdict's), then loads
    it: weights renamed over it for that load and put back are refused, naming the tensor, and no samples are
    written for a review."""
    from transformers import AutoModelForCausalLM

    from mcp_server.inspection.models import SampleRequest
    from mcp_server.inspection.sampling import sample_completions
    from support import emit_run

    model = Path(shutil.copytree(tiny_model, workspace / "model"))
    run_dir = emit_run("pinned", model=str(model))
    log = _swapped_when(model, "model.safetensors", _evil_weights(model / "model.safetensors"), AutoModelForCausalLM,
                        "from_pretrained", monkeypatch)
    with pytest.raises(UserInputError, match=f"nothing was sampled.*model.safetensors: {MARKED}"):
        sample_completions(SampleRequest(run=str(run_dir), num_prompts=2, engine="transformers"))
    assert log and not (run_dir / "inspection" / "samples.jsonl").exists()


def test_sampling_reads_the_pinned_tokenizer_once(workspace, tiny_model, monkeypatch):
    """sample_completions takes the pinned tokenizer for its plan (the prompts it renders) and hands that one to the
    model's pinned load: the tokenizer is loaded once from the verified bytes (held_load), not from a second read."""
    from transformers import AutoTokenizer

    from mcp_server.inspection.models import SampleRequest
    from mcp_server.inspection.sampling import sample_completions
    from support import emit_run

    model = Path(shutil.copytree(tiny_model, workspace / "model"))
    run_dir = emit_run("once", model=str(model))
    real, loads = AutoTokenizer.from_pretrained, []

    def counted(ref, *args, **kwargs):
        loads.append(str(ref))
        return real(ref, *args, **kwargs)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", counted)
    result = sample_completions(SampleRequest(run=str(run_dir), num_prompts=2, engine="transformers"))
    assert result.num_samples == 2 * result.n and (run_dir / "inspection" / "samples.jsonl").is_file()
    assert len([ref for ref in loads if Path(ref).resolve() != model.resolve()]) == 1, loads  # one held load


SWAP_ENV = '''import os, shutil
from pathlib import Path

from mcp_server.agentic.tiny import VaultEnv

MODEL, HOLD = Path({model!r}), Path({hold!r})
if (HOLD / "go").exists() and not (HOLD / "done").exists():  # the rollout's trainer imports this before its load
    (HOLD / "done").touch()
    os.replace(MODEL / "model.safetensors", HOLD / "good.safetensors")
    shutil.copyfile(HOLD / "evil.safetensors", MODEL / "model.safetensors")


class Env(VaultEnv):
    def reset(self, **row):
        if (HOLD / "good.safetensors").exists():  # the first rollout, after the load: the pinned weights back
            os.replace(HOLD / "good.safetensors", MODEL / "model.safetensors")
        return super().reset(**row)
'''


@pytest.mark.slow  # the rollout runs in the keyless worker
def test_an_agentic_runs_samples_are_the_pinned_models(workspace, monkeypatch):
    """b06 through TRL's tool loop: the environment module (imported by the run's trainer before it loads the model)
    renames other weights over the pinned model and its first reset puts them back, so the load, and only the load,
    reads them: sample_completions holds the trainer's models to the pin it records, refused with no samples."""
    from conftest import ANY_TEXT_REWARDS
    from mcp_server.agentic.tiny import ensure_agentic_model
    from mcp_server.inspection.models import SampleRequest
    from mcp_server.inspection.sampling import sample_completions
    from test_agentic import emit

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.chdir(workspace)
    model, hold = Path(shutil.copytree(ensure_agentic_model(), workspace / "model")), workspace / "hold"
    hold.mkdir()
    (hold / "evil.safetensors").write_bytes(_evil_weights(model / "model.safetensors"))
    (workspace / "swap_env.py").write_text(SWAP_ENV.format(model=str(model), hold=str(hold)))
    run_dir = Path(emit(workspace, model, environment="swap_env:Env", rewards=ANY_TEXT_REWARDS).run_dir)
    (hold / "go").touch()
    with pytest.raises(UserInputError, match="nothing was sampled.*changed while it loaded"):
        sample_completions(SampleRequest(run=str(run_dir), num_prompts=2))
    assert (hold / "done").exists() and not (run_dir / "inspection" / "samples.jsonl").exists()
