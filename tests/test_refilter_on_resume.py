"""resume_training's refilter (issue 47): a run re-filters its data from what its own logged completions show.

TRL's GRPOTrainer, with log_completions on, writes each logged generation batch to
<output_dir>/completions/completions_<step>.parquet (prompt, completion, one column per reward, advantage). Here
those tables are written by construction, as TRL writes them, for a run that passed its inspection gate: the rows
whose logged completions were all solved or none solved are dropped into data/refilter-1/kept.jsonl by the difficulty
filter's rule, the config trains on it, the verdict records it as its data (the gate stays open and the trainer's
point-of-use check accepts it), and an edit of the new file is still refused. A run that logged nothing, or a rule
that would drop every prompt, is refused with nothing written. The core of the option (inspection.refilter) is
called directly: resume_training calls it after its own refusals, before the gates (training/launch.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import TINY_OVERRIDES, emit_run, pass_inspection, trainer_or_refusal

DIFFICULTY_REWARDS = [{"name": "fixture_rewards.difficulty_reward", "params": {}, "weight": 1.0}]

pytestmark = pytest.mark.slow  # samples the tiny model for the verdict and builds the trainer


@pytest.fixture()
def ws(tmp_path, monkeypatch, tiny_model):
    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return tmp_path


def ten_rows(workspace: Path) -> list[dict]:
    from mcp_server.tiny import split_task

    rows = split_task()[0][:10]
    (workspace / "ten.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def reward_name() -> str:
    """The column TRL logs the run's reward under (GRPOTrainer.reward_func_names)."""
    from trl.trainer.utils import get_callable_name

    from mcp_server.rewards import build_reward_funcs
    from mcp_server.rewards.spec import RewardSpec

    return get_callable_name(build_reward_funcs([RewardSpec.model_validate(DIFFICULTY_REWARDS[0])])[0])


def log_table(run_dir: Path, step: int, groups: list[tuple[object, list[float]]]) -> None:
    """completions_<step>.parquet as GRPOTrainer.log writes it: one row per completion."""
    import pandas as pd

    folder = run_dir / "checkpoints" / "completions"
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"step": step, "prompt": prompt, "completion": f"c{k}", reward_name(): score, "advantage": 0.0}
            for prompt, scores in groups for k, score in enumerate(scores)]
    pd.DataFrame(rows).to_parquet(folder / f"completions_{step:05d}.parquet")


def snapshot(run_dir: Path) -> dict:
    return {p: p.read_bytes() for p in (run_dir / "train" / "config.yaml", run_dir / "inspection" / "verdict.json")}


