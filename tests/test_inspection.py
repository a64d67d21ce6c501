"""The inspection gate: real sampling from the tiny model, real rewards on real samples, the verdict, and the
gate closing when the reward (its parameters or its code) or the samples change. Through the core API, the
CLI (--json) and MCP over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from conftest import call_mcp, run_cli, run_cli_json
from support import module_workspace, sign_samples
from mcp_server.errors import UserInputError
from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
from mcp_server.inspection.models import InspectRequest, SampleRequest, SampleVerdict, VerdictRequest
from mcp_server.inspection.pins import config_pins
from mcp_server.inspection.review import inspect_rewards
from mcp_server.inspection.sampling import sample_completions
from mcp_server.runs import Run
from mcp_server.workspace import atomic_write_json, atomic_write_text, new_run_dir

TASK_REWARDS = [{"name": "format_reward"}, {"name": "correctness_reward"}]

# A user reward named by dotted path (as `trl grpo --reward_funcs` takes them): pays for any non-empty text,
# so even the untrained tiny model has successes and the gate can open.
USER_REWARD_MODULE = '''
def nonempty_reward(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [{value} if t.strip() else 0.0 for t in texts]
'''


def _write_rewards(run_dir: Path, specs: list) -> None:
    atomic_write_json(run_dir / "train" / "rewards.json", specs)


def _configure(run_dir: Path, model, data: Path, **sampling) -> None:
    """train/config.yaml as a person (or emit_grpo_config) writes it: the model, the data file, sampling settings."""
    config = {"model_name_or_path": str(model),
              "datasets": [{"path": "json", "data_files": str(data), "split": "train"}], **sampling}
    atomic_write_text(run_dir / "train" / "config.yaml", yaml.safe_dump(config))


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def auto_engine() -> str:
    """engine='auto' as documented: vLLM when it is installed and a GPU is visible, else transformers."""
    import importlib.util

    import torch

    return "vllm" if importlib.util.find_spec("vllm") and torch.cuda.is_available() else "transformers"


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory, tiny_model):
    """A run with 64 real samples (16 chat prompts x 4) of the tiny model on the tiny task."""
    with module_workspace(tmp_path_factory, "ws"):
        run_dir = new_run_dir("chat")
        _write_rewards(run_dir, TASK_REWARDS)
        result = sample_completions(
            SampleRequest(run=str(run_dir), model="tiny", dataset="tiny", n=4, num_prompts=16, max_new_tokens=48)
        )
    return run_dir, result


# ---------------------------------------------------------------- sampling
def test_sampling_chat_prompts_stores_trl_shaped_samples(chat_run, tiny_model):
    from transformers import AutoTokenizer

    run_dir, result = chat_run
    assert (result.num_samples, result.num_prompts, result.n) == (64, 16, 4)
    assert result.conversational and result.engine == auto_engine()
    samples = _lines(run_dir / "inspection" / "samples.jsonl")
    assert len(samples) == 64
    assert [s["id"] for s in samples] == list(range(64))
    assert {(s["prompt_index"], s["sample_index"]) for s in samples} == {(p, k) for p in range(16) for k in range(4)}
    tok = AutoTokenizer.from_pretrained(tiny_model)
    for s in samples:
        assert s["prompt"][0]["role"] == "system" and s["prompt"][-1]["role"] == "user"
        # Completions are stored as TRL hands them to rewards in conversational data sets.
        assert s["completion"][0]["role"] == "assistant" and len(s["completion"]) == 1
        assert s["completion"][0]["content"] == tok.decode(s["completion_ids"], skip_special_tokens=True)
        assert {"answer", "question"} <= set(s["columns"]) and "prompt" not in s["columns"]
        assert s["truncated"] == (s["finish_reason"] == "length")
        if s["truncated"]:
            assert len(s["completion_ids"]) == 48
        else:
            assert s["completion_ids"][-1] == tok.eos_token_id
    # Different draws within a group (sampling, not greedy).
    assert len({json.dumps(s["completion"]) for s in samples if s["prompt_index"] == 0}) > 1
    assert result.truncated == sum(s["truncated"] for s in samples)


def test_sampling_defaults_come_from_the_emitted_config(workspace, tiny_model):
    """A run made by emit_grpo_config: model, data (a `datasets` entry), n and rewards come from the run."""
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    emitted = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_name="emitted"))
    # 64 prompts, enough for a base rate worth routing on (the default on a GPU; on a CPU it is 16, so sampling
    # there finishes in minutes: tests/test_sampling_plan.py)
    result = sample_completions(SampleRequest(run=emitted.run_dir, max_new_tokens=8, num_prompts=64,
                                              engine="transformers"))
    assert Path(result.model) == Path(tiny_model).resolve() and result.conversational
    # num_generations 8 from the config.
    assert (result.n, result.num_prompts, result.num_samples) == (8, 64, 512)
    # A shorter limit than the config's is exploration: named, and these samples cannot back a verdict.
    emitted_config = yaml.safe_load(Path(emitted.config_path).read_text())
    assert emitted_config["log_completions"] is True  # training's samples are read like the inspection's
    config_limit = emitted_config.get("max_completion_length", 512)
    assert result.differs_from_config == [f"max_new_tokens: 8 (the config: {config_limit})"]
    assert result.lengths["truncated_share"] > 0.01 and result.lengths["suggested_max_completion_length"] is None
    assert "max_new_tokens=16" in result.lengths["advice"]
    train_rows = _lines(Path(emitted.run_dir) / "data" / "train.jsonl")
    assert result.dataset_rows == len(train_rows)
    assert result.lengths["prompts_measured"] == len(train_rows)
    questions = {r["question"] for r in train_rows}
    assert all(s["columns"]["question"] in questions for s in _lines(result.samples_path))
    inspected = inspect_rewards(InspectRequest(run=emitted.run_dir))
    assert [s.name for s in inspected.rewards] == ["format_reward", "correctness_reward"]
    assert inspected.rewards_source == "train/rewards.json"
    # The sheet shows 96 samples (12 whole groups of 8); the base rate counts all 64 prompts, with its interval.
    assert inspected.num_samples == 96 and inspected.rate_prompts == 64
    assert inspected.base_success_rate == 0 and inspected.base_success_interval == (0.0, 0.0566)
    assert inspected.differs_from_config and "cannot back a verdict" in Path(inspected.review_md_path).read_text()
    assert "of 64 prompts (95% interval 0%-6%)" in Path(inspected.review_md_path).read_text()


@pytest.mark.slow
def test_sampling_is_reproducible_by_seed_from_a_parquet_file(workspace, tiny_model):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = workspace / "prompts.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": f"{a} + {a} =", "answer": str(2 * a)} for a in range(5)]), data)
    run_dir = new_run_dir("seeded")
    request = SampleRequest(
        run=run_dir.name, model=str(tiny_model), dataset=str(data), n=2, num_prompts=3, max_new_tokens=8
    )
    args = ["sample-completions", run_dir.name, "--model", str(tiny_model), "--dataset", str(data), "--n", "2",
            "--num-prompts", "3", "--max-new-tokens", "8"]
    cpu = {"CUDA_VISIBLE_DEVICES": ""}  # reproducible on one device: both samplings on the CPU, on any machine
    proc, first = run_cli_json(*args, env=cpu)
    assert proc.returncode == 0, proc.stderr
    assert not first["conversational"] and first["dataset_rows"] == 5 and first["num_samples"] == 6
    # Same samples again, sampled in "another" training interpreter (LLM_FINETUNING_PYTHON).
    other_python = workspace / "train-python"
    other_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    other_python.chmod(0o755)
    proc, second = run_cli_json(*args, env={**cpu, "LLM_FINETUNING_PYTHON": str(other_python)})
    assert proc.returncode == 0, proc.stderr
    assert second["samples_sha256"] == first["samples_sha256"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLM_FINETUNING_PYTHON", str(other_python))
        with pytest.raises(UserInputError) as err:  # the child's bad-input error comes back by field
            sample_completions(request.model_copy(update={"prompt_column": "question"}))
        assert err.value.field == "prompt_column"
    proc, third = run_cli_json(*args, "--seed", "1", env=cpu)
    assert proc.returncode == 0, proc.stderr
    assert third["samples_sha256"] != first["samples_sha256"]


def test_sampling_bad_input_names_the_field(workspace, tiny_model):
    run_dir = new_run_dir("bad")
    data = workspace / "d.jsonl"
    data.write_text(json.dumps({"question": "1+1", "answer": "2"}) + "\n")
    with pytest.raises(UserInputError) as err:
        sample_completions(SampleRequest(run=str(run_dir), model="tiny", dataset=str(data)))
    assert err.value.field == "prompt_column" and "question" in str(err.value)
    with pytest.raises(UserInputError) as err:
        sample_completions(SampleRequest(run=str(run_dir), model="tiny", dataset="some-org/not-local"))
    assert err.value.field == "dataset"
    with pytest.raises(UserInputError) as err:  # no config.yaml to take the model from
        sample_completions(SampleRequest(run=str(run_dir), dataset="tiny"))
    assert err.value.field == "model"
    with pytest.raises(UserInputError) as err:
        sample_completions(SampleRequest(run="no-such-run", model="tiny", dataset="tiny"))
    assert err.value.field == "run"


# ---------------------------------------------------------------- inspection of real samples
def test_inspect_real_chat_samples_routes_untrained_model_to_sft(chat_run):
    run_dir, _ = chat_run
    result = inspect_rewards(InspectRequest(run=str(run_dir)))
    assert result.num_samples == 64 and result.num_prompts == 16 and result.samples_per_prompt == 4
    assert result.rewards_source == "train/rewards.json"
    assert [d.name for d in result.distributions] == ["format_reward", "correctness_reward", "total"]
    # The untrained tiny model writes noise: nothing is well-formed, no prompt is ever solved.
    assert result.malformed == 64 and result.well_formed_but_wrong == 0
    assert result.base_success_rate == 0.0 and not result.grpo_can_learn and result.route == "sft_first"
    assert result.zero_variance_groups == 16
    assert "SFT" in result.next_step
    # 16 prompts of a larger data set (a CPU's default): the route says it rests on few (walk 10)
    assert "rests on only 16 prompts" in result.next_step and "--num-prompts 64" in result.next_step

    rows = _lines(result.review_jsonl_path)
    assert len(rows) == 64 and set(rows[0]["scores"]) == {"format_reward", "correctness_reward"}
    sheet = Path(result.review_md_path).read_text()
    assert "## Summary" in sheet and "Sample 63" in sheet and "What is" in sheet
    assert "| format_reward | correctness_reward | total |" in sheet

    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "cannot learn" in gate.reason and "SFT" in gate.how_to_clear
    with pytest.raises(UserInputError) as err:
        record_inspection_verdict(
            VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True)
        )
    assert err.value.field == "verdict"


def _write_samples(run_dir: Path, completions: list[list[str]], answers: list[str], dataset_rows: int, truncated=()):
    """samples.jsonl as sample_completions writes it, with chosen completions (to test the heuristics)."""
    lines, sid = [], 0
    for p, (group, answer) in enumerate(zip(completions, answers)):
        for k, text in enumerate(group):
            lines.append(
                {
                    "id": sid, "prompt_index": p, "sample_index": k, "row_index": p,
                    "prompt": f"What is {answer}?", "completion": text, "completion_ids": [],
                    "columns": {"answer": answer}, "truncated": sid in truncated,
                    "finish_reason": "length" if sid in truncated else "stop",
                }
            )
            sid += 1
    (run_dir / "inspection").mkdir(parents=True, exist_ok=True)
    (run_dir / "inspection" / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    n = len(completions[0])
    meta = {"dataset_rows": dataset_rows, "num_prompts": len(completions), "n": n}
    if (run_dir / "train" / "config.yaml").is_file():  # drawn as training would draw them, from this config
        meta.update(differs_from_config=[], config_pins=config_pins(Run(run_dir)))
    sign_samples(run_dir, meta)  # as sample_completions signs what it wrote


def _configured_run(name: str, tiny_model, workspace: Path, rows: int = 13) -> Path:
    """A run whose config names the tiny model and a data file of `rows` prompts, with format + correctness."""
    run_dir = new_run_dir(name)
    data = run_dir / "data" / "train.jsonl"  # inside the run, as emit_grpo_config writes the tiny task
    data.parent.mkdir(parents=True)
    data.write_text("".join(json.dumps({"prompt": f"Q{i}", "answer": "2"}) + "\n" for i in range(rows)))
    _configure(run_dir, tiny_model, data, num_generations=4)
    _write_rewards(run_dir, TASK_REWARDS)
    return run_dir


def test_summary_counts_and_likely_misscored_samples(workspace):
    run_dir = new_run_dir("heuristics")
    _write_rewards(run_dir, TASK_REWARDS)
    right = "<reasoning>3 + 4 = 7</reasoning><answer>7</answer>"
    wrong = "<reasoning>3 + 4 = 8</reasoning><answer>8</answer>"
    wordy = "<reasoning>3 + 4 = 7</reasoning><answer>The answer is 7</answer>"  # right, but exact match says 0
    groups = [[right, wrong, "7", "noise"]] + [[wrong, wrong, wrong, wrong]] * 11 + [[right, wordy, right, right]]
    _write_samples(run_dir, groups, ["7"] * 13, dataset_rows=100, truncated={0})
    result = inspect_rewards(InspectRequest(run=str(run_dir), max_suspects=2))

    assert result.num_samples == 52 and result.num_prompts == 13
    assert result.malformed == 2  # "7" and "noise"
    assert result.well_formed_but_wrong == 1 + 44 + 1  # wrong in group 0, groups 1-11, the wordy one
    assert result.truncated == 1
    assert result.zero_variance_groups == 11  # the all-wrong groups
    assert result.base_success_rate == pytest.approx(2 / 13) and result.grpo_can_learn
    total = result.distributions[-1]
    assert total.histogram == {"0": 2, "1": 46, "3": 4}
    assert list(total.histogram) == ["0", "1", "3"]
    # Read first: the wordy right answer (its <answer> block says 7 once the wording is peeled off, scored 0),
    # then a full score on a truncated completion. The bare "7" has no answer block: 0 is the reward's rule.
    first, second = result.likely_misscored
    assert first.id == 49 and "'The answer is 7' matches the gold '7'" in first.reasons[0]
    assert second.id == 0 and any("cut off" in r for r in second.reasons)
    rows = {r["id"]: r for r in _lines(result.review_jsonl_path)}
    assert rows[2]["suspect_reasons"] == []
    assert rows[1]["suspect_reasons"] == [] and rows[1]["well_formed"] and not rows[1]["success"]
    assert (
        "Sample 49 (prompt 12): correctness_reward scored 0 but the <answer> block"
        in Path(result.review_md_path).read_text()
    )


def test_completions_holding_unicode_line_separators_are_read_whole(workspace):
    """sample_completions writes samples.jsonl with ensure_ascii=False; a sampled completion holding U+2028 or U+0085
    (the tiny model at temperature 1 writes both) is one line of it, not two."""
    run_dir = new_run_dir("separators")
    _write_rewards(run_dir, TASK_REWARDS)
    odd = "<reasoning>3 + 4\u2028= 7\x85</reasoning><answer>7</answer>"
    _write_samples(run_dir, [[odd] * 4] * 13, ["7"] * 13, dataset_rows=13)
    samples = run_dir / "inspection" / "samples.jsonl"
    lines = [json.loads(x) for x in samples.read_text().split("\n") if x]
    samples.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    sign_samples(run_dir, json.loads((run_dir / "inspection" / "samples.meta.json").read_text()))  # written raw
    result = inspect_rewards(InspectRequest(run=str(run_dir)))
    assert result.num_samples == 52 and result.base_success_rate == 1.0


def test_fewer_than_50_samples_is_an_error_unless_the_data_has_fewer(workspace):
    run_dir = new_run_dir("few")
    _write_rewards(run_dir, TASK_REWARDS)
    right = "<reasoning>x</reasoning><answer>2</answer>"
    _write_samples(run_dir, [[right] * 4] * 10, ["2"] * 10, dataset_rows=100)
    with pytest.raises(UserInputError) as err:
        inspect_rewards(InspectRequest(run=str(run_dir)))
    assert err.value.field == "run" and "num_prompts >= 13" in str(err.value)
    _write_samples(run_dir, [[right] * 4] * 10, ["2"] * 10, dataset_rows=10)  # the whole data set
    result = inspect_rewards(InspectRequest(run=str(run_dir)))
    assert result.num_samples == 40 and any("only 10 prompts" in w for w in result.warnings)


# ---------------------------------------------------------------- verdict and gate, plain-text completions
@pytest.fixture()
def user_reward(tmp_path, monkeypatch):
    """A dotted-path reward module on sys.path (and PYTHONPATH for child processes)."""
    pkg = tmp_path / "userrewards"
    pkg.mkdir()
    module = pkg / "h6_user_rewards.py"
    module.write_text(USER_REWARD_MODULE.format(value="1.0"))
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(pkg), os.environ.get("PYTHONPATH")])))
    return module


def test_gate_opens_on_a_current_pass_and_closes_when_reward_or_samples_change(workspace, tiny_model, user_reward):
    data = workspace / "plain.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"Q: {a} + 1 = ? A:", "answer": str(a + 1)}) + "\n" for a in range(30))
    )
    run_dir = new_run_dir("plain")
    _configure(run_dir, tiny_model, data, num_generations=4, max_completion_length=12)
    specs = [{"name": "h6_user_rewards.nonempty_reward"}, {"name": "h6_user_rewards.nonempty_reward", "weight": 0.5}]
    _write_rewards(run_dir, specs)

    # Plain-text prompts give plain-string completions; model, data, n and length come from the config.
    sampled = sample_completions(SampleRequest(run=str(run_dir), num_prompts=16, engine="transformers"))
    assert sampled.num_samples == 64 and not sampled.conversational and sampled.differs_from_config == []
    samples = _lines(sampled.samples_path)
    assert all(isinstance(s["completion"], str) and isinstance(s["prompt"], str) for s in samples)

    assert not check_inspection_gate(run_dir).passed  # sampled, not reviewed
    proc, inspected = run_cli_json("inspect-rewards", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    assert inspected["route"] == "review" and inspected["base_success_rate"] > 0
    assert inspected["success_rule"].startswith("total reward > 0")
    # Walk 9: the rule is worded from what is configured: a person's reward is of unknown role, not "no task reward".
    rule = "the rule for rewards of unknown role: h6_user_rewards.nonempty_reward is your own reward"
    assert rule in inspected["success_rule"] and "no task reward" not in inspected["success_rule"], inspected
    assert rule in Path(inspected["review_md_path"]).read_text()
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "no verdict" in gate.reason

    # A pass must cover every reviewed sample; a kept disagreement needs a note.
    with pytest.raises(UserInputError) as err:
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana"))
    assert err.value.field == "sample_verdicts"
    with pytest.raises(UserInputError) as err:
        record_inspection_verdict(
            VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True,
                           sample_verdicts=[SampleVerdict(id=5, agree=False)])
        )
    assert err.value.field == "note"
    with pytest.raises(UserInputError) as err:
        record_inspection_verdict(
            VerdictRequest(
                run=str(run_dir), verdict="pass", reviewer="ana", sample_verdicts=[SampleVerdict(id=999, agree=True)]
            )
        )
    assert err.value.field == "sample_verdicts[0].id"

    proc, recorded = run_cli_json(
        "record-inspection-verdict", str(run_dir), "--verdict", "pass", "--reviewer", "ana",
        "--disagree", "5", "--agree-rest", "--note", "sample 5 is borderline, acceptable",
    )
    assert proc.returncode == 0, proc.stderr
    assert recorded["gate"]["passed"] and (recorded["agree"], recorded["disagree"], recorded["reviewed"]) == (63, 1, 64)
    verdict = json.loads((run_dir / "inspection" / "verdict.json").read_text())
    assert verdict["reviewer"] == "ana" and len(verdict["reward_code_sha256"]) == 64
    assert {"id": 5, "agree": False, "note": ""} in verdict["sample_verdicts"]
    proc, gate_json = run_cli_json("check-inspection-gate", str(run_dir))
    assert proc.returncode == 0 and gate_json["passed"] and gate_json["how_to_clear"] == ""

    # A changed weight in rewards.json closes the gate; putting it back reopens it.
    _write_rewards(run_dir, [specs[0], {**specs[1], "weight": 0.25}])
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "reward changed" in gate.reason and "inspect_rewards" in gate.how_to_clear
    proc, gate_json = run_cli_json("check-inspection-gate", str(run_dir))
    assert proc.returncode == 1 and not gate_json["passed"]
    _write_rewards(run_dir, specs)
    assert check_inspection_gate(run_dir).passed

    # A changed line of reward code closes it too (the file on disk is what training will import).
    user_reward.write_text(USER_REWARD_MODULE.format(value="0.25"))
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "reward changed" in gate.reason
    with pytest.raises(UserInputError):  # the review is stale as well: no verdict on it
        record_inspection_verdict(
            VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True)
        )

    # Re-inspect (plain completions again) and sign off: open again.
    result = inspect_rewards(InspectRequest(run=str(run_dir)))
    assert result.grpo_can_learn
    recorded = record_inspection_verdict(
        VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ben", agree_with_rest=True)
    )
    assert recorded.gate.passed

    # A failing verdict keeps it closed.
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="fail", reviewer="ben", note="pays for noise"))
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "'fail'" in gate.reason

    # New samples void the verdict.
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ben", agree_with_rest=True))
    assert check_inspection_gate(run_dir).passed
    sample_completions(SampleRequest(run=str(run_dir), num_prompts=16, seed=7, engine="transformers"))
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "samples.jsonl changed" in gate.reason


def test_explicit_rewards_are_not_the_runs_rewards(workspace, tiny_model):
    run_dir = _configured_run("explicit", tiny_model, workspace)
    right = "<reasoning>1 + 1 = 2</reasoning><answer>2</answer>"
    _write_samples(run_dir, [[right, "x", right, "y"]] * 13, ["2"] * 13, dataset_rows=13)
    result = inspect_rewards(InspectRequest(run=str(run_dir), rewards=[{"name": "correctness_reward"}]))
    assert result.rewards_source == "request" and result.grpo_can_learn
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "reward changed" in gate.reason
    # Inspected with the run's own rewards, the same kind of sign-off opens it.
    inspect_rewards(InspectRequest(run=str(run_dir)))
    assert record_inspection_verdict(
        VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True)
    ).gate.passed
    # Moved (renamed) with its data inside, the run keeps what its verdict pinned.
    moved = run_dir.rename(run_dir.with_name(run_dir.name + "-moved"))
    (moved / "train" / "config.yaml").write_text(
        (moved / "train" / "config.yaml").read_text().replace(str(run_dir), str(moved)))
    assert check_inspection_gate(moved).passed, check_inspection_gate(moved).reason


# ---------------------------------------------------------------- the doors: CLI errors and MCP over stdio
def test_cli_bad_input_exits_2(workspace):
    proc = run_cli("check-inspection-gate", "no-such-run", "--json")
    assert proc.returncode == 2 and "run:" in proc.stderr and "Traceback" not in proc.stderr
    run_dir = new_run_dir("cli-bad")
    proc = run_cli("record-inspection-verdict", str(run_dir), "--verdict", "pass", "--reviewer", "x", "--agree", "a-b")
    assert proc.returncode == 2 and "--agree" in proc.stderr
    proc = run_cli("inspect-rewards", str(run_dir))
    assert proc.returncode == 2 and "sample_completions" in proc.stderr


@pytest.mark.slow
def test_mcp_tools_over_stdio(workspace, tiny_model):
    run_dir = _configured_run("mcp", tiny_model, workspace, rows=50)
    right = "<reasoning>1 + 1 = 2</reasoning><answer>2</answer>"
    _write_samples(run_dir, [[right, "x", "y", "z"]] * 13, ["2"] * 13, dataset_rows=50)

    async def calls(client):
        tools = {t.name for t in (await client.list_tools()).tools}
        gate_before = await client.call_tool("check_inspection_gate", {"run": str(run_dir)})
        inspected = await client.call_tool("inspect_rewards", {"run": str(run_dir)})
        recorded = await client.call_tool(
            "record_inspection_verdict",
            {"run": str(run_dir), "verdict": "pass", "reviewer": "ana", "agree_with_rest": True},
        )
        return tools, gate_before, inspected, recorded

    tools, gate_before, inspected, recorded = asyncio.run(call_mcp(calls))
    assert {"sample_completions", "inspect_rewards", "record_inspection_verdict", "check_inspection_gate"} <= tools
    assert gate_before.structured_content["passed"] is False
    assert inspected.structured_content["num_samples"] == 52
    assert inspected.structured_content["base_success_rate"] == 1.0
    assert recorded.structured_content["gate"]["passed"] is True
    assert check_inspection_gate(run_dir).passed


def test_a_sampling_setting_declared_in_config_fields_is_read_compared_and_passed(monkeypatch):
    """Issue 46: sampling reads its settings as a query on config.fields' sampling group, so a sampling setting TRL
    introduces is declared there alone. Here cache_implementation (a GRPOConfig field transformers' generate takes
    by that name) is put in the group and in ENGINES, as if TRL had just added it: sampling reads the config's value,
    compares it with the run's and hands it to generate, with no edit to inspection/sampling.py."""
    import importlib

    from mcp_server.config import fields
    from mcp_server.inspection import sampling

    declared = fields.fields_in
    monkeypatch.setattr(fields, "fields_in",
                        lambda group: declared(group) + (("cache_implementation",) if group == "sampling" else ()))
    monkeypatch.setitem(fields.ENGINES, "cache_implementation",
                        fields.Engines(None, "cache_implementation", sampler=False))
    try:
        added = importlib.reload(sampling)
        settings = added._generation_settings(SampleRequest(run="r"), {"cache_implementation": "static"})
        assert settings["cache_implementation"] == "static" and "cache_implementation" in added.COMPARED
        greedy = added.engine_options({**settings, "temperature": 0.0}, "transformers", sampling=False)
        assert greedy["cache_implementation"] == "static" and "temperature" not in greedy
        assert "cache_implementation" not in added.engine_options(settings, "vllm")  # vLLM takes no such name
    finally:
        monkeypatch.undo()
        importlib.reload(sampling)
