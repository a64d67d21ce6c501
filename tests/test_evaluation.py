"""evaluate_model, promote_checkpoint and export_model: the rules, through the core API, the CLI and MCP.

The better and the worse checkpoint are known by construction, never by training luck: the better one is the
tiny model trained with TRL's SFTTrainer until it has memorised the goldens' exact answers (checked before any
test uses it; a fixture error otherwise), the worse one the untrained tiny model, which answers none of them
(also checked). The real evaluation, promotion and export code then judges them. The drift budget's bands, the
rerun rule and an item's pass (survivors of issue 33's mutation audit) are checked on values known by construction.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from conftest import call_mcp, run_cli, run_cli_json
from mcp_server.errors import UserInputError
from mcp_server.evaluation.evaluate import baselines_of, evaluate_model, item_passed, wilson_interval
from mcp_server.evaluation.export import export_model
from mcp_server.evaluation.models import EvaluateRequest, ExportRequest, PromoteRequest
from mcp_server.evaluation.paired import clopper_pearson, compare_paired, mcnemar_exact_p
from mcp_server.evaluation.drift_rule import judge_drift, judge_rerun
from mcp_server.evaluation.promote import promote_checkpoint
from mcp_server.tiny import make_task, write_jsonl

MAX_NEW = 24


@pytest.fixture(scope="module")
def small_task(tmp_path_factory) -> tuple[Path, list[dict]]:
    """16 sums of 0..3 and a goldens file holding them (the SFT model learns exactly these)."""
    rows = make_task(n=16, max_operand=3)
    path = tmp_path_factory.mktemp("goldens") / "goldens.jsonl"
    write_jsonl([{k: r[k] for k in ("prompt", "question", "answer")} for r in rows], path)
    return path, rows


# The better checkpoint must pass at least this many of the 16 goldens: twice what the promotion rule needs
# against a base that passes none (6 gained / 0 lost is the first split with exact McNemar p < 0.05).
MEMORISED_AT_LEAST = 12


def greedy_passes(model_dir_or_loaded, rows) -> int:
    """Goldens passed, decoded and graded exactly as evaluate_model does it."""
    from mcp_server.evaluation.evaluate import evaluate_rows

    loaded = model_dir_or_loaded if isinstance(model_dir_or_loaded, tuple) else None
    items = evaluate_rows(model_dir_or_loaded, rows, [{"name": "correctness_reward"}], MAX_NEW, loaded=loaded)
    return sum(i.passed for i in items)


@pytest.fixture(scope="module")
def good_model(tiny_model, small_task, tmp_path_factory) -> Path:
    """The tiny model after real SFT on the goldens' own solutions until it answers them all (at most 600
    steps); fails as a fixture error, naming the count, unless it passes at least MEMORISED_AT_LEAST."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    _, rows = small_task
    out = tmp_path_factory.mktemp("good") / "model"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    data = Dataset.from_list(
        [{"prompt": r["prompt"], "completion": [{"role": "assistant", "content": r["solution"]}]} for r in rows]
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)

    class UntilMemorised(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % 25 == 0:
                model.eval()
                side = tokenizer.padding_side
                if greedy_passes((model, tokenizer), rows) == len(rows):
                    control.should_training_stop = True
                tokenizer.padding_side = side
                model.train()

    args = SFTConfig(
        output_dir=str(out),
        max_steps=600,
        learning_rate=3e-3,
        per_device_train_batch_size=16,
        lr_scheduler_type="constant",
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        logging_steps=1000,
        bf16=False,
    )  # TRL's default bf16 autocast needs AVX512 on CPU
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model), args=args, train_dataset=data,
                         processing_class=tokenizer, callbacks=[UntilMemorised()])
    try:
        trainer.train()
        trainer.save_model(str(out))
        tokenizer.save_pretrained(out)
    finally:
        torch.set_num_threads(threads)
    passed = greedy_passes(out, rows)
    if passed < MEMORISED_AT_LEAST:
        raise RuntimeError(f"fixture precondition: the memorising SFT passes {passed}/{len(rows)} goldens after "
                           f"{trainer.state.global_step} steps, fewer than {MEMORISED_AT_LEAST}")
    return out


@pytest.fixture(scope="module")
def worse_model(tiny_model, small_task) -> Path:
    """The untrained tiny model; checked to pass none of the goldens (fixture error otherwise)."""
    passed = greedy_passes(tiny_model, small_task[1])
    if passed:
        raise RuntimeError(f"fixture precondition: the untrained tiny model passes {passed} goldens, expected 0")
    return tiny_model


def make_run(workspace: Path, name: str, base: Path | str, checkpoint: Path) -> Path:
    """A run directory as emit_grpo_config + training leave it: config.yaml naming the base, a checkpoint."""
    run = workspace / "runs" / f"2026-01-01-{name}"
    (run / "train").mkdir(parents=True)
    shutil.copytree(checkpoint, run / "checkpoints")
    config = {"model_name_or_path": str(base), "output_dir": "checkpoints", "max_completion_length": MAX_NEW}
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "train" / "rewards.json").write_text(
        json.dumps([{"name": "correctness_reward", "params": {}, "weight": 1.0}])
    )
    return run


# ---------------------------------------------------------------- statistics and rules
def test_wilson_interval_is_honest_at_the_edges():
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and 0.25 < high < 0.35  # zero successes still leave room above
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-3) and high == pytest.approx(0.7634, abs=1e-3)
    assert wilson_interval(100, 100)[1] == 1.0


