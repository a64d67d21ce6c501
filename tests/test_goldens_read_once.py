"""What a baseline names is the goldens it measured (round 19, b08; issue 48).

evaluate_model read the goldens' rows when it started and hashed the file when it was done: a goldens file holding
other prompts while the base decoded, the person's put back before the hash, filed a baseline naming the person's
goldens with the base's score on the others. promote_checkpoint then paired the checkpoint's replies with the
baseline's items by index and never compared the stored prompts. Each row swaps at a deterministic point (a hook
around the base's load, which runs after the rows are read and before the hash was taken), never a sleep race.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from mcp_server.errors import UserInputError
from test_loaded_is_what_was_checked import _placed_run


def _write(path: Path, rows: list[dict]) -> bytes:
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path.write_bytes(data)
    return data


def _rows() -> tuple[list[dict], list[dict]]:
    """The person's goldens, and the same rows with each prompt the next row's (answers kept)."""
    from mcp_server.tiny import make_task

    mine = [{k: r[k] for k in ("prompt", "question", "answer")} for r in make_task(n=4, max_operand=3)]
    return mine, [{**r, "prompt": mine[(i + 1) % len(mine)]["prompt"]} for i, r in enumerate(mine)]


def _put_back_on_load(goldens: Path, data: bytes, monkeypatch) -> list:
    """Wrap AutoModelForCausalLM.from_pretrained: its first call renames `data` over `goldens` first (the person's
    file put back while the base loads, after the rows were read)."""
    from transformers import AutoModelForCausalLM

    real, log = AutoModelForCausalLM.from_pretrained, []

    def swapped(*args, **kwargs):
        if not log:
            staged = goldens.with_name(".staged")
            staged.write_bytes(data)
            os.replace(staged, goldens)
            log.append(str(goldens))
        return real(*args, **kwargs)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", swapped)
    return log


def test_a_baseline_names_the_goldens_bytes_it_decoded(workspace, tiny_model, monkeypatch):
    """The goldens file is read once: the sha256 the baseline files is of the bytes whose rows were decoded, not
    of a file put back over them before the end (before: the person's sha256 on the other rows' score)."""
    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest

    base = Path(shutil.copytree(tiny_model, workspace / "base"))
    mine, other = _rows()
    goldens = workspace / "goldens.jsonl"
    other_data = _write(goldens, other)
    mine_data = "".join(json.dumps(r) + "\n" for r in mine).encode()
    log = _put_back_on_load(goldens, mine_data, monkeypatch)
    result = evaluate_model(EvaluateRequest(model=str(base), goldens=str(goldens), max_new_tokens=4))
    assert log and goldens.read_bytes() == mine_data
    assert result.goldens_sha256 == hashlib.sha256(other_data).hexdigest()
    filed = json.loads(Path(result.baseline_path).read_text())
    assert filed["goldens_sha256"] == hashlib.sha256(other_data).hexdigest()


def test_promote_refuses_a_baseline_whose_items_are_not_the_goldens_rows(workspace, tiny_model):
    """A baseline (signed, as round 19's build filed it) that names the person's goldens by their sha256 but stores
    the items of other prompts: promote compares each stored prompt with the goldens row at its index and refuses,
    naming the first that differs, with no promotion written (before: paired by index and judged)."""
    from mcp_server.evaluation.evaluate import evaluate_model, record_baseline
    from mcp_server.evaluation.models import EvaluateRequest, PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    base = Path(shutil.copytree(tiny_model, workspace / "base"))
    mine, other = _rows()
    goldens = workspace / "goldens.jsonl"
    _write(goldens, other)
    result = evaluate_model(EvaluateRequest(model=str(base), goldens=str(goldens), max_new_tokens=4))
    mine_data = _write(goldens, mine)
    path = Path(result.baseline_path)
    record = json.loads(path.read_text())
    record["goldens_sha256"] = hashlib.sha256(mine_data).hexdigest()
    text = json.dumps(record, indent=2) + "\n"
    os.chmod(path, 0o644)
    path.write_text(text)
    record_baseline(path, text)
    run = _placed_run(workspace, tiny_model, base=str(base))
    with pytest.raises(UserInputError, match="goldens item 0 of .*goldens.jsonl: its prompt .* is not in the "
                                             "baseline's item 0"):
        promote_checkpoint(PromoteRequest(run=str(run)))
    assert not (run / "promotion.json").exists()


def test_eval_moved_while_evaluating_is_a_named_refusal(workspace, tiny_model, monkeypatch):
    """eval/ (the tiny goldens, the baselines and their ledger) moved away while the base loads: the evaluation
    refuses by name, nothing filed in a fresh eval/ (before: a baseline filed in a new eval/ naming goldens no
    longer there, or 'unexpected TrainingInterpreterError: FileNotFoundError' from the hash taken at the end)."""
    from transformers import AutoModelForCausalLM

    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest

    base = Path(shutil.copytree(tiny_model, workspace / "base"))
    real, log = AutoModelForCausalLM.from_pretrained, []

    def moved(*args, **kwargs):
        if not log:
            os.rename(workspace / "eval", workspace / "eval.moved")
            log.append("moved")
        return real(*args, **kwargs)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", moved)
    with pytest.raises(UserInputError, match="eval: .*eval was moved or replaced while .* was evaluated: nothing "
                                             "was filed"):
        evaluate_model(EvaluateRequest(model=str(base), goldens="tiny", max_new_tokens=4))
    assert log and not list((workspace / "eval").glob("baseline-*.json"))


def test_a_promotion_signs_the_baseline_and_suite_bytes_it_read(workspace, tiny_model, monkeypatch):
    """promote reads the baseline (its ledger check of those bytes) and the drift suite once: the baseline_sha256 it
    signs and the suite_sha256 its drift names are of the bytes it judged with, not of files put in their place
    while the checkpoint, then the base, loads (before: both hashed again afterwards)."""
    from transformers import AutoModelForCausalLM

    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest, PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint
    from mcp_server.evaluation.tiny_suite import make_drift_rows

    base = Path(shutil.copytree(tiny_model, workspace / "base"))
    goldens = workspace / "goldens.jsonl"
    _write(goldens, _rows()[0])
    baseline = Path(evaluate_model(EvaluateRequest(model=str(base), goldens=str(goldens),
                                                   max_new_tokens=4)).baseline_path)
    suite = workspace / "suite.jsonl"
    suite_data, baseline_data = _write(suite, make_drift_rows()[:3]), baseline.read_bytes()
    run = _placed_run(workspace, tiny_model, base=str(base))
    real, log = AutoModelForCausalLM.from_pretrained, []

    def replaced(ref, *args, **kwargs):
        if not log and "llm-finetuning-checkpoint-" in str(ref):  # the checkpoint's load: the baseline read before
            os.chmod(baseline, 0o644)
            baseline.write_bytes(baseline_data.replace(b'"kind": "baseline"', b'"kind":  "baseline"'))
            log.append(str(ref))
        elif len(log) == 1 and Path(str(ref)) == base:  # the base's drift decode: the suite read before
            _write(suite, make_drift_rows()[3:6])
            log.append(str(ref))
        return real(ref, *args, **kwargs)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", replaced)
    promote_checkpoint(PromoteRequest(run=str(run), drift_suite=str(suite)))
    promotion = json.loads((run / "promotion.json").read_text())
    assert len(log) == 2 and promotion["baseline_sha256"] == hashlib.sha256(baseline_data).hexdigest()
    assert promotion["drift"]["suite_sha256"] == hashlib.sha256(suite_data).hexdigest()
