"""Issue 25, "The inspection gate": a second round of hostile users against the verdict and the gate, through the
core API and the CLI. Each step here opened the gate (or recorded a verdict) before: a train/ directory that
shadows the package, config fields the verdict did not pin, a model file edited in place, a verdict written by
hand whose hashes are right but whose route, base rate or reviewed ids are not the review's, blank and
escape-coded reviewers, and a pass that disagrees with every score. The training process's own check (its
reward code is the reviewed code, train/ off its path) is run for real on an emitted train.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import checkout_env, run_cli
from mcp_server.errors import UserInputError
from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
from mcp_server.inspection.models import InspectRequest, VerdictRequest
from mcp_server.inspection.review import inspect_rewards
from support import hand_made_run

RIGHT = "<reasoning>1 + 1 = 2</reasoning><answer>2</answer>"
WRONG = "<reasoning>1 + 1 = 3</reasoning><answer>3</answer>"
# Fields the verdict did not pin before (issue 25), each with a value that changes what is sampled or scored.
UNPINNED_BEFORE = {
    "dtype": "float16", "model_init_kwargs": {"attn_implementation": "eager"},
    "vllm_structured_outputs_regex": "<answer>2</answer>", "vllm_max_model_length": 64,
    "multi_objective_aggregation": "normalize_then_sum", "scale_rewards": "none", "max_tool_calling_iterations": 1,
    "dataset_train_split": "test",
}


def _signed_run(workspace: Path, tiny_model, name: str) -> Path:
    """A hand-made run on a copy of the tiny model (its files get edited), reviewed and passed by 'ana'."""
    model = workspace / f"{name}-model"
    if not model.exists():
        shutil.copytree(tiny_model, model)
    run_dir = hand_made_run(workspace, tiny_model, name, [[RIGHT, WRONG, WRONG, WRONG]] * 13, ["2"] * 13)
    config_file = run_dir / "train" / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    config["model_name_or_path"] = str(model)
    config_file.write_text(yaml.safe_dump(config))
    meta_file = run_dir / "inspection" / "samples.meta.json"
    meta = json.loads(meta_file.read_text())
    from mcp_server.inspection.pins import config_pins
    from mcp_server.runs import Run

    meta["config_pins"] = config_pins(Run(run_dir))
    meta_file.write_text(json.dumps(meta))
    inspect_rewards(InspectRequest(run=str(run_dir)))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    assert check_inspection_gate(run_dir).passed
    return run_dir


def _closed(run_dir: Path, *words: str) -> str:
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and all(w in gate.reason for w in words), (words, gate.reason)
    return gate.reason


def test_train_dir_config_fields_and_model_files_are_pinned(workspace, tiny_model):
    run_dir = _signed_run(workspace, tiny_model, "pins")
    train = run_dir / "train"

    # A module beside train.py (train/ is sys.path[0] when it runs) or a package copy there: closed.
    (train / "datasets.py").write_text("raise SystemExit('shadowed')\n")
    _closed(run_dir, "files under train/", "datasets.py")
    (train / "datasets.py").unlink()
    (train / "mcp_server" / "rewards").mkdir(parents=True)
    _closed(run_dir, "files under train/", "mcp_server/")
    (train / "mcp_server" / "rewards" / "__init__.py").write_text("def score_format(**k):\n    return 3\n")
    _closed(run_dir, "mcp_server/rewards/__init__.py")
    shutil.rmtree(train / "mcp_server")
    assert check_inspection_gate(run_dir).passed

    # Every config field but the documented few (inspection.pins.CONFIG_UNPINNED).
    config_file = train / "config.yaml"
    original = config_file.read_text()
    for field, value in UNPINNED_BEFORE.items():
        config_file.write_text(original + yaml.safe_dump({field: value}))
        _closed(run_dir, field)
    config_file.write_text(original + yaml.safe_dump({"learning_rate": 0.5, "logging_steps": 7, "max_steps": 3}))
    assert check_inspection_gate(run_dir).passed  # how it optimizes and logs: not what is sampled or scored
    config_file.write_text(original)

    # A model file edited in place (same name, same size): the model changed.
    model_config = Path(yaml.safe_load(original)["model_name_or_path"]) / "config.json"
    text = model_config.read_text()
    swapped = text.replace('"vocab_size"', '"vocab_sizf"', 1)
    assert swapped != text and len(swapped) == len(text)
    model_config.write_text(swapped)
    _closed(run_dir, "the model changed", "files_sha256")
    model_config.write_text(text)
    assert check_inspection_gate(run_dir).passed


def test_a_verdict_must_agree_with_its_review_and_name_someone(workspace, tiny_model):
    run_dir = _signed_run(workspace, tiny_model, "forged")
    verdict_file = run_dir / "inspection" / "verdict.json"
    real = json.loads(verdict_file.read_text())

    # Hand-written verdicts with every hash right (the package's own pins) but their own story: closed.
    dropped = real["reviewed_ids"][-1]
    forged = {"base_success_rate": {"base_success_rate": 0.9},
              "reviewed_ids": {"reviewed_ids": real["reviewed_ids"][:-1], "reviewed": real["reviewed"] - 1,
                               "agree": real["agree"] - 1,
                               "sample_verdicts": [v for v in real["sample_verdicts"] if v["id"] != dropped]},
              "route": {"route": "review_again"},
              "reviewer": {"reviewer": "\x1b[2J\x1b[31mroot"}}
    for key, change in forged.items():
        verdict_file.write_text(json.dumps({**real, **change}))
        reason = _closed(run_dir, key)
        assert "\x1b" not in reason  # a name's escape codes are never sent to the terminal
    all_wrong = {**real, "agree": 0, "disagree": real["reviewed"], "note": "fine",
                 "sample_verdicts": [{**v, "agree": False} for v in real["sample_verdicts"]]}
    verdict_file.write_text(json.dumps(all_wrong))
    _closed(run_dir, "is a fail")
    verdict_file.write_text(json.dumps(real))
    assert check_inspection_gate(run_dir).passed

    # A run whose review routed to SFT first, given a forged verdict with that run's own hashes: closed.
    sft = hand_made_run(workspace, tiny_model, "sft-first", [[WRONG] * 4] * 13, ["2"] * 13)
    inspect_rewards(InspectRequest(run=str(sft)))
    from mcp_server.inspection.pins import run_pins
    from mcp_server.rewards import reward_code_sha256
    from mcp_server.runs import Run
    from mcp_server.workspace import sha256_file

    review = json.loads((sft / "inspection" / "review.json").read_text())
    result = review["result"]
    hand_made = {**real, "route": "review", "base_success_rate": 0.25, "reviewed_ids": review["reviewed_ids"],
                 "reviewed": len(review["reviewed_ids"]), "agree": len(review["reviewed_ids"]),
                 "sample_verdicts": [{"id": i, "agree": True, "note": ""} for i in review["reviewed_ids"]],
                 "samples_sha256": result["samples_sha256"], "review_sha256": sha256_file(sft / "inspection" /
                                                                                          "review.json"),
                 "pins": run_pins(Run(sft), reward_code_sha256(result["rewards"]))}
    (sft / "inspection" / "verdict.json").write_text(json.dumps(hand_made))
    _closed(sft, "route")

    # Blank, control-coded and rubber-stamp verdicts are refused at the door, and the recorded pass stays.
    for reviewer in ("   ", "\n", "ana\x1b[31m"):
        proc = run_cli("record-inspection-verdict", str(run_dir), "--verdict", "pass", "--reviewer", reviewer,
                       "--agree-rest")
        assert proc.returncode == 2 and "reviewer" in proc.stderr and "\x1b" not in proc.stderr, proc.stderr
    ids = ",".join(str(i) for i in real["reviewed_ids"])
    proc = run_cli("record-inspection-verdict", str(run_dir), "--verdict", "pass", "--reviewer", "bo",
                   "--disagree", ids, "--note", "fine")
    assert proc.returncode == 2 and "is a fail" in proc.stderr, proc.stderr
    with pytest.raises(UserInputError) as err:  # one disagreement, waved through with a word
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="bo", note="fine",
                                                 agree_with_rest=True,
                                                 sample_verdicts=[{"id": dropped, "agree": False}]))
    assert err.value.field == "note" and "'fine'" in str(err.value)
    assert json.loads(verdict_file.read_text()) == real and check_inspection_gate(run_dir).passed
    record_inspection_verdict(VerdictRequest(
        run=str(run_dir), verdict="pass", reviewer="bo", agree_with_rest=True,
        sample_verdicts=[{"id": dropped, "agree": False}], note="sample scored right, the reasoning is a guess"))
    assert check_inspection_gate(run_dir).passed


def test_a_threshold_at_the_lowest_total_of_a_task_reward_alone_is_refused(workspace, tiny_model):
    run_dir = hand_made_run(workspace, tiny_model, "task-only", [[RIGHT, WRONG, WRONG, WRONG]] * 13, ["2"] * 13,
                             rewards=[{"name": "correctness_reward"}])
    with pytest.raises(UserInputError) as err:
        inspect_rewards(InspectRequest(run=str(run_dir), success_threshold=0.0))
    assert err.value.field == "success_threshold" and "every completion" in str(err.value)
    assert inspect_rewards(InspectRequest(run=str(run_dir), success_threshold=0.5)).base_success_rate == 1.0


def test_the_trainer_refuses_reward_code_it_was_not_reviewed_on_and_ignores_train_dir(workspace, tiny_model):
    """An emitted train.py, run as launch.sh runs it: train/ shadows nothing, and a reward hash that is not the
    one it was handed (a helper edited after launch_training) stops it before any training."""
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.inspection.trained import REWARD_SHA_ENV
    from mcp_server.recipe.models import GRPORecipeRequest

    emitted = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_name="trainer",
                                                 overrides={"max_steps": 1, "report_to": "none"}))
    run_dir = Path(emitted.run_dir)
    (run_dir / "train" / "datasets.py").write_text("raise SystemExit('shadowed: train/datasets.py')\n")
    shadow = run_dir / "train" / "mcp_server"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise SystemExit('shadowed: train/mcp_server')\n")
    proc = subprocess.run([sys.executable, "train/train.py", "--config", "train/config.yaml"], cwd=run_dir,
                          capture_output=True, text=True, timeout=300,
                          env=checkout_env({REWARD_SHA_ENV: "0" * 64, "CUDA_VISIBLE_DEVICES": ""}))
    assert "shadowed" not in proc.stdout + proc.stderr
    assert proc.returncode == 3 and "refusing to train" in proc.stderr, proc.stderr[-2000:]
    assert not (run_dir / "train" / "logs" / "progress.jsonl").exists()