def paired(gained: int, lost: int, both: int = 0, neither: int = 0):
    """Pass/fail lists of a base and a checkpoint with the given counts of each kind of golden."""
    base = [False] * gained + [True] * lost + [True] * both + [False] * neither
    ckpt = [True] * gained + [False] * lost + [True] * both + [False] * neither
    return compare_paired(base, ckpt)


# Exact two-sided McNemar p-values: g/0 is 2 * 2**-g; 6/1 is 2 * (C(7,6) + C(7,7)) / 2**7 = 0.125; the large
# ones are scipy.stats.binomtest(g, g + l, 0.5).pvalue, with the Clopper-Pearson interval of g / (g + l).
@pytest.mark.parametrize("gained, lost, p, promote", [
    (0, 0, 1.0, False),
    (4, 0, 0.125, False),  # the old paired Wald interval promoted this
    (5, 0, 0.0625, False),
    (6, 0, 0.03125, True),
    (6, 1, 0.125, False),
    (8, 1, 0.0390625, True),
    (5, 5, 1.0, False),  # a tie
    (0, 6, 0.03125, False),  # significantly worse is not better
    (60, 40, 0.05688793364098089, False),
    (200, 150, 0.008720036530555947, True),
    (1000, 900, 0.023108845108901193, True),
])
def test_promotion_rule_is_the_exact_mcnemar_test(gained, lost, p, promote):
    result = paired(gained, lost, both=3, neither=max(0, 16 - gained - lost - 3))
    assert result.p_value == pytest.approx(p, rel=1e-9)
    assert (result.low > 0) is promote  # the rule: the interval's lower end above 0 points
    assert result.low <= result.difference <= result.high
    assert result.difference == pytest.approx((gained - lost) / result.n * 100)


def test_paired_interval_inverts_the_exact_test():
    """Its lower end lies above 0 exactly when p < 0.05 (and its upper end below 0 exactly when p < 0.05 the
    other way), for every split of up to 40 disagreements: verdict and interval never disagree."""
    for d in range(41):
        for gained in range(d + 1):
            result = paired(gained, d - gained, neither=10)
            assert (result.low > 0) == (gained > d - gained and result.p_value < 0.05), (gained, d - gained)
            assert (result.high < 0) == (gained < d - gained and result.p_value < 0.05), (gained, d - gained)
    none = paired(0, 0, both=5, neither=11)  # never disagreeing: nothing to tell them apart
    assert (none.difference, none.low, none.high, none.p_value) == (0.0, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError):
        compare_paired([True, False], [True])


def test_clopper_pearson_and_the_interval_match_known_values():
    assert clopper_pearson(5, 10) == pytest.approx((0.18708602844739863, 0.8129139715526015), abs=1e-9)
    assert clopper_pearson(0, 10) == pytest.approx((0.0, 0.3084971078187638), abs=1e-9)
    # 60 gained, 40 lost of 100: scipy's exact interval of 0.6 is 0.4972-0.6967, i.e. -0.56 to +39.3 points.
    result = paired(60, 40)
    assert (result.low, result.high) == pytest.approx((-0.5581699, 39.3410462), abs=1e-4)
    assert mcnemar_exact_p(3, 7) == mcnemar_exact_p(7, 3) == 0.34375


@pytest.mark.parametrize(
    "base, ckpt, band",
    [(0.50, 0.50, "noise"), (0.50, 0.49, "noise"), (0.50, 0.48, "rerun"), (0.50, 0.45, "rerun"),
     (0.50, 0.44, "hard_fail"), (0.50, 0.70, "noise"),
     # the tiny suite's 40 items: 2 lost is 5 points exactly as the pass rates compute it (5.000000000000004),
     # the budget's edge, a rerun; 3 lost is a hard fail (a survivor of issue 48's audit)
     (36 / 40, 34 / 40, "rerun"), (36 / 40, 33 / 40, "hard_fail"), (36 / 40, 35 / 40, "rerun")],
)
def test_drift_budget_bands(base, ckpt, band):
    assert judge_drift(base, ckpt) == band


# ---------------------------------------------------------------- evaluate_model and the baseline
@pytest.mark.slow
def test_first_evaluation_writes_the_baseline_and_it_is_never_overwritten(workspace, good_model, small_task):
    goldens, rows = small_task
    first = evaluate_model(EvaluateRequest(model=str(good_model), goldens=str(goldens), max_new_tokens=MAX_NEW))
    assert first.n == len(rows) and 0 < first.passed <= first.n
    assert first.ci_low <= first.pass_rate <= first.ci_high
    assert [i.index for i in first.items] == list(range(len(rows)))
    assert all(i.passed == (i.scores["correctness_reward"] > 0) for i in first.items)
    assert not [w for w in first.warnings if "paid nothing" in w]  # correctness_reward paid: nothing to warn of
    # ... unless it passed every golden: a grader that tells no reply apart is named (issue 49, sixth walk)
    assert first.warnings == ([w for w in first.warnings if "correctness_reward passed all" in w]
                              if first.passed == first.n else []), first.warnings
    assert first.baseline_written and [Path(first.baseline_path)] == baselines_of(str(good_model))
    written = Path(first.baseline_path).read_bytes()
    record = json.loads(written)
    assert record["goldens_sha256"] == first.goldens_sha256 and record["pass_rate"] == first.pass_rate
    # Read-only by its mode bits (root ignores modes, so os.access would pass for root whatever the mode).
    assert os.stat(first.baseline_path).st_mode & 0o222 == 0

    # A looser evaluation later (a grader that only checks the format) does not replace the baseline: it is another
    # task's baseline, filed beside it (issue 49), and the same evaluation again writes nothing.
    looser = evaluate_model(EvaluateRequest(model=str(good_model), goldens=str(goldens), max_new_tokens=MAX_NEW,
                                            graders=[{"name": "format_reward"}], baseline="write"))
    assert looser.baseline_written and looser.baseline_path != first.baseline_path
    again = evaluate_model(EvaluateRequest(model=str(good_model), goldens=str(goldens), max_new_tokens=MAX_NEW))
    assert not again.baseline_written and "never overwritten" in again.baseline_note
    assert Path(first.baseline_path).read_bytes() == written


