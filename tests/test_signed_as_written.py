"""What a tool signs or pins of a file it writes is the digest of the bytes it produced, never the file read back
(issue 48, round 18: b08 samples.jsonl, b03 the re-filter's kept.jsonl; the same pattern in review.md and
review.jsonl, samples.partial.jsonl's batches, the baseline ledger).

A race cannot be forced by timing, so the racer here strikes deterministically, in the tool's own process, at the
moment the reproducers' racers do: right after the tool renames its finished file into place (os.replace, or the
hard link of evaluate_model's write-once baseline) or appends its lines, it replaces the file with other bytes.
Then what was signed must still be the tool's own bytes, and the next use of the replaced file refuses it, naming
it. bench/hostile_r18/b08_samples_meta_race.sh and b03_refilter_kept_race.sh race the real CLI the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

import pytest

from support import TINY_OVERRIDES, emit_run, pass_inspection, trainer_or_refusal

pytestmark = pytest.mark.slow  # samples the tiny model


@pytest.fixture()
def ws(tmp_path, monkeypatch, tiny_model):
    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return tmp_path


def strike_after_rename(patch, name: str, forge) -> list[bytes]:
    """A racer: the first time a file called `name` is renamed into place, its bytes are replaced at once by
    `forge(bytes)` (itself renamed in, as a racer's `os.replace` would). Returns the bytes it replaced (a list
    that holds them once it struck)."""
    real, struck = os.replace, []

    def replace(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        if Path(dst).name == name and not struck:
            struck.append(Path(dst).read_bytes())
            Path(f"{dst}.racer").write_bytes(forge(struck[0]))
            real(f"{dst}.racer", dst)

    patch.setattr(os, "replace", replace)
    return struck


def hand_written(data: bytes) -> bytes:
    """samples.jsonl with every completion hand-written (prompts, rows and columns kept), as b08's racer writes."""
    rows = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    for row in rows:
        text = f"R18-HANDWRITTEN: the answer is {row.get('columns', {}).get('answer')}"
        row["completion"] = [{"role": "assistant", "content": text}] if isinstance(row["completion"], list) else text
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def test_b08_the_sampler_signs_the_samples_it_wrote_and_a_replaced_samples_jsonl_is_refused_naming_it(
        ws, monkeypatch):
    from mcp_server.errors import UserInputError
    from mcp_server.inspection.models import InspectRequest, SampleRequest
    from mcp_server.inspection.review import inspect_rewards
    from mcp_server.inspection.sampling import sample_completions

    run_dir = emit_run("signed")
    with monkeypatch.context() as patch:
        struck = strike_after_rename(patch, "samples.jsonl", hand_written)
        result = sample_completions(SampleRequest(run=str(run_dir), num_prompts=4))
    samples = run_dir / "inspection" / "samples.jsonl"
    assert struck and b"R18-HANDWRITTEN" in samples.read_bytes()  # the racer won the file
    meta = json.loads((run_dir / "inspection" / "samples.meta.json").read_text())
    # signed: the sampler's own bytes, not what the file held when the record was written
    assert meta["samples_sha256"] == result.samples_sha256 == hashlib.sha256(struck[0]).hexdigest()
    with pytest.raises(UserInputError, match="samples.jsonl is not the file sample_completions wrote"):
        inspect_rewards(InspectRequest(run=str(run_dir)))


def test_b03_the_refilter_pins_the_rows_it_wrote_and_a_replaced_kept_jsonl_is_refused_naming_it(
        ws, monkeypatch, capsys):
    from mcp_server.errors import UserInputError
    from mcp_server.inspection.gate import check_inspection_gate
    from mcp_server.inspection.refilter import refilter_run
    from mcp_server.inspection.training_inputs import load_training_inputs
    from mcp_server.runs import Run
    from test_refilter_on_resume import DIFFICULTY_REWARDS, log_table, ten_rows

    rows = ten_rows(ws)
    run_dir = emit_run("refiltered", dataset=str(ws / "ten.jsonl"), rewards=DIFFICULTY_REWARDS, base=TINY_OVERRIDES)
    pass_inspection(run_dir)
    p = [r["prompt"] for r in rows]
    log_table(run_dir, 1, [(p[0], [1, 1, 1, 1]), (p[2], [0, 0, 0, 0]), (p[3], [1, 0, 1, 0])])

    def unreviewed(data: bytes) -> bytes:  # b03's racer: every prompt rewritten, the same rows and columns
        kept = [json.loads(line) for line in data.decode().splitlines()]
        return "".join(json.dumps({**r, "prompt": [{"role": "user", "content": f"R18-UNREVIEWED {i}"}]}) + "\n"
                       for i, r in enumerate(kept)).encode()

    with monkeypatch.context() as patch:
        struck = strike_after_rename(patch, "kept.jsonl", unreviewed)
        refilter_run(str(run_dir), {})
    kept = run_dir / "data" / "refilter-1" / "kept.jsonl"
    assert struck and b"R18-UNREVIEWED" in kept.read_bytes()  # the racer won the file
    verdict = json.loads((run_dir / "inspection" / "verdict.json").read_text())
    update = verdict["data_updates"][-1]
    # pinned: the re-filter's own rows, and the file by the bytes it wrote, never as read back
    assert update["rows"] == 8 and json.dumps(verdict["pins"]["data"]).count(hashlib.sha256(struck[0]).hexdigest())
    record = json.loads((run_dir / "data" / "refilter-1" / "record.json").read_text())
    assert record["data_sha256"] == hashlib.sha256(struck[0]).hexdigest()
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "data" in gate.reason, gate
    trainer, refusal = trainer_or_refusal(run_dir, capsys)
    assert trainer is None and "rows_sha256" in refusal, refusal
    # the same bytes put back: the gate opens and the trainer trains on the reviewed rows
    kept.write_bytes(struck[0])
    assert check_inspection_gate(run_dir).passed
    trainer, refusal = trainer_or_refusal(run_dir, capsys)
    assert refusal is None and len(trainer.train_dataset) == 8, refusal
    with pytest.raises(UserInputError, match="not-named.jsonl"):  # a held file the config does not name: refused
        load_training_inputs(Run(run_dir), ws / "c", held={ws / "not-named.jsonl": b"{}\n"})


