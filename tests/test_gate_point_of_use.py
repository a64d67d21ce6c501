"""Issue 33, "The principle the gate is missing" and "Gate bypasses": the trainer checks, after its loader and
TRL's parser, that what it is about to train on is what the verdict reviewed, and sampling reads data, prompt
column and settings through the trainer's own loader. Each step here trained (or sampled) what nobody reviewed
before. The trainer is the emitted train/train.py: its build_trainer as launch.sh runs it (in the run directory),
or the whole launch through launch_training."""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from support import emit_run, pass_inspection, sign_samples, trainer_or_refusal
from mcp_server.errors import UserInputError
from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
from mcp_server.inspection.models import InspectRequest, SampleRequest, VerdictRequest
from mcp_server.inspection.review import inspect_rewards
from mcp_server.inspection.sampling import sample_completions

TINY = {"max_steps": 1, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 12,
        "logging_steps": 1, "save_steps": 1, "gradient_accumulation_steps": 1, "report_to": "none"}
# The gate passed as this file's reviewer passes it: 13 prompts sampled, InspectRequest's default review.
_pass = functools.partial(pass_inspection, max_samples=None, reviewer="ana")


def _rows(n: int, tag: str = "") -> list[dict]:
    return [{"prompt": f"What is {i} + {i}?{tag}", "other": f"say {i}", "answer": str(2 * i)} for i in range(n)]


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _emit(workspace: Path, name: str, rows: list[dict] | None = None, **overrides) -> Path:
    """A valid tiny CPU run (support.emit_run) on a data file of `rows` (16 sums unless given) in the workspace."""
    return emit_run(name, dataset=str(_write(workspace / f"{name}.jsonl", rows or _rows(16))), base=TINY,
                    **overrides)


def _edit_config(run_dir: Path, **fields) -> None:
    path = run_dir / "train" / "config.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **fields}))


def _sample_and_inspect(run_dir: Path, **sample) -> None:
    sample_completions(SampleRequest(run=str(run_dir), num_prompts=13, engine="transformers", **sample))
    inspect_rewards(InspectRequest(run=str(run_dir)))


def _meta(run_dir: Path) -> dict:
    return json.loads((run_dir / "inspection" / "samples.meta.json").read_text())


@pytest.mark.slow
def test_sampling_reads_every_file_training_reads_and_only_those(workspace, capsys):
    """A data directory with train.jsonl and my_train.jsonl (datasets trains on both), an eval.jsonl beside them
    and a hidden folder (training uses neither), and a second data_files entry: before, sampling read only
    train.jsonl, or only the first entry, so the review counted rows training never used and missed others."""
    run_dir = _emit(workspace, "files")
    folder = workspace / "folder"
    _write(folder / "train.jsonl", _rows(6))
    _write(folder / "my_train.jsonl", _rows(5, " (mine)"))
    _write(folder / "eval.jsonl", _rows(9, " (eval)"))
    _write(folder / ".hidden" / "train.jsonl", _rows(7, " (hidden)"))
    _edit_config(run_dir, datasets=[{"path": str(folder), "split": "train"}])
    _pass(run_dir)
    assert _meta(run_dir)["dataset_rows"] == 11 == _meta(run_dir)["trained"]["rows"]
    trainer, refusal = trainer_or_refusal(run_dir, capsys)
    assert refusal is None and len(trainer.train_dataset) == 11
    assert any(p.endswith("(mine)") for p in trainer.train_dataset["prompt"])

    # Two data_files entries: every one is sampled.
    second = _write(workspace / "second.jsonl", _rows(3, " (second)"))
    _edit_config(run_dir, datasets=[{"path": "json", "data_files": [str(folder / "train.jsonl"), str(second)],
                                     "split": "train"}])
    _pass(run_dir)
    assert _meta(run_dir)["dataset_rows"] == 9

    # A data directory is pinned by content, hidden files included: an edit of the same size closes the gate.
    _edit_config(run_dir, datasets=[{"path": str(folder), "split": "train"}])
    _pass(run_dir)
    hidden = folder / ".hidden" / "train.jsonl"
    text = hidden.read_text()
    hidden.write_text(text.replace("What", "Whax", 1))
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "the data set changed" in gate.reason, gate.reason
    hidden.write_text(text)
    mine = folder / "my_train.jsonl"
    text = mine.read_text()
    mine.write_text(text.replace("What", "Whax", 1))
    assert "the data set changed" in check_inspection_gate(run_dir).reason
    mine.write_text(text)
    assert check_inspection_gate(run_dir).passed


@pytest.mark.slow
def test_a_poisoned_datasets_cache_cannot_reach_training(workspace, capsys, monkeypatch):
    """launch.sh points datasets' cache at <run>/cache/datasets. Rows swapped in the data file, loaded once into
    that cache, then the file put back byte-identical with its old mtime: before, the trainer read the cached
    swapped rows with the gate open. Now it loads through a fresh cache and trains the reviewed rows."""
    import datasets

    run_dir = _emit(workspace, "cache")
    _pass(run_dir)
    data = Path(yaml.safe_load((run_dir / "train" / "config.yaml").read_text())["datasets"][0]["data_files"])
    original, stat = data.read_text(), data.stat()
    cache = run_dir / "cache" / "datasets"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    data.write_text(original.replace("What is", "Poison is"))
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    datasets.load_dataset("json", data_files=str(data), split="train")  # the planted cache entry
    data.write_text(original)
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert check_inspection_gate(run_dir).passed
    trainer, refusal = trainer_or_refusal(run_dir, capsys)
    assert refusal is None, refusal
    assert not any("Poison" in p for p in trainer.train_dataset["prompt"])


@pytest.mark.slow
def test_the_prompt_column_and_generation_kwargs_are_the_trainers(workspace, capsys):
    """train/request.json named another column than train.py's PROMPT_COLUMN, and generation_kwargs in the config
    were ignored by sampling: reviewed at one column and 12 tokens, trained on another at 3."""
    run_dir = _emit(workspace, "column")
    request = run_dir / "train" / "request.json"
    request.write_text(json.dumps({**json.loads(request.read_text()), "prompt_column": "other"}))
    _edit_config(run_dir, generation_kwargs={"max_new_tokens": 3})
    _pass(run_dir)
    samples = [json.loads(line) for line in (run_dir / "inspection" / "samples.jsonl").read_text().splitlines()]
    assert all(s["prompt"].startswith("What is") for s in samples)  # train.py's column, not request.json's
    assert all(len(s["completion_ids"]) <= 3 for s in samples) and _meta(run_dir)["generation"]["max_new_tokens"] == 3
    assert _meta(run_dir)["trained"]["settings"]["generation_kwargs"] == {"max_new_tokens": 3}
    trainer, refusal = trainer_or_refusal(run_dir, capsys)
    assert refusal is None and trainer.generation_kwargs["max_new_tokens"] == 3