def test_no_baseline_for_partial_or_in_run_evaluations(workspace, tiny_model, small_task):
    goldens, _ = small_task
    partial = evaluate_model(EvaluateRequest(model="tiny", goldens=str(goldens), max_new_tokens=4, limit=3))
    assert partial.n == 3 and not partial.baseline_written and partial.baseline_path is None
    inside = workspace / "runs" / "2026-01-01-x" / "checkpoints"
    shutil.copytree(tiny_model, inside)
    checkpoint = evaluate_model(EvaluateRequest(model=str(inside), goldens=str(goldens), max_new_tokens=4))
    assert not checkpoint.baseline_written and "run directory" in checkpoint.baseline_note
    assert not (workspace / "eval").exists() or not list((workspace / "eval").glob("baseline-*"))


def test_bad_goldens_name_the_field(workspace, tmp_path):
    with pytest.raises(UserInputError) as err:
        evaluate_model(EvaluateRequest(model="tiny", goldens=str(tmp_path / "missing.jsonl")))
    assert err.value.field == "goldens"
    no_prompt = tmp_path / "no-prompt.jsonl"
    no_prompt.write_text('{"answer": "1"}\n')
    with pytest.raises(UserInputError, match="prompt"):
        evaluate_model(EvaluateRequest(model="tiny", goldens=str(no_prompt)))


# A golden and, for each kind, a second row the model is asked as the same question (round 17, b09: one item 21
# times counted as 21 independent gains, PROMOTE at p = 9.5e-7): each is refused by every door a goldens file takes.
ASKED = [{"role": "user", "content": "What is 1 + 2?"}]
REPEATS = {
    "the same row": {"prompt": ASKED, "answer": "3"},
    "another answer column": {"prompt": ASKED, "answer": "4", "question": "sum"},
    "case and spaces": {"prompt": [{"role": "user", "content": "  what IS 1+2 ?\t"}], "answer": "3"},
    "a zero-width space": {"prompt": [{"role": "user", "content": "What is 1 +\u200b 2?"}], "answer": "3"},
    "full-width digits": {"prompt": [{"role": "user", "content": "What is \uff11 + \uff12?"}], "answer": "3"},
    "plain text": {"prompt": "What is 1 + 2?", "answer": "3"},
    "keys in another order": {"prompt": [{"content": "What is 1 + 2?", "role": "user"}], "answer": "3"},
}


@pytest.mark.parametrize(("kind", "door"), [(kind, door) for kind in REPEATS for door in (
    "evaluate_model", "promote_checkpoint")] + [(None, "evaluate_model")])
def test_a_golden_asked_twice_is_refused_by_every_door(workspace, tiny_model, kind, door):
    """The table: each way of repeating a golden x evaluate_model (a baseline) and promote_checkpoint (no baseline
    yet: it measures one on the goldens given). Refused naming the goldens, the repeated row and the distinct count,
    before anything is decoded or written; goldens asking distinct questions (None: 1 + 2 and 1 + 3) are read."""
    path = workspace / "goldens.jsonl"
    second = REPEATS[kind] if kind else {"prompt": [{"role": "user", "content": "What is 1 + 3?"}], "answer": "4"}
    rows = [{"prompt": [{"role": "user", "content": "What is 0 + 0?"}], "answer": "0"},
            {"prompt": ASKED, "answer": "3"}, second]
    write_jsonl(rows, path)
    if door == "evaluate_model":
        call = lambda: evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(path),  # noqa: E731
                                                      max_new_tokens=2))
    else:
        run = make_run(workspace, "twice", tiny_model, tiny_model)
        call = lambda: promote_checkpoint(PromoteRequest(run=str(run), goldens=str(path)))  # noqa: E731
    if kind is None:
        assert call().n == 3
        return
    with pytest.raises(UserInputError) as refused:
        call()
    assert refused.value.field == "goldens", refused.value
    said = str(refused.value)
    assert "2 distinct goldens in 3 rows: row 2 repeats row 1" in said and str(path) in said, said
    assert not (workspace / "eval").exists() or not any((workspace / "eval").glob("baseline*")), said