def test_refilter_drops_what_the_logged_completions_show_always_or_never_solved(ws, capsys):
    from mcp_server.inspection.difficulty import rule_text
    from mcp_server.inspection.gate import check_inspection_gate
    from mcp_server.inspection.models import DifficultyFilter
    from mcp_server.inspection.refilter import refilter_run

    rows = ten_rows(ws)
    run_dir = emit_run("refiltered", dataset=str(ws / "ten.jsonl"), rewards=DIFFICULTY_REWARDS, base=TINY_OVERRIDES)
    pass_inspection(run_dir)
    before = snapshot(run_dir)
    p = [r["prompt"] for r in rows]
    # step 1: rows 0, 1 always solved, 2 never, 3 sometimes; a prompt that is no row of the data is left out
    log_table(run_dir, 1, [(p[0], [1, 1, 1, 1]), (p[1], [1, 1, 1, 1]), (p[2], [0, 0, 0, 0]), (p[3], [1, 0, 1, 0]),
                           ([{"role": "user", "content": "not in the data"}], [1, 1, 1, 1])])
    # step 2: row 1 solved once more (2 of 6 now: sometimes), row 4 solved twice (too few to judge)
    log_table(run_dir, 2, [(p[1], [0, 0]), (p[4], [1, 1])])
    # step 3: the same generation batch logged again (TRL's deques are not cleared): counted once, so row 4 stays
    # under min_samples instead of reading as 4 of 4
    log_table(run_dir, 3, [(p[1], [0, 0]), (p[4], [1, 1])])

    done = refilter_run(str(run_dir), {})
    result = done["result"]
    assert (result["always_solved"], result["never_solved"], result["dropped"], result["rows_after"]) == (1, 1, 2, 8)
    assert result["judged"] == 4 and result["unjudged"] == 6 and done["unmatched_completions"] == 4
    assert done["logged_files"] == ["completions_00001.parquet", "completions_00002.parquet"]
    kept = [json.loads(line) for line in (run_dir / "data" / "refilter-1" / "kept.jsonl").read_text().splitlines()]
    assert kept == [r for i, r in enumerate(rows) if i not in (0, 2)]
    record = json.loads((run_dir / "data" / "refilter-1" / "record.json").read_text())
    assert [(d["row"], d["samples"], d["solved"]) for d in record["dropped"]] == [(0, 4, 4), (2, 4, 0)]
    assert record["result"]["rule"] == rule_text(DifficultyFilter())  # the difficulty filter's own rule
    config = (run_dir / "train" / "config.yaml").read_text()
    assert "data_files: data/refilter-1/kept.jsonl" in config and "# the re-filter's prompts: 8 of the 10" in config

    # the re-filtered data is the verdict's data now: the gate stays open and the trainer accepts it
    assert check_inspection_gate(run_dir).passed, check_inspection_gate(run_dir)
    trainer, refusal = trainer_or_refusal(run_dir, capsys)
    assert refusal is None and len(trainer.train_dataset) == 8, refusal
    # and any other edit is refused as before: the new file changed after the re-filter
    refiltered = run_dir / "data" / "refilter-1" / "kept.jsonl"
    refiltered.write_text("".join(refiltered.read_text().splitlines(keepends=True)[:-1]))
    assert not check_inspection_gate(run_dir).passed
    trainer, refusal = trainer_or_refusal(run_dir, capsys)
    assert trainer is None and "rows: 7 (reviewed: 8)" in refusal, refusal
    assert snapshot(run_dir) != before


@pytest.mark.parametrize("case, message", [
    ("nothing logged", "logged no completions"),
    ("every prompt always solved", "would drop every prompt"),
])
def test_what_refilter_refuses_writes_nothing(ws, case, message):
    from mcp_server.errors import UserInputError
    from mcp_server.inspection.refilter import refilter_run

    rows = ten_rows(ws)
    run_dir = emit_run("refused", dataset=str(ws / "ten.jsonl"), rewards=DIFFICULTY_REWARDS, base=TINY_OVERRIDES)
    pass_inspection(run_dir)
    if case == "every prompt always solved":
        log_table(run_dir, 1, [(r["prompt"], [1, 1, 1, 1]) for r in rows])
    before = snapshot(run_dir)
    with pytest.raises(UserInputError, match=message) as refused:
        refilter_run(str(run_dir), {})
    assert refused.value.field == "refilter"
    assert snapshot(run_dir) == before and not list((run_dir / "data").glob("refilter*"))


def launched_and_failed(run_dir: Path) -> None:
    """What a launch that crashed after its first checkpoint leaves (run.json, checkpoint-1 and its save record,
    exit code 1): a failed run resume_training continues."""
    import hashlib
    import time

    from mcp_server.runs import Run
    from mcp_server.training.trainer.digest import record_save
    from support import record_launch

    run = Run(run_dir)
    gone = 2**31 - 2  # a pid no process has: the launcher died
    run.logs.mkdir(parents=True, exist_ok=True)
    run.run_json.write_text(json.dumps({
        "state": "starting", "pid": gone, "pgid": gone, "create_time": time.time() - 60, "started_ts": time.time() - 60,
        "cwd": str(run_dir), "launcher": ["bash", "train/launch.sh"], "strategy": "single", "num_processes": 1,
        "config_sha256": hashlib.sha256(run.config.read_bytes()).hexdigest(), "launch_id": "a" * 32}))
    record_launch(run_dir, "a" * 32)  # as launch_training recorded it: the launch is this run's, not an earlier one's
    folder = run.checkpoints / "checkpoint-1"
    folder.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_text(name)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1, "log_history": []}))
    record_save(run, folder, 1)
    run.exit_code.write_text("1\n")