def test_reward_weights_come_from_one_place(workspace):
    """train/config.yaml's reward_weights differing from train/rewards.json's: the review scored with one, TRL
    would train with the other. A pass is refused until they are one."""
    run_dir = _emit(workspace, "weights")
    _edit_config(run_dir, reward_weights=[3.0])
    _sample_and_inspect(run_dir)
    with pytest.raises(UserInputError, match="reward_weights"):
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana",
                                                 agree_with_rest=True))


def test_a_model_name_that_exists_beside_the_server_is_what_the_trainer_resolves(workspace, tiny_model,
                                                                                monkeypatch):
    """A relative model name that is a directory in the server's folder but not in the run directory: the trainer
    (running in the run) resolves it as a hub name, so that is what is pinned and sampled, never the local copy."""
    from mcp_server.inspection.pins import config_pins
    from mcp_server.runs import Run

    run_dir = _emit(workspace, "model")
    shutil.copytree(tiny_model, workspace / "lookalike")
    monkeypatch.chdir(workspace)
    _edit_config(run_dir, model_name_or_path="lookalike")
    assert config_pins(Run(run_dir))["model"] == {"model": "lookalike", "revision": "main", "commit": None,
                                                  "files_sha256": None}  # no cache holds it: no snapshot's files
    with pytest.raises(UserInputError) as err:
        sample_completions(SampleRequest(run=str(run_dir), num_prompts=4, engine="transformers"))
    assert err.value.field == "model"


@pytest.mark.slow
def test_the_trainer_refuses_forged_samples_and_what_changed_after_the_gate(workspace, capsys):
    """The point-of-use check itself: samples written by hand (their prompts are no rows of the data), a data
    file swapped after the gate, settings changed where the gate does not look (generation_kwargs through a
    config edit that the file pin would catch at launch, here after it)."""
    run_dir = _emit(workspace, "forged")
    _pass(run_dir)
    trainer, refusal = trainer_or_refusal(run_dir, capsys)
    assert refusal is None

    data = Path(yaml.safe_load((run_dir / "train" / "config.yaml").read_text())["datasets"][0]["data_files"])
    original = data.read_text()
    data.write_text(original.replace("What is 3", "What is 9"))  # after the gate: the trainer reads it
    _, refusal = trainer_or_refusal(run_dir, capsys)
    assert "refusing to train" in refusal and "rows_sha256" in refusal
    data.write_text(original)

    config = run_dir / "train" / "config.yaml"
    text = config.read_text()
    _edit_config(run_dir, generation_kwargs={"max_new_tokens": 2})
    _, refusal = trainer_or_refusal(run_dir, capsys)
    assert "refusing to train" in refusal and "generation_kwargs" in refusal
    config.write_text(text)

    # Fabricated samples, consistently reviewed and passed: their prompts (or the columns the rewards read) are
    # not rows of the data. Written by hand, the review refuses them (the sampler signed other completions: round
    # 12 F2) and the trainer does too; even signed as the sampler signs them, the trainer's own check refuses.
    samples = run_dir / "inspection" / "samples.jsonl"
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    for forged in ({"prompt": "Say anything."}, {"columns": {"other": "say 0", "answer": "999"}}):
        samples.write_text("".join(json.dumps({**s, **forged}) + "\n" for s in lines))
        with pytest.raises(UserInputError, match="inspection/samples.jsonl is not the file sample_completions wrote"):
            inspect_rewards(InspectRequest(run=str(run_dir)))
        _, refusal = trainer_or_refusal(run_dir, capsys)
        assert "refusing to train" in refusal and "samples.jsonl" in refusal, forged
        sign_samples(run_dir)  # not something a forger can do: the deeper check alone
        inspect_rewards(InspectRequest(run=str(run_dir)))
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana",
                                                 agree_with_rest=True))
        _, refusal = trainer_or_refusal(run_dir, capsys)
        assert "refusing to train" in refusal and "not rows of the data that trains" in refusal, forged


def test_forged_reviews_and_exploration_meta_back_nothing(workspace):
    """review.md (the sheet the person reads) was bound to nothing; exploration samples (another temperature)
    with samples.meta.json edited to say they match the config backed a pass; a config changed after sampling."""
    run_dir = _emit(workspace, "sheet")
    _sample_and_inspect(run_dir)
    sheet = run_dir / "inspection" / "review.md"
    text = sheet.read_text()
    sheet.write_text(text + "\nAll samples are scored right.\n")
    with pytest.raises(UserInputError, match="review.md is not the sheet"):
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana",
                                                 agree_with_rest=True))
    sheet.write_text(text)
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    sheet.write_text(text.replace("#", "##", 1))
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "review.md is not the sheet" in gate.reason, gate.reason
    sheet.write_text(text)
    assert check_inspection_gate(run_dir).passed

    # The config changed between sampling and the verdict: refused.
    _sample_and_inspect(run_dir)
    config = run_dir / "train" / "config.yaml"
    text = config.read_text()
    _edit_config(run_dir, top_k=7)
    with pytest.raises(UserInputError, match="changed since the samples were drawn"):
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana",
                                                 agree_with_rest=True))
    config.write_text(text)

    # Exploration samples, their meta edited to match: no record of what training reads, so no pass.
    _sample_and_inspect(run_dir, temperature=0.5)
    meta_file = run_dir / "inspection" / "samples.meta.json"
    meta = json.loads(meta_file.read_text())
    assert meta["differs_from_config"] and meta["trained"] is None
    meta_file.write_text(json.dumps({**meta, "differs_from_config": []}))  # by hand: not the sampler's record
    with pytest.raises(UserInputError, match="samples.meta.json has no valid signature"):
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana",
                                                 agree_with_rest=True))
    sign_samples(run_dir, {**meta, "differs_from_config": []})  # even as the sampler signs it
    with pytest.raises(UserInputError, match="loader read"):
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana",
                                                 agree_with_rest=True))