# ---------------------------------------------------------------- promote_checkpoint
@pytest.mark.slow
def test_worse_checkpoint_is_rejected_with_evidence(workspace, worse_model, good_model, small_task):
    goldens, _ = small_task
    base = evaluate_model(EvaluateRequest(model=str(good_model), goldens=str(goldens), max_new_tokens=MAX_NEW))
    run = make_run(workspace, "worse", good_model, worse_model)  # the "trained" checkpoint is the untrained model
    result = promote_checkpoint(PromoteRequest(run=str(run)))
    assert result.verdict == "REJECT"
    assert result.baseline_pass_rate == base.pass_rate and result.checkpoint_pass_rate == 0.0
    assert result.improvement_points < 0 and result.goldens_sha256 == base.goldens_sha256
    assert result.lost == base.passed >= MEMORISED_AT_LEAST and result.gained == 0 and result.improvement_ci[1] < 0
    assert result.p_value == pytest.approx(2 * 0.5 ** base.passed)  # exact McNemar: every disagreement one way
    report = (run / "promotion-report.md").read_text()
    assert "REJECT" in report and base.goldens_sha256 in report
    assert json.loads((run / "promotion.json").read_text())["verdict"] == "REJECT"
    # The baseline the comparison used is untouched.
    assert json.loads(Path(base.baseline_path).read_text())["pass_rate"] == base.pass_rate

    # Issue 33: the read-only baseline hand-edited (chmod, then edit) to a 0% base turned this REJECT into a
    # PROMOTE. The promotion recorded its hash, and the edited items no longer add up to the edited rate.
    path = Path(base.baseline_path)
    os.chmod(path, 0o644)
    forged = json.loads(path.read_text())
    path.write_text(json.dumps({**forged, "passed": 0, "pass_rate": 0.0}))
    with pytest.raises(UserInputError, match="edited"):
        promote_checkpoint(PromoteRequest(run=str(run)))
    (run / "promotion.json").unlink()  # no earlier promotion to compare with, and the forger records the forged
    # file's hash in the baseline ledger too (issue 48): a line without the key's signature is not evaluate_model's
    from mcp_server.evaluation.evaluate import baseline_ledger
    from mcp_server.evidence import sign
    line = {"name": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    with baseline_ledger().open("a") as ledger:
        ledger.write(json.dumps(line) + "\n")
    with pytest.raises(UserInputError, match="has no valid signature"):
        promote_checkpoint(PromoteRequest(run=str(run)))
    # and one who could read the key and sign the line (a process of the same user): its own items still give it away
    with baseline_ledger().open("a") as ledger:
        ledger.write(json.dumps(sign(baseline_ledger().parent, baseline_ledger().name, line)) + "\n")
    with pytest.raises(UserInputError, match="its items hold"):
        promote_checkpoint(PromoteRequest(run=str(run)))


@pytest.mark.slow
def test_changed_goldens_are_refused(workspace, tiny_model, good_model, small_task, tmp_path):
    goldens, rows = small_task
    evaluate_model(EvaluateRequest(model=str(good_model), goldens=str(goldens), max_new_tokens=MAX_NEW))
    other = tmp_path / "other.jsonl"
    write_jsonl([{k: r[k] for k in ("prompt", "answer")} for r in rows[:8]], other)
    run = make_run(workspace, "other-goldens", good_model, tiny_model)
    with pytest.raises(UserInputError, match="not the goldens the baseline was measured on"):
        promote_checkpoint(PromoteRequest(run=str(run), goldens=str(other)))


@pytest.mark.slow
def test_better_checkpoint_is_promoted_then_exported_round_trip(workspace, worse_model, good_model, small_task,
                                                                monkeypatch):
    goldens, _ = small_task
    evaluate_model(EvaluateRequest(model="tiny", goldens=str(goldens), max_new_tokens=MAX_NEW))  # baseline 0%
    run = make_run(workspace, "better", "tiny", good_model)
    result = promote_checkpoint(PromoteRequest(run=str(run)))
    assert result.verdict == "PROMOTE", result.reasons
    assert result.improvement_ci[0] > 0 and result.gained >= MEMORISED_AT_LEAST and result.lost == 0
    assert result.p_value < 0.05 and result.drift.ok
    assert any(r.startswith("graders replayed") and "the same scores" in r for r in result.reasons)  # honest graders

    from mcp_server.evaluation import export as export_module

    monkeypatch.setattr(export_module, "WAIT_TICK_S", 0.001)  # the cadence, not its length (10 s shipped)
    said: list[str] = []
    exported = export_model(ExportRequest(run=str(run)), report=lambda done, total, message: said.append(message))
    assert exported.smoke_identical and exported.promotion_verdict == "PROMOTE" and not exported.merged_lora
    # walk 13: "greedy outputs of the checkpoint on 4 goldens", then 96 s without a line
    assert any(line.startswith("greedy outputs of the checkpoint on ") and line.endswith(" s so far")
               for line in said), said[:8]
    export_dir = Path(exported.export_dir)
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md"} <= set(exported.files)
    card = (export_dir / "README.md").read_text()
    assert "base_model: tiny" in card and "PROMOTE" in card
    # Made by hand, never launched: what trained is unrecorded, never the config or rewards.json as they are now
    # (round 14 F2; issue 48: the reward names and weights too).
    assert exported.config_sha256 is None and "provenance unrecorded" in card and "`unrecorded`" in card
    assert "| Reward functions | unrecorded |" in card and "correctness_reward" not in card
    # The export is a standalone model with the checkpoint's behaviour.
    again = evaluate_model(EvaluateRequest(model=str(export_dir), goldens=str(goldens), max_new_tokens=MAX_NEW))
    assert again.pass_rate == result.checkpoint_pass_rate
    assert exported.checkpoint_sha256 == result.checkpoint_sha256 and result.checkpoint_sha256 in card

    # An export is never overwritten: refused, or (explicit flag) the earlier one is archived first.
    with pytest.raises(UserInputError, match="holds an earlier export.*archive_previous"):
        export_model(ExportRequest(run=str(run)))
    weights = (export_dir / "model.safetensors").read_bytes()
    # A moved run keeps its promotion: the checkpoint is known by content, not by path.
    moved = run.rename(run.with_name(run.name + "-moved"))
    second = export_model(ExportRequest(run=str(moved), archive_previous=True))
    assert second.smoke_identical and Path(second.archived_previous) == moved / "archive" / "export-1"
    assert (moved / "archive" / "export-1" / "model.safetensors").read_bytes() == weights

    # A checkpoint retrained in place after the promotion is not the promoted one: no export.
    shutil.copy(worse_model / "model.safetensors", moved / "checkpoints" / "model.safetensors")
    with pytest.raises(UserInputError, match="not the checkpoint the promotion judged"):
        export_model(ExportRequest(run=str(moved), archive_previous=True))
    assert not (moved / "archive" / "export-2").exists()

    # The promoted model back in place, in a run launched since whose process died (failed): a PROMOTE never
    # vouches for a failed run's model (issue 48: it was exported with PROMOTE on its card). Refused, naming it;
    # exported unpromoted only when asked, and the card says so.
    shutil.copy(good_model / "model.safetensors", moved / "checkpoints" / "model.safetensors")
    (moved / "train" / "logs").mkdir(parents=True)
    (moved / "train" / "logs" / "stdout.log").write_text("==== llm-finetuning launch\n")
    (moved / "run.json").write_text(json.dumps({"state": "running", "pid": 2**31 - 2, "create_time": 1.0,
                                                "started_ts": 1.0, "cwd": str(moved), "launch_id": "f" * 32,
                                                "launcher": ["bash", "train/launch.sh"]}))
    with pytest.raises(UserInputError, match="is failed, not succeeded") as refused:
        export_model(ExportRequest(run=str(moved), archive_previous=True))
    assert refused.value.field == "checkpoint"
    unpromoted = export_model(ExportRequest(run=str(moved), archive_previous=True, allow_unpromoted=True))
    assert unpromoted.promotion_verdict is None
    assert "was not promoted" in (Path(unpromoted.export_dir) / "README.md").read_text()


def test_export_refuses_an_unjudged_run_and_merges_lora(workspace, tiny_model, small_task):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    torch.manual_seed(0)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # non-zero adapters, so merging changes the weights
            torch.nn.init.normal_(param, std=0.5)
    adapter = workspace / "adapter"
    model.save_pretrained(adapter)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(adapter)
    run = make_run(workspace, "lora", tiny_model, adapter)

    with pytest.raises(UserInputError, match="no PROMOTE verdict"):
        export_model(ExportRequest(run=str(run)))
    reports = []
    exported = export_model(ExportRequest(run=str(run), allow_unpromoted=True),
                            report=lambda done, total, message: reports.append((done, time.monotonic(), message)))
    assert exported.merged_lora and exported.smoke_identical
    assert "model.safetensors" in exported.files and "adapter_config.json" not in exported.files
    assert "not promoted" in Path(exported.model_card).read_text()
    _the_reloads_estimate_is_its_work(reports, exported.smoke_items)


def _the_reloads_estimate_is_its_work(reports: list, smoke_items: int) -> None:
    """Walk 11: export's "reloading the export and comparing greedy outputs (3/4) [2.7 min elapsed, about 55 s
    left]" took 2.7 min: the time left was the stages' mean rate, a quick save among them. The phase is greedy
    decodes of the same goldens to the same length and a load of the files the save wrote, and its estimate is
    those as the checkpoint's decodes and the save took: each inside the span between the reports around it, on
    the smoke test's goldens and the run's max_completion_length (not a timing assertion: the inputs are checked,
    not how long they took)."""
    import re

    at = {done: (when, message) for done, when, message in reports}
    found = re.search(r"reloading the export and comparing greedy outputs: about (\S+) s left \(greedy outputs on "
                      r"the same (\d+) goldens, up to (\d+) new tokens each, as the checkpoint's took ([\d.]+) s, and "
                      r"a load of the files the save wrote, as writing them took ([\d.]+) s\)", at[3][1])
    assert found, at[3][1]
    left, prompts, tokens, decode, save = (float(found[i]) for i in range(1, 6))
    assert (prompts, tokens) == (smoke_items, MAX_NEW), found[0]
    # the figures are said to 0.1 s: a quick machine decodes the tiny model's 4 goldens in under 0.05 s ("0.0 s")
    assert 0 <= decode <= at[2][0] - at[1][0] + 0.05 and decode + save <= at[3][0] - at[1][0] + 0.1, (at, found[0])
    assert abs(left - (decode + save)) <= 0.6, found[0]  # the words round each figure
    # before the save: the decodes as timed, and the load still to be timed by the save
    assert f"as the checkpoint's took {found[4]} s, and a load of the files the save writes" in at[2][1], at[2][1]


# ---------------------------------------------------------------- doors
def test_cli_evaluate_and_bad_input(workspace, tiny_model, small_task):
    goldens, _ = small_task
    proc, data = run_cli_json("evaluate-model", "tiny", "--goldens", str(goldens), "--max-new-tokens", "4",
                              "--limit", "2", cwd=workspace)
    assert proc.returncode == 0 and data["n"] == 2 and data["pass_rate"] == 0.0
    proc = run_cli("evaluate-model", "tiny", "--goldens", str(workspace / "nope.jsonl"), cwd=workspace)
    assert proc.returncode == 2 and "goldens" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("promote-checkpoint", "no-such-run", cwd=workspace)
    assert proc.returncode == 2 and "run" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_mcp_lists_and_calls_evaluate_model(workspace, tiny_model, small_task):
    goldens, _ = small_task

    async def calls(client):
        tools = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("evaluate_model", {
            "model": "tiny", "goldens": str(goldens), "max_new_tokens": 4, "limit": 2})
        return tools, result

    tools, result = asyncio.run(call_mcp(calls, env={"LLM_FINETUNING_WORKSPACE": str(workspace)}))
    assert {"evaluate_model", "promote_checkpoint", "export_model"} <= tools
    assert not result.is_error and result.structured_content["n"] == 2


def test_a_checkpoint_that_never_disagrees_with_its_base_is_not_promoted(workspace, tiny_model, small_task):
    """Issue 33's own mutation audit: the improvement's interval is 0 to 0 points when the two models never
    disagree, which is not above 0: the base model itself, promoted against its own baseline, is a REJECT."""
    goldens, _ = small_task
    evaluate_model(EvaluateRequest(model="tiny", goldens=str(goldens), max_new_tokens=MAX_NEW))
    run = make_run(workspace, "same", "tiny", tiny_model)
    result = promote_checkpoint(PromoteRequest(run=str(run)))
    assert result.gained == result.lost == 0 and result.improvement_ci == (0.0, 0.0)
    assert result.verdict == "REJECT", result.reasons


def test_a_rejection_rewritten_to_a_promotion_by_hand_is_never_exported(workspace, tiny_model, small_task):
    """Issue 48, seventh round (F2): a real REJECT's promotion.json rewritten by hand (every item's completion and
    score a pass, the rates recomputed, verdict PROMOTE) re-derived as a PROMOTE, and export_model exported it as
    promoted. promote_checkpoint signs promotion.json, the checkpoint's content hash in it (evidence.py): an
    unsigned one vouches for nothing, and is named."""
    from mcp_server.evaluation.promote import promotion_problems

    goldens, _ = small_task
    evaluate_model(EvaluateRequest(model="tiny", goldens=str(goldens), max_new_tokens=MAX_NEW))
    run = make_run(workspace, "rewritten", "tiny", tiny_model)
    assert promote_checkpoint(PromoteRequest(run=str(run))).verdict == "REJECT"
    with pytest.raises(UserInputError, match=r"promote_checkpoint judged this checkpoint REJECT") as refused:
        export_model(ExportRequest(run=str(run), smoke_items=1))  # the signed one is read
    # walk 11: the refusal after a REJECT read "run promote_checkpoint first", as if it had never run
    assert "promote_checkpoint first" not in str(refused.value) and "promotion-report.md" in str(refused.value)
    path = run / "promotion.json"
    forged = json.loads(path.read_text())
    for item in forged["items"]:
        item["scores"] = {k: 1.0 for k in item["scores"]}
        item["passed"] = True
        item["completion"] = f"<reasoning>ok</reasoning><answer>{item['answer']}</answer>"
    forged.update(checkpoint_pass_rate=1.0, gained=len(forged["items"]), verdict="PROMOTE", reasons=["forged"])
    forged.pop("mac", None)
    path.write_text(json.dumps(forged))
    with pytest.raises(UserInputError) as refused:
        export_model(ExportRequest(run=str(run), smoke_items=1))
    assert "is not a promotion promote_checkpoint measured" in str(refused.value), str(refused.value)
    assert "promotion.json has no valid signature" in str(refused.value), str(refused.value)
    assert not (run / "export").exists()
    assert promotion_problems(forged) == [
        "not recorded by llm-finetuning on this machine: promotion.json has no valid signature"]
    forged["mac"] = json.loads((workspace / "eval" / "baselines.jsonl").read_text().splitlines()[0])["mac"]
    path.write_text(json.dumps(forged))  # another record's signature: not this file's
    with pytest.raises(UserInputError, match="promotion.json has no valid signature"):
        export_model(ExportRequest(run=str(run), smoke_items=1))


@pytest.mark.slow
def test_a_drift_in_the_rerun_band_is_judged_on_every_item_and_seed(workspace, worse_model, good_model, small_task,
                                                                    tmp_path):
    """A 2-point greedy drop (1 of 50 drift items) goes to the sampled reruns. With at most 3 of their 150 (item,
    seed) pairs lost and none gained, the exact paired test cannot tell it from noise (p >= 0.25) whatever the
    sampling draws: within budget, with the reruns' counts and p in the result and the report."""
    goldens, rows = small_task
    known = next(r for r in rows if greedy_passes(good_model, [r]) == 1)  # the base answers it, greedy
    never = {"prompt": known["prompt"], "answer": "-1"}  # no model writes -1 for a sum of 0..3
    suite = write_jsonl([{"prompt": known["prompt"], "answer": known["answer"]}] + [never] * 49,
                        tmp_path / "drift.jsonl")
    evaluate_model(EvaluateRequest(model=str(good_model), goldens=str(goldens), max_new_tokens=MAX_NEW))
    run = make_run(workspace, "drift-rerun", good_model, worse_model)
    drift = promote_checkpoint(PromoteRequest(run=str(run), drift_suite=str(suite))).drift
    assert (drift.band, drift.drop_points, drift.rerun_gained) == ("rerun", 2.0, 0) and drift.rerun_lost <= 3
    assert drift.ok and drift.rerun_p_value >= 0.25 and len(drift.rerun_drops) == 3
    assert f"{drift.rerun_lost} lost, 0 gained" in (run / "promotion-report.md").read_text()


# ---------------------------------------------------------------- survivors of issue 33's mutation audit
def reruns(n: int, lost: list[int], gained: list[int] | None = None) -> tuple[dict, dict]:
    """Per-item rerun results over an n-item suite, one entry per seed: the checkpoint loses `lost[i]` items the base
    passes and gains `gained[i]` the base fails (the base passes all but the first gained[i] items)."""
    gained = gained or [0] * len(lost)
    base, ckpt = {}, {}
    for seed, (k, g) in enumerate(zip(lost, gained), start=1):
        base[str(seed)] = [i >= g for i in range(n)]
        ckpt[str(seed)] = [(i < g) or (g + k <= i) for i in range(n)]
    return base, ckpt


def test_the_drift_budget_bands_and_the_rerun_rule():
    assert [judge_drift(0.5, ckpt) for ckpt in (0.5, 0.49, 0.48, 0.45, 0.44)] == [
        "noise", "noise", "rerun", "rerun", "hard_fail"]
    # A mean drop within the 1-point budget is noise, however consistent (1000 items, 10 lost on each seed).
    within = judge_rerun(*reruns(1000, [10, 10, 10]))
    assert (within.mean_drop, within.lost, within.noise) == (1.0, 30, True) and within.p_value < 1e-8
    # Over 1 point and beyond noise: 3 of 100 items lost on each of 3 seeds, none gained (p = 2 / 2**9).
    real = judge_rerun(*reruns(100, [3, 3, 3]))
    assert (real.drops, real.mean_drop, real.noise) == ({"1": 3.0, "2": 3.0, "3": 3.0}, 3.0, False)
    assert real.p_value == 2 / 2**9
    # The tiny demo's case (bench_kernels): 2 of 40 items lost on one seed of 3 is a 1.7-point mean that 120
    # sampled answers cannot tell from noise (p = 0.5); one more lost on each seed could (6 lost: p = 0.031).
    small = judge_rerun(*reruns(40, [2, 0, 0]))
    assert (small.mean_drop, small.lost, small.gained, small.noise) == (1.67, 2, 0, True) and small.p_value == 0.5
    assert not judge_rerun(*reruns(40, [3, 2, 1])).noise
    # A 2-point mean drop inside heavy churn (10 lost, 8 gained per seed) is noise; the same mean without churn is not.
    assert judge_rerun(*reruns(100, [10, 10, 10], [8, 8, 8])).noise
    assert not judge_rerun(*reruns(100, [2, 2, 2] + [2, 2, 2])).noise


def test_an_item_passes_only_when_every_grader_scores_it():
    assert item_passed({"format": 1.0, "correctness": 2.0})
    assert not item_passed({"format": 1.0, "correctness": 0.0})
    assert not item_passed({"format": 0.0, "correctness": 2.0})
    assert not item_passed({})


# ---------------------------------------------------------------- issue 49: the baseline a new user meets
def field_task(path: Path, n: int = 6) -> Path:
    """A new user's own task (pull one field's value out of a JSON record), chat prompts, no tag asked for."""
    rows = [{"prompt": [{"role": "user", "content": f'Give the value of "city" in {{"city": "c{i}", "n": {i}}}.'}],
             "answer": f"c{i}"} for i in range(n)]
    write_jsonl(rows, path)
    return path


@pytest.mark.slow  # decodes
def test_a_default_grader_that_reads_a_tag_no_reply_holds_is_a_loud_warning(workspace, tiny_model):
    """Issue 49: the README's baseline line, no --graders, graded the user's own task with correctness_reward,
    which reads <answer>: a read-only 0/30 baseline and no word that no reply held the tag. The CLI now says so,
    first, in the result too, and names --graders; with the task's own grader given there is nothing to warn of."""
    goldens = field_task(workspace / "goldens.jsonl")
    proc = run_cli("evaluate-model", "tiny", "--goldens", str(goldens), "--max-new-tokens", "4", cwd=workspace)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("WARNING: correctness_reward paid nothing on all 6 goldens: no reply holds <answer>"), \
        proc.stdout
    assert "--graders" in first
    proc, data = run_cli_json("evaluate-model", "tiny", "--goldens", str(goldens), "--max-new-tokens", "4",
                              "--baseline", "never", cwd=workspace)
    assert data["passed"] == 0 and len(data["warnings"]) == 1 and "<answer>" in data["warnings"][0]
    plain = '[{"name": "correctness_reward", "params": {"tag": null}}]'  # the user's grader: reads no tag
    proc, data = run_cli_json("evaluate-model", "tiny", "--goldens", str(goldens), "--max-new-tokens", "4",
                              "--graders", plain, "--baseline", "never", cwd=workspace)
    # no grader warning; the 0/6 the model scores on its task is warned of as a start GRPO cannot learn from (walk 10)
    assert proc.returncode == 0 and not [w for w in data["warnings"] if "paid nothing" in w], data["warnings"]
    assert [w.split(":")[0] for w in data["warnings"]] == ["a greedy pass rate of 0/6"], data["warnings"]


def two_task_baselines(workspace: Path, small_task, old_graders: str, between=None) -> Path:
    """Baselines of tiny on two tasks, as a workspace keeps them: an old task (its goldens, `old_graders`) and this
    run's (small_task's goldens, correctness_reward), `between()` called after the first; returns the old task's
    goldens."""
    old = field_task(workspace / "old-goldens.jsonl")
    for goldens, graders in ((old, old_graders), (small_task[0], '[{"name": "correctness_reward"}]')):
        proc = run_cli("evaluate-model", "tiny", "--goldens", str(goldens), "--graders", graders,
                       "--max-new-tokens", "2", cwd=workspace)
        assert proc.returncode == 0 and "baseline written" in proc.stdout, proc.stdout + proc.stderr
        if between is not None and goldens == old:
            between()
    return old


@pytest.mark.slow  # decodes, and promotes in a fresh process as the user did
def test_promote_never_imports_the_reward_of_another_tasks_baseline(workspace, tiny_model, small_task):
    """Issue 49: with a leftover baseline of the same model from another task, whose reward module was moved since,
    promote-checkpoint failed importing that module instead of using the baseline of this run's rewards. It now
    chooses the baseline graded by the run's rewards (train/rewards.json), sets the other aside unread and says
    which it chose and why."""
    (workspace / "old_task_rewards.py").write_text(
        "def score(completions, **kwargs):\n    return [0.0 for _ in completions]\n")
    run = make_run(workspace, "field", tiny_model, tiny_model)

    def only_the_leftover():
        """The module moved and no baseline of this run's rewards yet: refused naming both, and --goldens."""
        (workspace / "attic").mkdir()
        (workspace / "old_task_rewards.py").rename(workspace / "attic" / "old_task_rewards.py")
        proc = run_cli("promote-checkpoint", str(run), cwd=workspace, process=True)
        assert proc.returncode == 2 and "is graded by old_task_rewards.score, which does not load now" in proc.stderr
        assert "this run's rewards are correctness_reward" in proc.stderr and "--goldens" in proc.stderr

    two_task_baselines(workspace, small_task, '[{"name": "old_task_rewards.score"}]', only_the_leftover)
    proc = run_cli("promote-checkpoint", str(run), cwd=workspace, process=True)
    assert "old_task_rewards" not in proc.stderr and proc.returncode == 1, proc.stdout + proc.stderr
    assert any(line.startswith("REJECT: ") for line in proc.stdout.splitlines())  # the base model: never better
    promotion = json.loads(next(run.rglob("promotion.json")).read_text())
    assert promotion["goldens_sha256"] == hashlib.sha256(small_task[0].read_bytes()).hexdigest()
    choice = promotion["baseline_choice"]
    assert choice.startswith(Path(promotion["baseline_path"]).name) and "correctness_reward" in choice
    assert "set aside" in choice and "old_task_rewards.score" in choice and "not this run's rewards" in choice


@pytest.mark.slow  # decodes
def test_several_baselines_are_named_by_the_model_the_user_gave(workspace, tiny_model, small_task):
    """Issue 49: "2 baselines of /root/.cache/llm-finetuning/smollm2-135m-... on different goldens": the run's
    config holds the cache path; the message names the model as the user gave it (model_ref.known_name)."""
    two_task_baselines(workspace, small_task, '[{"name": "correctness_reward"}]')
    run = make_run(workspace, "two", tiny_model, tiny_model)  # config: the tiny model's cache directory
    proc = run_cli("promote-checkpoint", str(run), cwd=workspace)
    assert proc.returncode == 2 and "2 baselines of tiny on different goldens" in proc.stderr, proc.stderr
    assert str(tiny_model) not in proc.stderr and "--goldens" in proc.stderr


@pytest.mark.slow  # decodes
def test_promote_prefers_the_baseline_at_the_runs_budget_and_says_when_it_has_none(workspace, tiny_model, small_task):
    """Issue 49: a baseline at evaluate_model's default budget (256) for a run that trains with 24 compares the
    checkpoint at a budget the run never trained with. Promote now takes the baseline at the run's
    max_completion_length when there is one, even measured later, and says when the one it uses is not."""
    goldens = str(small_task[0])
    run = make_run(workspace, "budget", tiny_model, tiny_model)  # trains with MAX_NEW tokens
    evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=goldens, max_new_tokens=MAX_NEW + 8))
    alone = promote_checkpoint(PromoteRequest(run=str(run)))
    assert f"decoded with up to {MAX_NEW + 8} tokens, the run trains with {MAX_NEW}" in alone.baseline_choice
    at_budget = evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=goldens, run=str(run)))
    assert at_budget.max_new_tokens == MAX_NEW and at_budget.baseline_written
    chosen = promote_checkpoint(PromoteRequest(run=str(run)))
    assert chosen.baseline_path == at_budget.baseline_path and "decoded with up to" not in chosen.baseline_choice