@pytest.mark.parametrize("case, message", [
    ("nothing logged", "logged no completions"),
    ("every prompt never solved", "would drop every prompt"),
])
def test_resume_training_with_refilter_is_refused_with_nothing_written(ws, case, message):
    """The core door: resume_training(refilter=...) on a failed run answers the re-filter's refusal as a closed
    gate (gate `refilter`), starts nothing and leaves the config, the verdict and the data as they were."""
    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    rows = ten_rows(ws)
    run_dir = emit_run("resume-refused", dataset=str(ws / "ten.jsonl"), rewards=DIFFICULTY_REWARDS,
                       base=TINY_OVERRIDES)
    pass_inspection(run_dir)
    launched_and_failed(run_dir)
    if case == "every prompt never solved":
        log_table(run_dir, 1, [(r["prompt"], [0, 0, 0, 0]) for r in rows])
    before = snapshot(run_dir)
    result = resume_training(RunRequest(run=str(run_dir), refilter={"min_samples": 4}))
    assert not result.launched and [r.gate for r in result.refusals] == ["refilter"], result
    assert message in result.refusals[0].message
    assert snapshot(run_dir) == before and not list((run_dir / "data").glob("refilter*"))
    assert json.loads((run_dir / "run.json").read_text())["launch_id"] == "a" * 32  # nothing started


def test_resume_training_with_refilter_launches_on_the_refiltered_data(ws):
    """The core door end to end up to the start: the re-filter applied, every gate (the inspection gate on the moved
    verdict, the config rehearsed) passes, the run starts on the config naming the new data (run.json records its
    hash) and the result says what went. The hand-made checkpoint holds no weights, so the started trainer then
    fails to load it: this row is about the launch, not the training."""
    import hashlib

    from support import wait_for

    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    rows = ten_rows(ws)
    run_dir = emit_run("resume-refiltered", dataset=str(ws / "ten.jsonl"), rewards=DIFFICULTY_REWARDS,
                       base=TINY_OVERRIDES)
    pass_inspection(run_dir)
    launched_and_failed(run_dir)
    log_table(run_dir, 1, [(rows[0]["prompt"], [1, 1, 1, 1]), (rows[1]["prompt"], [1, 0, 0, 1])])
    result = resume_training(RunRequest(run=str(run_dir), refilter={}))
    assert result.launched, result
    assert (result.refilter.dropped, result.refilter.rows_after, result.refilter.data_file) == (
        1, 9, "data/refilter-1/kept.jsonl")
    config = run_dir / "train" / "config.yaml"
    assert "data_files: data/refilter-1/kept.jsonl" in config.read_text()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["config_sha256"] == hashlib.sha256(config.read_bytes()).hexdigest()
    wait_for(run_dir, lambda s: s.state not in ("starting", "running"), timeout=300)
    log = (run_dir / "train" / "logs" / "stdout.log").read_text()
    # the started trainer's own point-of-use check took the re-filtered rows (it refuses with exit 3 otherwise):
    # it got as far as loading the hand-made checkpoint, which holds no weights
    assert "refusing to train" not in log and "_load_from_checkpoint" in log, log[-3000:]


def test_trl_still_logs_completions_where_and_as_the_refilter_reads_them():
    """inspection.refilter reads TRL's completion logs: GRPOTrainer.log writes <output_dir>/completions/
    completions_<step:05d>.parquet with the prompt, one column per reward function and the advantage, from deques
    sized to the generation batch that logging does not clear (so a table logged twice is the same batch)."""
    import inspect

    from trl import GRPOTrainer

    from mcp_server.inspection.refilter import COMPLETIONS

    log = inspect.getsource(GRPOTrainer.log)
    assert f'"{COMPLETIONS}",' in log and 'f"completions_{self.state.global_step:05d}.parquet"' in log
    for column in ('"prompt": ', '**self._logs["rewards"]', '"advantage": '):
        assert column in log, column
    assert "self._logs" in log and "self._logs[" in log and "clear()" not in log.split("self._metrics[mode].clear()")[1]
    assert "deque(maxlen=args.generation_batch_size)" in inspect.getsource(GRPOTrainer.__init__)