@pytest.mark.slow
def test_files_swapped_right_after_launch_are_never_trained(workspace, monkeypatch):
    """Through launch_training: the data file swapped as soon as it returns (the trainer is still importing TRL),
    put back later. Before, that run trained the swapped rows and left no trace; now it refuses and says why."""
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest, StatusRequest
    from mcp_server.training.status import training_status

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    run_dir = _emit(workspace, "swap")
    _pass(run_dir)
    data = Path(yaml.safe_load((run_dir / "train" / "config.yaml").read_text())["datasets"][0]["data_files"])
    original = data.read_text()
    result = launch_training(LaunchRequest(run=str(run_dir)))
    data.write_text(original.replace("What is", "Poison is"))
    assert result.launched, result.message
    deadline = time.time() + 400
    while (status := training_status(StatusRequest(run=str(run_dir)))).state in ("starting", "running"):
        assert time.time() < deadline, status
        time.sleep(1)
    data.write_text(original)
    log = (run_dir / "train" / "logs" / "stdout.log").read_text()
    assert status.state == "failed" and "refusing to train" in log and "rows_sha256" in log, status.log_tail
    assert not (run_dir / "train" / "logs" / "progress.jsonl").exists() or not (
        run_dir / "train" / "logs" / "progress.jsonl").read_text().strip()


