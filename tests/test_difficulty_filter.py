"""The difficulty filter before training (issue 47) through the core API: a sampling pass over the whole data set,
inspect_rewards with difficulty_filter drops exactly the prompts the samples show always or never solved (by
construction: a reward that decides each prompt's difficulty from its gold answer), writes the kept rows into the
run and points train/config.yaml at them; the samples drawn before cannot back a verdict; after sampling the filtered
data again, the verdict pins the filtered file like any input, so editing it closes the gate and makes the trainer
refuse at the point of use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from support import TINY_OVERRIDES, emit_run, trainer_or_refusal

DIFFICULTY_REWARDS = [{"name": "fixture_rewards.difficulty_reward", "params": {}, "weight": 1.0}]


@pytest.fixture()
def ws(tmp_path, monkeypatch, tiny_model):
    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return tmp_path


def difficulty_data(workspace: Path) -> tuple[Path, list[dict]]:
    """14 tiny-task rows: 4 always solved (answer 0 mod 3), 4 never (1 mod 3), 6 sometimes (2 mod 3), interleaved."""
    from mcp_server.tiny import split_task

    rows, _ = split_task()
    by_kind = {k: iter([r for r in rows if int(r["answer"]) % 3 == k]) for k in (0, 1, 2)}
    chosen = [next(by_kind[k]) for k in (2, 0, 1) * 4 + (2, 2)]
    path = workspace / "difficulty.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    return path, chosen


def test_whole_dataset_and_num_prompts_together_are_refused_naming_the_field(ws):
    from mcp_server.errors import UserInputError
    from mcp_server.inspection.models import SampleRequest
    from mcp_server.inspection.sampling import sample_completions

    with pytest.raises(UserInputError) as refused:
        sample_completions(SampleRequest(run=str(ws), whole_dataset=True, num_prompts=3))
    assert refused.value.field == "whole_dataset"


@pytest.mark.slow
def test_the_filter_drops_always_and_never_solved_prompts_and_the_verdict_pins_what_is_left(ws, capsys):
    from mcp_server.errors import UserInputError
    from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
    from mcp_server.inspection.models import InspectRequest, SampleRequest, VerdictRequest
    from mcp_server.inspection.review import inspect_rewards
    from mcp_server.inspection.sampling import sample_completions

    data, rows = difficulty_data(ws)
    run_dir = emit_run("filtered", dataset=str(data), rewards=DIFFICULTY_REWARDS, base=TINY_OVERRIDES)
    config_before = yaml.safe_load((run_dir / "train" / "config.yaml").read_text())

    sampled = sample_completions(SampleRequest(run=str(run_dir), whole_dataset=True, engine="transformers"))
    assert sampled.num_prompts == len(rows) == 14 and sampled.plan["num_prompts"] == 14
    result = inspect_rewards(InspectRequest(run=str(run_dir), difficulty_filter={}))
    applied = result.difficulty_filter
    assert (applied.always_solved, applied.never_solved, applied.dropped, applied.rows_after) == (4, 4, 8, 6)
    assert applied.applied_now and applied.judged == 14 and applied.unjudged == 0
    kept = [json.loads(line) for line in (run_dir / "data" / "filtered.jsonl").read_text().splitlines()]
    assert kept == [r for r in rows if int(r["answer"]) % 3 == 2]  # the rows themselves, in order
    config = yaml.safe_load((run_dir / "train" / "config.yaml").read_text())
    assert config["datasets"] == [{"path": "json", "data_files": "data/filtered.jsonl", "split": "train"}]
    assert {k: v for k, v in config.items() if k != "datasets"} == {
        k: v for k, v in config_before.items() if k != "datasets"}
    sheet = (run_dir / "inspection" / "review.md").read_text()
    assert "Difficulty filter (applied by this review): 8 of 14 prompts" in sheet
    assert "sample_completions" in result.next_step
    # the samples came from the unfiltered data: no verdict on them
    with pytest.raises(UserInputError, match="changed since the samples were drawn"):
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="t", agree_with_rest=True))

    sample_completions(SampleRequest(run=str(run_dir), whole_dataset=True, engine="transformers"))
    again = inspect_rewards(InspectRequest(run=str(run_dir)))
    assert again.difficulty_filter.dropped == 8 and not again.difficulty_filter.applied_now
    assert again.zero_variance_groups == 0  # every prompt left has spread
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="t", agree_with_rest=True))
    assert check_inspection_gate(run_dir).passed

    # the filtered file is pinned like any input: edited after the verdict, the gate closes and the trainer refuses
    filtered = run_dir / "data" / "filtered.jsonl"
    filtered.write_text("".join(filtered.read_text().splitlines(keepends=True)[:-1]))
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and any("data set" in line for line in gate.changed), gate
    trainer, refusal = trainer_or_refusal(run_dir, capsys)
    assert trainer is None and "rows: 5 (reviewed: 6)" in refusal, refusal


def right(gold: str) -> str:
    return f"<reasoning>adding</reasoning>\n<answer>{gold}</answer>"


@pytest.fixture()
def judged_run(ws, tiny_model):
    """A hand-made run (format + correctness) whose samples make 4 prompts always solved, 4 never, 6 sometimes."""
    from support import hand_made_run

    golds = [str(10 + i) for i in range(14)]
    kinds = ["always"] * 4 + ["never"] * 4 + ["sometimes"] * 6
    groups = [[right(g)] * 4 if k == "always" else [right("0")] * 4 if k == "never" else [right(g), right("0")] * 2
              for g, k in zip(golds, kinds)]
    return hand_made_run(ws, tiny_model, "judged", groups, golds), kinds


def test_keep_share_down_weights_instead_of_dropping(judged_run):
    from mcp_server.inspection.models import InspectRequest
    from mcp_server.inspection.review import inspect_rewards

    run_dir, kinds = judged_run
    applied = inspect_rewards(InspectRequest(run=str(run_dir), difficulty_filter={"keep_share": 0.5})).difficulty_filter
    assert (applied.always_solved, applied.never_solved, applied.kept_by_share, applied.dropped) == (4, 4, 4, 4)
    kept = [json.loads(line)["answer"] for line in (run_dir / "data" / "filtered.jsonl").read_text().splitlines()]
    assert len(kept) == applied.rows_after == 10
    kept_kinds = [kinds[int(answer) - 10] for answer in kept]
    assert kept_kinds.count("always") == 2 and kept_kinds.count("never") == 2 and kept_kinds.count("sometimes") == 6
    record = json.loads((run_dir / "data" / "difficulty-filter.json").read_text())
    assert sorted(d["solved"] for d in record["dropped"]) == [0, 0, 4, 4]  # the dropped prompts' own counts


@pytest.mark.parametrize("case, message", [
    ("launched", "was launched"),
    ("hub data", "needs the run's data as one local file"),
    ("too few samples judged", None),  # min_samples above the group size: nothing is judged, nothing written
])
def test_what_the_filter_refuses_leaves_the_run_as_it_was(judged_run, case, message):
    from mcp_server.errors import UserInputError
    from mcp_server.inspection.models import InspectRequest
    from mcp_server.inspection.review import inspect_rewards

    run_dir, _ = judged_run
    config_path = run_dir / "train" / "config.yaml"
    rule = {"min_samples": 5} if case == "too few samples judged" else {}
    if case == "launched":
        (run_dir / "run.json").write_text("{}")
    if case == "hub data":
        config = yaml.safe_load(config_path.read_text())
        config_path.write_text(yaml.safe_dump({**config, "dataset_name": "owner/data"}))
    before = config_path.read_text()
    if message:
        with pytest.raises(UserInputError, match=message) as refused:
            inspect_rewards(InspectRequest(run=str(run_dir), difficulty_filter=rule))
        # a launched run's review is never rewritten, filter or not (inspection.launched): refused on the run
        assert refused.value.field == ("run" if case == "launched" else "difficulty_filter")
        assert not (run_dir / "inspection" / "review.json").exists()
    else:
        applied = inspect_rewards(InspectRequest(run=str(run_dir), difficulty_filter=rule)).difficulty_filter
        assert (applied.judged, applied.dropped, applied.unjudged) == (0, 0, 14)
    assert config_path.read_text() == before and not (run_dir / "data").exists()


@pytest.mark.parametrize("planted", ["filtered.jsonl", "difficulty-filter.json"])
def test_the_filter_never_writes_over_a_persons_own_files_in_the_run(judged_run, planted):
    """Round 15, D1: a run emitted into a person's folder that holds their own data/filtered.jsonl (their data set)
    or data/difficulty-filter.json: inspect-rewards --difficulty-filter refuses, naming the file, and writes
    nothing; moved aside, the filter writes its own files."""
    from conftest import run_cli

    run_dir, _ = judged_run
    config_path, own = run_dir / "train" / "config.yaml", run_dir / "data" / planted
    own.parent.mkdir()
    own.write_text('{"mine": "the person\'s own file"}\n')
    before = config_path.read_text()
    proc = run_cli("inspect-rewards", str(run_dir), "--difficulty-filter", "{}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"difficulty_filter: inspect_rewards' difficulty filter would overwrite {own} (not a file" in proc.stderr
    assert own.read_text() == '{"mine": "the person\'s own file"}\n' and config_path.read_text() == before
    assert sorted(p.name for p in own.parent.iterdir()) == [planted]
    own.rename(run_dir / f"mine-{planted}")
    assert run_cli("inspect-rewards", str(run_dir), "--difficulty-filter", "{}").returncode == 0
    assert len((run_dir / "data" / "filtered.jsonl").read_text().splitlines()) == 6