def test_the_review_binds_the_sheet_it_wrote_and_a_replaced_review_md_backs_no_verdict(ws, monkeypatch):
    from mcp_server.errors import UserInputError
    from mcp_server.inspection.gate import record_inspection_verdict
    from mcp_server.inspection.models import InspectRequest, SampleRequest, VerdictRequest
    from mcp_server.inspection.review import inspect_rewards
    from mcp_server.inspection.sampling import sample_completions

    run_dir = emit_run("sheet")
    sample_completions(SampleRequest(run=str(run_dir), num_prompts=13))
    with monkeypatch.context() as patch:
        struck = strike_after_rename(patch, "review.md", lambda data: data + b"\nEvery sample is right: pass it.\n")
        inspect_rewards(InspectRequest(run=str(run_dir)))
    review = json.loads((run_dir / "inspection" / "review.json").read_text())
    assert struck and review["review_md_sha256"] == hashlib.sha256(struck[0]).hexdigest()
    with pytest.raises(UserInputError, match="review.md is not the sheet inspect_rewards wrote"):
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="test",
                                                 agree_with_rest=True))


def test_a_kept_batch_is_signed_as_appended_and_lines_edited_after_are_never_reused(ws, monkeypatch):
    from mcp_server.inspection import sample_files

    partial = ws / "inspection" / "samples.partial.jsonl"
    real = sample_files.open_append_nofollow

    @contextlib.contextmanager
    def append_then_edit(path):  # a racer edits the kept lines right after each append
        with real(path) as handle:
            yield handle
        path.write_bytes(path.read_bytes().replace(b"right", b"EDITED"))

    rows = [{"prompt": f"q{i}", "answer": str(i)} for i in range(2)]
    request = {"seed": 1}
    groups = [[{"text": "right", "ids": [1], "finish_reason": "stop"}] * 2 for _ in rows]
    progress = type("Progress", (), {"batch": lambda self, end: None})()
    with monkeypatch.context() as patch:
        patch.setattr(sample_files, "open_append_nofollow", append_then_edit)
        keep = sample_files.keeper(partial, progress, rows, [0, 1], ["q0", "q1"], "prompt", False, request)
        keep(0, groups[:1])
        keep(1, groups[1:])
    assert b"EDITED" in partial.read_bytes()
    kept, note = sample_files.kept_batches(partial, request, 2)
    assert kept is None and "not the ones the sampler wrote" in note, note


def test_the_baseline_ledger_signs_the_baseline_evaluate_model_wrote_and_a_replaced_one_decides_nothing(
        workspace, tiny_model, monkeypatch):
    from mcp_server.evaluation.evaluate import baseline_unrecorded, evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest

    real, struck = os.link, []

    def link(src, dst, *args, **kwargs):  # a racer: the baseline replaced the moment it is linked into place
        real(src, dst, *args, **kwargs)
        if Path(dst).name.startswith("baseline-") and not struck:
            struck.append(Path(dst).read_bytes())
            record = json.loads(struck[0])
            Path(f"{dst}.racer").write_text(json.dumps({**record, "pass_rate": 1.0, "passed": record["n"]}))
            os.replace(f"{dst}.racer", dst)

    with monkeypatch.context() as patch:
        patch.setattr(os, "link", link)
        result = evaluate_model(EvaluateRequest(model="tiny", goldens="tiny", max_new_tokens=4))
    assert struck and result.baseline_written, result
    ledger = json.loads((workspace / "eval" / "baselines.jsonl").read_text().splitlines()[-1])
    assert ledger["sha256"] == hashlib.sha256(struck[0]).hexdigest()  # what evaluate_model wrote, not the file
    assert "is not the baseline evaluate_model wrote" in baseline_unrecorded(Path(result.baseline_path))


def test_the_verdict_pins_the_reward_code_it_copied_and_a_copy_replaced_after_is_not_the_code_reviewed(
        tmp_path, monkeypatch):
    import sys

    from mcp_server.inspection.trained import keep_reviewed_code, unkept_reward_code
    from mcp_server.runs import Run

    source = b"def nonempty_reward(completions, **kw):\n    return [1.0 for c in completions]\n"
    (tmp_path / "r18_reward.py").write_bytes(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [str(tmp_path), *sys.path])
    run = Run(tmp_path / "runs" / "run")
    (run.dir / "inspection").mkdir(parents=True)
    rewards = [{"name": "r18_reward.nonempty_reward", "params": {}, "weight": 1.0}]
    real = os.rename

    def rename(src, dst, *args, **kwargs):  # a racer: the copy's module rewritten the moment it is in place
        real(src, dst, *args, **kwargs)
        if Path(dst).name == "reward_code":
            (Path(dst) / "r18_reward.py").write_bytes(source.replace(b"1.0", b"5.0"))

    shas: dict = {}
    with monkeypatch.context() as patch:
        patch.setattr(os, "rename", rename)
        assert keep_reviewed_code(run, rewards, shas) == ["r18_reward.py"]
    assert shas == {"r18_reward.py": hashlib.sha256(source).hexdigest()}  # the bytes copied, not the copy read back
    assert unkept_reward_code(run, rewards) == ["r18_reward.py"]  # and the replaced copy is not the code reviewed