def test_a_large_data_file_is_pinned_by_content(workspace, tmp_path):
    """A file over 64 MiB in a data directory was pinned by size and mtime: rewritten in place with both kept,
    the gate stayed open. Data is pinned by content whatever its size (model weights keep size and mtime)."""
    from mcp_server.inspection.pins import data_pin

    folder = tmp_path / "big"
    folder.mkdir()
    big = folder / "train.jsonl"
    with open(big, "wb") as handle:
        handle.truncate(65 << 20)  # sparse: 65 MiB of zeros
    before, stat = data_pin(str(folder)), big.stat()
    with open(big, "r+b") as handle:
        handle.seek(40 << 20)
        handle.write(b"x")
    os.utime(big, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert big.stat().st_size == stat.st_size and data_pin(str(folder)) != before


@pytest.mark.slow
def test_the_trainer_reads_each_run_file_once(workspace, capsys):
    """Issue 46: the trainer process reads its run as one value (recipe.runspec.RunSpec, through
    inspection.trainer_read) plus the verdict, and passes them to the point-of-use check, the reward-code check, the
    guard and the dynamic-sampling trainer. Counted with an audit hook on every open of the run's files while
    train/train.py builds its trainer (TRL's parser included: it parses the bytes the check read) and the guard
    starts (on_train_begin): TRL's parser, the check, the train/ file pin, the guard's mode, its config and its
    request, the reward-code check and the dynamic-sampling settings each read their file again (config.yaml 4
    times, the verdict 3, request.json 2, dynamic_sampling.json 2, samples.jsonl 2)."""
    import os
    import sys
    from collections import Counter

    from mcp_server.runs import Run
    from mcp_server.training.trainer.progress import ProgressCallback

    run_dir = _emit(workspace, "trainer-reads", dynamic_sampling={"max_extra_rounds": 2})
    _pass(run_dir)
    run = Run(run_dir)
    counted = {os.path.realpath(p): name for p, name in (
        (run.config, "config.yaml"), (run.request, "request.json"), (run.rewards, "rewards.json"),
        (run.dynamic_sampling, "dynamic_sampling.json"), (run.verdict, "verdict.json"),
        (run.samples, "samples.jsonl"))}
    opened: Counter = Counter()
    counting = [False]

    def hook(event, args):
        if counting[0] and event == "open" and isinstance(args[0], (str, Path)):
            name = counted.get(os.path.realpath(args[0]))
            if name:
                opened[name] += 1

    sys.addaudithook(hook)  # an audit hook cannot be removed: it counts only while the trainer is built
    counting[0] = True
    try:
        trainer, refusal = trainer_or_refusal(run_dir, capsys)
        assert refusal is None, refusal
        progress = next(c for c in trainer.callback_handler.callbacks if isinstance(c, ProgressCallback))
        progress.on_train_begin(trainer.args, trainer.state, trainer.control)
    finally:
        counting[0] = False
    assert progress.guard is not None and progress.guard.request.guard == progress.guard_mode
    assert dict(opened) == {name: 1 for name in counted.values()}, opened


# ---------------------------------------------------------------- the trainer's check, row by row (issue 48)
# check_reviewed_inputs called as train/train.py calls it, on constructed inputs: rows in memory (a datasets
# Dataset, as the trainer's loader hands them), the parsed arguments, a verdict that pins exactly that. No sampling,
# no model load: each row changes one thing the check compares and asserts it refuses (exit 3) naming it, or passes.
def _point_of_use(tmp_path: Path, monkeypatch, rows: list[dict] | None = None, agentic: bool = False):
    """(run, dataset, training_args, model_args, verdict) where check_reviewed_inputs passes; the verdict is written
    to inspection/verdict.json and may be edited by the row."""
    import datasets
    from types import SimpleNamespace

    from mcp_server.inspection import trained
    from mcp_server.inspection.training_inputs import fingerprint
    from mcp_server.runs import Run
    from mcp_server.workspace import sha256_file

    monkeypatch.setattr(trained, "VERIFIED", {})  # _run_from_verified records what passed: this test's only
    monkeypatch.delenv(trained.VERDICT_SHA_ENV, raising=False)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_text("weights")
    run = Run(tmp_path / "run")
    (run.dir / "train").mkdir(parents=True)
    (run.dir / "train" / "config.yaml").write_text(yaml.safe_dump({"output_dir": "checkpoints",
                                                                   "model_name_or_path": str(model)}))
    if agentic:
        run.agentic.write_text("{}")
    rows = rows or _rows(4)
    dataset = datasets.Dataset.from_list(rows)
    training_args = SimpleNamespace(output_dir="checkpoints", resume_from_checkpoint=None, model_init_kwargs=None,
                                    temperature=1.0)
    model_args = SimpleNamespace(model_name_or_path=str(model), model_revision=None)
    now = fingerprint(run, dataset, run.read_config(), "prompt", SimpleNamespace(), training_args, model_args)
    _write_samples(run, [{"id": i, "row_index": i, "prompt": r["prompt"],
                          "columns": {k: v for k, v in r.items() if k != "prompt"}} for i, r in enumerate(rows)])
    verdict = {"verdict": "pass", "pins": {"trained": now}, "samples_sha256": sha256_file(run.samples)}
    run.verdict.write_text(json.dumps(verdict))
    return run, dataset, training_args, model_args, verdict


def _write_samples(run, samples: list[dict]) -> None:
    run.samples.parent.mkdir(parents=True, exist_ok=True)
    run.samples.write_text("".join(json.dumps(s) + "\n" for s in samples))


def _resign(run, verdict: dict) -> None:
    """The verdict re-signed over the samples as they are now (a forger who hashes consistently)."""
    from mcp_server.workspace import sha256_file

    run.verdict.write_text(json.dumps({**verdict, "samples_sha256": sha256_file(run.samples)}))


def _check(run, dataset, training_args, model_args, capsys) -> str | None:
    """None when the trainer's check passes, else what it said when it refused (exit status 3)."""
    from types import SimpleNamespace

    from mcp_server.inspection.trained import InputsChanged, check_reviewed_inputs

    capsys.readouterr()
    try:
        check_reviewed_inputs(run.dir, dataset, "prompt", SimpleNamespace(), training_args, model_args)
    except InputsChanged as exc:
        assert exc.code == 3
        return capsys.readouterr().err
    return None


def test_the_trainers_check_passes_what_the_verdict_pinned(tmp_path, monkeypatch, capsys):
    """The base every row below changes one thing of: the inputs the verdict pinned pass, and the trainer then
    loads the model from the folder it verified."""
    from mcp_server.inspection import trained

    run, dataset, training_args, model_args, _ = _point_of_use(tmp_path, monkeypatch)
    assert _check(run, dataset, training_args, model_args, capsys) is None
    assert trained.VERIFIED["loads"] == str((tmp_path / "model").resolve())


# How a reviewed sample can fail to be a row of the data that trains, each hashed consistently into the verdict
# (samples.jsonl re-signed): the trainer must refuse every one (m4-trainer-samples-not-rows).
NOT_ROWS = {
    "a prompt the data does not hold": lambda s: {**s, "prompt": "Say anything."},
    "columns the data does not hold": lambda s: {**s, "columns": {**s["columns"], "answer": "999"}},
    "a column dropped": lambda s: {**s, "columns": {k: v for k, v in s["columns"].items() if k != "other"}},
    "a column added": lambda s: {**s, "columns": {**s["columns"], "extra": "1"}},
    "another row's prompt and columns": lambda s: {**s, "row_index": (s["row_index"] + 1) % 4},
    "a row index past the last row": lambda s: {**s, "row_index": 4},
    "a negative row index (the last row, counted from the end)": lambda s: {**s, "row_index": -4 + s["row_index"]},
    "no row index": lambda s: {k: v for k, v in s.items() if k != "row_index"},
    "a row index that is a string": lambda s: {**s, "row_index": str(s["row_index"])},
}


@pytest.mark.parametrize("how", list(NOT_ROWS))
@pytest.mark.parametrize("which", ["first", "last"])
def test_reviewed_samples_that_are_not_rows_of_the_data_are_refused(tmp_path, monkeypatch, capsys, how, which):
    run, dataset, training_args, model_args, verdict = _point_of_use(tmp_path, monkeypatch)
    samples = [json.loads(line) for line in run.samples.read_text().splitlines()]
    at = 0 if which == "first" else len(samples) - 1
    samples[at] = NOT_ROWS[how](samples[at])
    _write_samples(run, samples)
    _resign(run, verdict)
    refusal = _check(run, dataset, training_args, model_args, capsys)
    assert refusal and "not rows of the data that trains" in refusal and f"samples {at} " in refusal, (how, refusal)


def test_samples_other_than_the_verdict_signed_are_refused(tmp_path, monkeypatch, capsys):
    """samples.jsonl replaced by rows of the same data (each a true row) after the verdict: not what it signed."""
    run, dataset, training_args, model_args, _ = _point_of_use(tmp_path, monkeypatch)
    samples = [json.loads(line) for line in run.samples.read_text().splitlines()]
    _write_samples(run, samples[:2])
    refusal = _check(run, dataset, training_args, model_args, capsys)
    assert refusal and "not the samples the verdict signed" in refusal
    run.samples.unlink()
    refusal = _check(run, dataset, training_args, model_args, capsys)
    assert refusal and "not the samples the verdict signed" in refusal


def test_blank_lines_in_the_samples_are_no_samples(tmp_path, monkeypatch, capsys):
    run, dataset, training_args, model_args, verdict = _point_of_use(tmp_path, monkeypatch)
    run.samples.write_text("\n" + run.samples.read_text() + "\n  \n")
    _resign(run, verdict)
    assert _check(run, dataset, training_args, model_args, capsys) is None


def test_more_than_eight_forged_samples_are_counted_not_all_listed(tmp_path, monkeypatch, capsys):
    run, dataset, training_args, model_args, verdict = _point_of_use(tmp_path, monkeypatch, rows=_rows(10))
    samples = [json.loads(line) for line in run.samples.read_text().splitlines()]
    _write_samples(run, [{**s, "prompt": "forged"} for s in samples])
    _resign(run, verdict)
    refusal = _check(run, dataset, training_args, model_args, capsys)
    assert "samples 0, 1, 2, 3, 4, 5, 6, 7 ..." in refusal and "8," not in refusal
    _write_samples(run, [{**s, "prompt": "forged"} if s["id"] < 8 else s for s in samples])
    _resign(run, verdict)
    refusal = _check(run, dataset, training_args, model_args, capsys)
    assert "samples 0, 1, 2, 3, 4, 5, 6, 7 are not rows" in refusal


def test_an_agentic_samples_prompt_is_the_tool_loops_but_its_columns_are_the_rows(tmp_path, monkeypatch, capsys):
    """An agentic sample's prompt is the one TRL's tool loop rendered: not compared; its columns still are."""
    from mcp_server.inspection import trained

    monkeypatch.setattr("mcp_server.agentic.sources.agentic_pin", lambda run, *read: {"env": "pinned"})
    run, dataset, training_args, model_args, verdict = _point_of_use(tmp_path, monkeypatch, agentic=True)
    verdict["pins"]["agentic"] = {"env": "pinned"}
    samples = [json.loads(line) for line in run.samples.read_text().splitlines()]
    _write_samples(run, [{**s, "prompt": "<tools> " + s["prompt"]} for s in samples])
    _resign(run, verdict)
    assert _check(run, dataset, training_args, model_args, capsys) is None, trained.VERIFIED
    # the environment the verdict pinned is not the one this process would train with: refused, named
    verdict["pins"]["agentic"] = {"env": "reviewed"}
    _resign(run, verdict)
    assert "the environment or tools" in (_check(run, dataset, training_args, model_args, capsys) or "")
    verdict["pins"]["agentic"] = {"env": "pinned"}
    _write_samples(run, [{**s, "columns": {"answer": "x"}} for s in samples])
    _resign(run, verdict)
    assert "not rows of the data" in _check(run, dataset, training_args, model_args, capsys)


# The verdict the launch gate judged (VERDICT_SHA_ENV) x what became of it before the trainer's check
# (m4-trainer-verdict-removed-trains): only those exact bytes pass.
VERDICT_FATES = {
    "kept": None,
    "removed": lambda path: path.unlink(),
    "edited": lambda path: path.write_text(path.read_text().replace('"pass"', '"pass" ')),
    "emptied": lambda path: path.write_text(""),
    "a folder in its place": lambda path: (path.unlink(), path.mkdir()),
    "a link to its own bytes elsewhere": lambda path: (path.with_name("copy.json").write_bytes(path.read_bytes()),
                                                       path.unlink(), path.symlink_to("copy.json")),
}


@pytest.mark.parametrize("fate", list(VERDICT_FATES))
def test_the_trainer_believes_only_the_verdict_its_launch_gate_judged(tmp_path, monkeypatch, capsys, fate):
    import hashlib

    from mcp_server.inspection.trained import VERDICT_SHA_ENV

    run, dataset, training_args, model_args, _ = _point_of_use(tmp_path, monkeypatch)
    monkeypatch.setenv(VERDICT_SHA_ENV, hashlib.sha256(run.verdict.read_bytes()).hexdigest())
    if VERDICT_FATES[fate]:
        VERDICT_FATES[fate](run.verdict)
    refusal = _check(run, dataset, training_args, model_args, capsys)
    if fate in ("kept", "a link to its own bytes elsewhere"):  # the bytes the gate judged (the gate pins links)
        assert refusal is None, refusal
    else:
        assert refusal and "is not the verdict launch_training's gate judged" in refusal, (fate, refusal)


def test_run_by_hand_without_a_verdict_the_trainer_says_so_and_trains(tmp_path, monkeypatch, capsys):
    """Not started by launch_training (no VERDICT_SHA_ENV) and no verdict: it says its inputs were not reviewed."""
    run, dataset, training_args, model_args, _ = _point_of_use(tmp_path, monkeypatch)
    run.verdict.unlink()
    assert _check(run, dataset, training_args, model_args, capsys) is None
    assert "no inspection verdict pins what this run trains on" in capsys.readouterr().err


@pytest.mark.parametrize("pin", ["absent", "null", "a string"])
def test_a_verdict_that_pins_nothing_of_what_trains_is_refused(tmp_path, monkeypatch, capsys, pin):
    run, dataset, training_args, model_args, verdict = _point_of_use(tmp_path, monkeypatch)
    pins = {k: v for k, v in verdict["pins"].items() if k != "trained"}
    if pin != "absent":
        pins["trained"] = None if pin == "null" else "trained"
    run.verdict.write_text(json.dumps({**verdict, "pins": pins}))
    refusal = _check(run, dataset, training_args, model_args, capsys)
    assert refusal and "the verdict pins nothing of what trains" in refusal


# Each part of the "trained" pin moved, or missing on either side: the check names it.
def _trained_moves() -> dict:
    return {
        "rows: one more": lambda now: {**now, "rows": now["rows"] + 1},
        "rows_sha256: other rows": lambda now: {**now, "rows_sha256": "0" * 64},
        "prompt_column: another": lambda now: {**now, "prompt_column": "other"},
        "settings: a value changed": lambda now: {**now, "settings": {**now["settings"], "temperature": 0.5}},
        "settings: a key the pin lacks": lambda now: {**now, "settings": {}},
        "settings: a key only the pin has": lambda now: {**now, "settings": {**now["settings"], "top_k": 7}},
        "model: other files": lambda now: {**now, "model": {**now["model"], "files_sha256": "0" * 64}},
        "model: a part the verdict lacks": lambda now: {k: v for k, v in now.items() if k != "model"},
        "model: a part only the verdict has": lambda now: {**now, "tools": {"x": 1}},
    }


@pytest.mark.parametrize("move", list(_trained_moves()))
def test_each_part_of_the_trained_pin_moved_is_named(tmp_path, monkeypatch, capsys, move):
    run, dataset, training_args, model_args, verdict = _point_of_use(tmp_path, monkeypatch)
    pinned = _trained_moves()[move](verdict["pins"]["trained"])
    run.verdict.write_text(json.dumps({**verdict, "pins": {**verdict["pins"], "trained": pinned}}))
    refusal = _check(run, dataset, training_args, model_args, capsys)
    key = move.split(":")[0] if not move.startswith("model: a part only") else "tools"
    assert refusal and f"{key}: " in refusal, (move, refusal)


def test_a_resume_patch_is_applied_to_the_settings_it_names_only(tmp_path, monkeypatch, capsys):
    """pin_updates (a resume after a guard stop patched a setting): the patched value is what is reviewed; a patch
    of a key the pin does not hold adds nothing; the last patch of a key wins."""
    run, dataset, training_args, model_args, verdict = _point_of_use(tmp_path, monkeypatch)
    trained = verdict["pins"]["trained"]
    pinned = {**trained, "settings": {**trained["settings"], "temperature": 0.7}}
    updates = [{"patch": {"temperature": 0.9}}, {"patch": {"temperature": 1.0, "top_k": 3}}, "not a patch"]
    run.verdict.write_text(json.dumps({**verdict, "pins": {"trained": pinned}, "pin_updates": updates}))
    assert _check(run, dataset, training_args, model_args, capsys) is None
    run.verdict.write_text(json.dumps({**verdict, "pins": {"trained": pinned}, "pin_updates": updates[::-1][1:]}))
    refusal = _check(run, dataset, training_args, model_args, capsys)
    assert refusal and '"temperature": 1.0} (reviewed: ' in refusal and '"temperature": 0.9})' in refusal, refusal


@pytest.mark.parametrize(("resume", "refused"), [
    ("checkpoints/checkpoint-2", False), ("true", False), ("True", False), ("checkpoints", True),
    ("elsewhere/checkpoint-2", True), ("checkpoints/../elsewhere", True), ("/tmp/checkpoint-2", True)])
def test_resume_from_checkpoint_must_be_this_runs(tmp_path, monkeypatch, capsys, resume, refused):
    run, dataset, training_args, model_args, _ = _point_of_use(tmp_path, monkeypatch)
    training_args.resume_from_checkpoint = resume
    refusal = _check(run, dataset, training_args, model_args, capsys)
    assert (refusal is not None and "resume_from_checkpoint" in refusal) == refused, (resume, refusal)


def test_dynamic_sampling_changed_after_the_verdict_is_refused(tmp_path, monkeypatch, capsys):
    from mcp_server.inspection.pins import train_files_pin

    run, dataset, training_args, model_args, verdict = _point_of_use(tmp_path, monkeypatch)
    run.dynamic_sampling.write_text('{"max_extra_rounds": 2}')
    files = train_files_pin(run)
    run.verdict.write_text(json.dumps({**verdict, "pins": {**verdict["pins"], "train_files": files}}))
    assert _check(run, dataset, training_args, model_args, capsys) is None
    run.dynamic_sampling.write_text('{"max_extra_rounds": 9}')
    assert "dynamic_sampling.json (dynamic sampling) changed" in _check(run, dataset, training_args, model_args,
                                                                          capsys)
    run.dynamic_sampling.unlink()  # removed: the pin had it
    assert "dynamic_sampling.json" in (_check(run, dataset, training_args, model_args, capsys) or "")
    # added after a verdict whose train/ pin had none: not what was reviewed either
    run.verdict.write_text(json.dumps({**verdict, "pins": {**verdict["pins"], "train_files": {}}}))
    assert _check(run, dataset, training_args, model_args, capsys) is None
    run.dynamic_sampling.write_text('{"max_extra_rounds": 2}')
    assert "dynamic_sampling.json (dynamic sampling) changed" in (
        _check(run, dataset, training_args, model_args, capsys) or "")


def test_a_package_switch_in_the_configs_env_block_is_refused(tmp_path, monkeypatch, capsys):
    run, dataset, training_args, model_args, _ = _point_of_use(tmp_path, monkeypatch)
    config = yaml.safe_load(run.config.read_text())
    run.config.write_text(yaml.safe_dump({**config, "env": {"LLM_FINETUNING_ANYTHING": "1", "OTHER": "1"}}))
    refusal = _check(run, dataset, training_args, model_args, capsys)
    assert refusal and "LLM_FINETUNING_ANYTHING" in refusal and "OTHER" not in refusal


def test_while_sampling_the_check_reports_and_never_refuses(tmp_path, monkeypatch, capsys):
    from mcp_server.inspection.trained import sampling

    run, dataset, training_args, model_args, verdict = _point_of_use(tmp_path, monkeypatch)
    run.verdict.write_text(json.dumps({**verdict, "pins": {"trained": {"rows": 0}}}))
    with sampling():
        assert _check(run, dataset, training_args, model_args, capsys) is None
    assert _check(run, dataset, training_args, model_args, capsys)



# Where the run's model lies x how train/config.yaml names it x the run moved (renamed) after the verdict or not:
# the two sides of the comparison training_inputs.trained_model makes (a resolved path inside the run is pinned
# relative to it, m11-gate-trained-model-absolute). The gate (run_pins: its "trained" is samples.meta.json's record)
# and the trainer's check (its own fingerprint against the verdict's) must agree: both pass, but where the config
# names by an absolute path a model the move took away (both refuse).
MODEL_PLACES = ("inside the run", "outside the run")
MODEL_NAMES = ("relative to the run", "by its absolute path")
PLACE_ROWS = [(place, named, moved) for place in MODEL_PLACES for named in MODEL_NAMES for moved in (False, True)]


def _placed_run(tmp_path: Path, monkeypatch, place: str, named: str):
    """_point_of_use's run with its model at `place`, named so in train/config.yaml and TRL's model_args, sampled
    (samples.meta.json's "trained": the fingerprint, as sampling records it) and its verdict pinning run_pins."""
    from types import SimpleNamespace

    from mcp_server.inspection.pins import run_pins
    from mcp_server.inspection.training_inputs import fingerprint

    run, dataset, training_args, model_args, verdict = _point_of_use(tmp_path, monkeypatch)
    model = run.dir / "warm" / "model" if place == "inside the run" else tmp_path / "base" / "model"
    model.parent.mkdir(parents=True)
    (tmp_path / "model").rename(model)
    name = os.path.relpath(model, run.dir) if named == "relative to the run" else str(model)
    run.config.write_text(yaml.safe_dump({"output_dir": "checkpoints", "model_name_or_path": name}))
    model_args.model_name_or_path = name
    now = fingerprint(run, dataset, run.read_config(), "prompt", SimpleNamespace(), training_args, model_args)
    sign_samples(run.dir, {"trained": now})  # as the sampler records it: only a signed record is read
    pins = run_pins(run, "0" * 64)
    assert pins["trained"] == now
    _resign(run, {**verdict, "pins": pins})
    return run, dataset, training_args, model_args, pins


@pytest.mark.parametrize(("place", "named", "moved"), PLACE_ROWS,
                         ids=[f"{p}-{n}-{'moved' if m else 'kept'}" for p, n, m in PLACE_ROWS])
def test_the_gate_and_the_trainer_agree_on_a_model_wherever_the_run_lies(tmp_path, monkeypatch, capsys, place, named,
                                                                        moved):
    from mcp_server.inspection.pins import changes, run_pins
    from mcp_server.runs import Run

    run, dataset, training_args, model_args, pins = _placed_run(tmp_path, monkeypatch, place, named)
    if moved:  # runs/a -> runs/b, everything in it along
        run.dir.rename(tmp_path / "moved")
        run = Run(tmp_path / "moved")
    try:
        gate = changes(pins, run_pins(run, "0" * 64))
    except UserInputError as exc:  # what the verdict pins cannot be read: the gate is closed
        gate = [str(exc)]
    try:
        trainer = _check(run, dataset, training_args, model_args, capsys)
    except UserInputError as exc:  # the model named is not there: the trainer exits before it loads anything
        trainer = str(exc)
    lost = moved and place == "inside the run" and named == "by its absolute path"
    assert (gate == [], trainer is None) == (not lost, not lost), (gate, trainer)


def test_the_loaded_models_files_must_be_the_ones_the_check_verified(tmp_path, monkeypatch, capsys):
    """confirm_loaded_model, after GRPOTrainer loaded: a weight swapped between the check and the load is refused;
    the same files pass; outside a checked run (nothing verified) or while sampling it does nothing."""
    from mcp_server.inspection import trained
    from mcp_server.inspection.trained import InputsChanged, confirm_loaded_model, sampling

    run, dataset, training_args, model_args, _ = _point_of_use(tmp_path, monkeypatch)
    confirm_loaded_model(None)  # nothing verified yet: a no-op
    assert _check(run, dataset, training_args, model_args, capsys) is None
    confirm_loaded_model(None)
    (tmp_path / "model" / "model.safetensors").write_text("swapped")
    with sampling():
        confirm_loaded_model(None)
    with pytest.raises(InputsChanged) as refused:
        confirm_loaded_model(None)
    assert refused.value.code == 3 and "the model's files changed while it loaded" in capsys.readouterr().err
    trained.VERIFIED.clear()
    confirm_loaded_model(None)


@pytest.mark.parametrize(("launcher", "verdict", "refused"), [
    ("right", "wrong", False), ("wrong", "right", True), (None, "right", False), (None, "wrong", True),
    (None, None, False), ("  ", "right", False), ("  ", "wrong", True)])
def test_the_reward_code_hash_the_launcher_passed_comes_before_the_verdicts(tmp_path, monkeypatch, capsys, launcher,
                                                                            verdict, refused):
    """LLM_FINETUNING_REWARD_CODE_SHA256 (what launch_training's gate judged) is the reviewed hash; run by hand,
    the verdict's; with neither, the trainer says its rewards were not reviewed and trains."""
    from mcp_server.inspection.trained import REWARD_SHA_ENV, RewardCodeChanged, reviewed_reward_funcs
    from mcp_server.rewards import reward_code_sha256
    from mcp_server.runs import Run

    run = Run(tmp_path / "run")
    (run.dir / "train").mkdir(parents=True)
    rewards = [{"name": "format_reward", "params": {}, "weight": 1.0}]
    run.rewards.write_text(json.dumps(rewards))
    hashes = {"right": reward_code_sha256(rewards), "wrong": "0" * 64, "  ": "  "}
    if verdict:
        run.verdict.parent.mkdir(parents=True)
        run.verdict.write_text(json.dumps({"pins": {"reward_code": hashes[verdict]}}))
    monkeypatch.delenv(REWARD_SHA_ENV, raising=False)
    if launcher:
        monkeypatch.setenv(REWARD_SHA_ENV, hashes[launcher])
    if refused:
        with pytest.raises(RewardCodeChanged):
            reviewed_reward_funcs(run.dir)
        assert "refusing to train: the reward code" in capsys.readouterr().err
    else:
        funcs, digest = reviewed_reward_funcs(run.dir)
        assert len(funcs) == 1 and digest == hashes["right"]
        assert ("its scores were not reviewed" in capsys.readouterr().err) == (launcher is None and verdict is None)


def test_only_the_reviewed_files_may_sit_in_the_reviewed_copy(tmp_path):
    """unreviewed_entries: every entry of inspection/reward_code/ that is not a reviewed file nor a folder holding
    one (a package folder beside a reviewed module wins its import), bytecode folders never read, a folder named
    once (not each file under it)."""
    from mcp_server.inspection.trained import unreviewed_entries
    from mcp_server.runs import Run

    run = Run(tmp_path / "run")
    reviewed = ["mod.py", "pkg/__init__.py", "pkg/sub.py"]
    for name in [*reviewed, "other.py", "pkg/extra.py", "mod/__init__.py", "__pycache__/mod.cpython-311.pyc",
                 "pkg/__pycache__/sub.cpython-311.pyc", "deep/er/x.py", "pkg/inner/y.py"]:
        (run.reward_code / name).parent.mkdir(parents=True, exist_ok=True)
        (run.reward_code / name).write_text("x = 1\n")
    assert unreviewed_entries(run, reviewed) == ["deep/", "mod/", "other.py", "pkg/inner/", "pkg/extra.py"]
    assert unreviewed_entries(run, [*reviewed, "other.py", "pkg/extra.py", "mod/__init__.py", "deep/er/x.py",
                                    "pkg/inner/y.py"]) == []
    assert unreviewed_entries(Run(tmp_path / "none"), reviewed) == []


# Pinned fields given on train.py's command line (issue 48, round 7 g_cliargs): TRL's parser takes every field after
# --config, and the settings fingerprint compares only the fields config.yaml sets. Parsed as train.py parses them.
@pytest.mark.parametrize("extra, named", [
    (["--epsilon_high", "5.0"], "epsilon_high"),
    (["--scale_rewards", "none"], "scale_rewards"),
    (["--epsilon_high", "5.0", "--scale_rewards", "none", "--max_steps", "1"], "epsilon_high, scale_rewards"),
    (["--temperature", "0.5"], "temperature"),
    (["--seed", "7"], "seed"),
])
def test_pinned_fields_on_the_trainers_command_line_are_refused(tmp_path, monkeypatch, capsys, extra, named):
    from types import SimpleNamespace

    from mcp_server.inspection.trainer_read import parse_config
    from mcp_server.inspection.training_inputs import fingerprint

    run, dataset, _, _, verdict = _point_of_use(tmp_path, monkeypatch)
    monkeypatch.chdir(run.dir)
    _edit_config(run.dir, use_cpu=True)  # TRL's GRPOConfig trains in bf16 unless told otherwise: this is a CPU
    argv = ["--config", str(run.config)]
    _, training_args, model_args, _ = parse_config(argv)
    now = fingerprint(run, dataset, run.read_config(), "prompt", SimpleNamespace(), training_args, model_args)
    run.verdict.write_text(json.dumps({**verdict, "pins": {"trained": now}}))
    assert _check(run, dataset, *parse_config(argv)[1:3], capsys) is None  # config.yaml alone: what was reviewed
    # what the launchers pass (resume_training, the Slurm requeue) and an unpinned field still train
    passes = [*argv, "--resume_from_checkpoint", "checkpoints/checkpoint-1", "--max_steps", "1"]
    assert _check(run, dataset, *parse_config(passes)[1:3], capsys) is None
    refusal = _check(run, dataset, *parse_config([*argv, *extra])[1:3], capsys)
    assert refusal and f"the command line sets {named} " in refusal, refusal


@pytest.mark.parametrize("args, named", [
    ("--epsilon_high 5.0 --scale_rewards none", "epsilon_high, scale_rewards"),
    ("--mask_truncated_completions true --shuffle_dataset false", "shuffle_dataset, mask_truncated_completions"),
    ("--temperature 0.5", "temperature"),
])
def test_pinned_fields_in_an_args_file_beside_the_script_are_refused(tmp_path, monkeypatch, capsys, args, named):
    """Round 8, G5: transformers' HfArgumentParser reads `<script>.args` (train/train.args) by default, in the
    trainer's parse and in its baseline parse of config.yaml alone alike, so pinned fields set there were never
    seen. The baseline reads no args file: they are refused as command-line ones, and the launch gate names the
    file before anything starts."""
    import sys
    from types import SimpleNamespace

    from mcp_server.inspection.trainer_read import parse_config
    from mcp_server.inspection.training_inputs import fingerprint
    from mcp_server.training.launch_gates import interpreter_refusals

    run, dataset, _, _, verdict = _point_of_use(tmp_path, monkeypatch)
    monkeypatch.chdir(run.dir)
    _edit_config(run.dir, use_cpu=True)
    argv = ["--config", str(run.config)]
    _, training_args, model_args, _ = parse_config(argv)
    now = fingerprint(run, dataset, run.read_config(), "prompt", SimpleNamespace(), training_args, model_args)
    run.verdict.write_text(json.dumps({**verdict, "pins": {"trained": now}}))
    monkeypatch.setattr(sys, "argv", [str(run.script)])  # as verified_script sets it: train/train.py
    config_gate = lambda: [(r.gate, r.message, r.how_to_clear) for r in interpreter_refusals(run)  # noqa: E731
                           if r.gate == "config"]  # this verdict pins no launch environment: not judged here
    assert _check(run, dataset, *parse_config(argv)[1:3], capsys) is None and config_gate() == []
    (run.dir / "train" / "train.args").write_text(args + "\n")
    refusal = _check(run, dataset, *parse_config(argv)[1:3], capsys)
    assert refusal and f"the command line sets {named} " in refusal and "train/train.args" in refusal, refusal
    said = config_gate()
    assert len(said) == 1 and "train/train.args" in said[0][1], said
    assert "train/config.yaml" in said[0][2] and "remove train/train.args" in said[0][2], said


# The checkpoint TRL loads on resume, checked against the run's signed saves ledger right before the load (issue 48,
# round 7 f_resume_swap): resume_training's own check runs seconds earlier, before the trainer starts.
def test_the_checkpoint_a_resume_loads_is_the_one_the_run_saved(tmp_path, monkeypatch, capsys):
    from mcp_server.inspection.trained import InputsChanged
    from mcp_server.training.trainer.digest import record_save
    from mcp_server.training.trainer.script_support import confirm_resume_checkpoint

    run, dataset, training_args, model_args, _ = _point_of_use(tmp_path, monkeypatch)
    folders = [run.dir / "checkpoints" / f"checkpoint-{step}" for step in (1, 2)]
    for step, folder in enumerate(folders, 1):
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_text(f"weights {step}")
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        record_save(run, folder, step)
    training_args.resume_from_checkpoint = "checkpoints/checkpoint-2"
    assert _check(run, dataset, training_args, model_args, capsys) is None

    def refusal(resume) -> str | None:
        training_args.resume_from_checkpoint = resume
        capsys.readouterr()
        try:
            confirm_resume_checkpoint(run.dir, training_args)
        except InputsChanged as exc:
            assert exc.code == 3
            return capsys.readouterr().err
        return None

    assert refusal("checkpoints/checkpoint-2") is None and refusal(True) is None and refusal(None) is None
    (folders[1] / "model.safetensors").write_text("weights 9")  # swapped after resume_training checked it, same size
    for resume in ("checkpoints/checkpoint-2", True, "true"):  # `true`: TRL's last checkpoint, checkpoint-2
        said = refusal(resume)
        assert said and "model.safetensors is not the file saved" in said and "checkpoint-2" in said, (resume, said)
    assert refusal("checkpoints/checkpoint-1") is None
    (folders[0] / "extra.bin").write_text("x")
    assert "extra.bin was not written by the save" in refusal("checkpoints/checkpoint-1")
    folders[0].joinpath("extra.bin").unlink()
    (run.dir / "checkpoints" / "checkpoint-3").mkdir()  # a folder the trainer never recorded
    (run.dir / "checkpoints" / "checkpoint-3" / "model.safetensors").write_text("weights 3")
    assert "no record of this save" in refusal("checkpoints/checkpoint-3")


def test_after_a_refilter_each_reviewed_sample_is_compared_with_its_row_in_the_kept_data(tmp_path, monkeypatch,
                                                                                       capsys):
    """resume_training's re-filter (the verdict's data_updates: kept_rows 1, 2, 3 of 4) drops row 0: the data that
    trains is the kept rows, each reviewed sample compared with the row its old index maps to (old row 2 is row 1
    now), so the trainer's check passes (m5-trainer-refilter-index-unmapped); the sample of the dropped row no
    longer trains."""
    from types import SimpleNamespace

    from mcp_server.inspection.training_inputs import fingerprint

    run, dataset, training_args, model_args, verdict = _point_of_use(tmp_path, monkeypatch)
    kept = dataset.select([1, 2, 3])
    now = fingerprint(run, kept, run.read_config(), "prompt", SimpleNamespace(), training_args, model_args)
    update = {"kept_rows": [1, 2, 3], "rows": now["rows"], "rows_sha256": now["rows_sha256"]}
    run.verdict.write_text(json.dumps({**verdict, "data_updates": [update]}))
    assert _check(run, kept, training_args, model_args, capsys) is None
    # the same samples against the unfiltered rows are not the data that trains
    refusal = _check(run, dataset, training_args, model_args, capsys)
    assert refusal and "rows: 4 (reviewed: 3)" in refusal, refusal
    # a re-filter record that says no kept rows maps no sample to a row: refused, never compared at the old index
    full = fingerprint(run, dataset, run.read_config(), "prompt", SimpleNamespace(), training_args, model_args)
    run.verdict.write_text(json.dumps({**verdict, "data_updates": [
        {"rows": full["rows"], "rows_sha256": full["rows_sha256"]}]}))
    refusal = _check(run, dataset, training_args, model_args, capsys)
    assert refusal and "are not rows of the data that trains" in refusal, refusal