# Round 17 (its data-loss table): eval/baselines.jsonl as a hard link was refused, but as "unexpected
# TrainingInterpreterError: NotRegularFile" (exit 3), and the unrecorded baseline stayed, blocking the next one
# ("already exists; never overwritten"). Now a clear error naming the ledger (exit 2), the outside file untouched,
# no unrecorded baseline left.
@pytest.mark.parametrize("kind", ["hardlink", "symlink"])
def test_a_baseline_ledger_that_is_a_link_is_named_and_nothing_is_kept(workspace, tiny_model, small_task, kind,
                                                                      tmp_path):
    goldens, _ = small_task
    outside = tmp_path / "precious.txt"
    outside.write_text("precious\n")
    ledger = workspace / "eval" / "baselines.jsonl"
    ledger.parent.mkdir(parents=True, exist_ok=True)
    before = set(ledger.parent.iterdir())
    ledger.unlink(missing_ok=True)
    os.link(outside, ledger) if kind == "hardlink" else ledger.symlink_to(outside)
    try:
        proc = run_cli("evaluate-model", "tiny", "--goldens", str(goldens), "--max-new-tokens", "5", cwd=workspace)
    finally:
        ledger.unlink()
    assert proc.returncode == 2 and "baselines.jsonl" in proc.stderr, (proc.returncode, proc.stderr[-2000:])
    assert "unexpected" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert outside.read_text() == "precious\n"
    assert set(ledger.parent.iterdir()) - {ledger} <= before, set(ledger.parent.iterdir())
