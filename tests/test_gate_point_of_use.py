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

from support import emit_run, pass_inspection, trainer_or_refusal
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
    # not rows of the data.
    samples = run_dir / "inspection" / "samples.jsonl"
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    for forged in ({"prompt": "Say anything."}, {"columns": {"other": "say 0", "answer": "999"}}):
        samples.write_text("".join(json.dumps({**s, **forged}) + "\n" for s in lines))
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
    meta_file.write_text(json.dumps({**meta, "differs_from_config": []}))
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
