"""Issue 48, round 13 (B1-B3): a reward whose score depends on an input no pin names (an environment variable, a
file's size, a process's output) was reviewed at one value and trained at another. The trainer replays the review
before its first step (inspection.replay): the reviewed samples scored by the rewards it trains with, in its own
process and environment, compared with the scores the review recorded; any other score exits (status 3) naming
the reward. Rows here: the replay called directly on constructed samples and functions (each route), the
reward-code check (reviewed_reward_funcs, as train.py calls it) on a hand-made reviewed run, and real launches."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import pytest

from mcp_server.inspection import replay
from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
from mcp_server.inspection.models import InspectRequest, VerdictRequest
from mcp_server.inspection.review import inspect_rewards
from mcp_server.inspection.trained import reviewed_reward_funcs
from mcp_server.rewards.spec import RewardSpec
from support import emit_run, hand_made_run, pass_inspection, wait_for

# How the round-13 rewards read their knob (KNOB: the file, or the variable's name).
ROUTES = {
    "env": 'float(os.environ.get(KNOB, "1"))',
    "stat": "float(os.lstat(KNOB).st_size)",  # a file's metadata no pin names (os.stat is a read: pinned)
    # a file the child reads that its arguments do not name (a glob): no argv pin sees it (test_reward_children)
    "subprocess": 'float(subprocess.check_output(["/bin/sh", "-c", "cat " + KNOB[:-1] + "?"]))',
}
# what refuses, by route: a variable is pinned (read_events.ENV_EVENT), the others only the replay sees
ENV_PINNED = "the environment variable {name} (read by knob_reward): its value changed"
REWARD = '''import os, subprocess
KNOB = {knob!r}


def knob_reward(completions, **kwargs):
    v = {body}
    return [v for c in completions]
'''


def _samples(n: int = 4) -> list[dict]:
    return [{"id": i, "prompt_index": i // 2, "prompt": f"Q{i // 2}", "completion": f"A{i}", "columns": {"answer": "2"}}
            for i in range(n)]


def _rows(samples: list[dict], name: str, values: list) -> list[dict]:
    return [{"id": s["id"], "scores": {name: v}} for s, v in zip(samples, values)]


def _named(func, name: str):
    func.__name__ = name
    return func


@pytest.mark.parametrize("route", ["env", "stat", "subprocess", "clock"])
def test_the_replay_names_a_reward_whose_input_changed(route):
    """Each route as a constructed function whose reads changed since the review: the knob is a value the function
    closes over (no process, no file), the review's rows recorded 1."""
    knob = {"value": 1.0}
    func = _named(lambda completions, **kwargs: [knob["value"] * (1 + i % 2) for i in range(len(completions))],
                  f"{route}_reward")
    samples = _samples()
    rows = _rows(samples, f"{route}_reward", [1.0, 2.0, 1.0, 2.0])
    specs = [RewardSpec(name=f"m.{route}_reward")]
    assert replay.replay([func], specs, samples, rows) == ([f"{route}_reward"], [])
    knob["value"] = 5.0
    names, differ = replay.replay([func], specs, samples, rows)
    assert len(differ) == 1 and f"{route}_reward scores 4 of the 4 reviewed" in differ[0], differ
    assert "sample 0: reviewed 1, now 5" in differ[0], differ


def test_stored_scores_compare_as_the_review_stored_them():
    """The review stores round(score, 6) and None for NaN: float noise passes, a change in the 6th decimal or a
    NaN where a number was does not; a reviewed row whose sample is gone differs."""
    assert replay.same(0.333333, 1 / 3) and replay.same(None, math.nan) and replay.same(1, 1.0)
    assert replay.same(0.1 + 0.2, 0.30000000000000004) and replay.same(1e-300, 0.0)
    assert not replay.same(0.333333, 0.333334) and not replay.same(1.0, math.nan) and not replay.same(None, 0.0)
    assert not replay.same("1", 1.0) and not replay.same(True, 1.0)
    samples = _samples(2)
    lines = replay.differences(["r"], [[1.0, 1.0]], samples[:1], _rows(samples, "r", [1.0, 1.0]))
    assert lines and "1 of the 2 reviewed" in lines[0] and "sample 1" in lines[0], lines


def test_a_reward_that_raises_at_the_replay_refuses():
    def broken(completions, **kwargs):
        raise OSError("the knob is gone")

    samples = _samples()
    with pytest.raises(SystemExit) as refused:
        replay.replay([broken], [RewardSpec(name="m.broken")], samples, _rows(samples, "broken", [1.0] * 4))
    assert refused.value.code == 3  # the line: what replay_review says on every rank (refusing to train: ...)
    assert "broken raised OSError" in refused.value.line, refused.value.line


def _set(route: str, knob: Path, value: int, monkeypatch) -> None:
    if route == "env":
        monkeypatch.setenv(str(knob), str(value))
    elif route == "stat":
        knob.write_bytes(b"x" * value)
    else:
        knob.write_text(f"{value}\n")


@pytest.mark.parametrize("route", ["env", "stat"])
def test_the_reward_code_check_replays_the_review(workspace, tiny_model, monkeypatch, capsys, route):
    """reviewed_reward_funcs as train.py calls it: the same knob replays the same scores (one line says what it
    cost); the knob changed after the verdict (the gate cannot see it) refuses, naming the reward."""
    run_dir, knob, _ = _reviewed_run(workspace, tiny_model, monkeypatch, "knob", route, route)
    funcs, _ = reviewed_reward_funcs(run_dir)
    assert len(funcs) == 1
    assert "replayed the review: 52 samples x 1 rewards, same scores" in capsys.readouterr().err
    _set(route, knob, 5, monkeypatch)
    assert check_inspection_gate(run_dir).passed  # nothing the gate can know of
    with pytest.raises(SystemExit) as refused:
        reviewed_reward_funcs(run_dir)
    err = capsys.readouterr().err
    assert refused.value.code == 3, err
    if route == "env":  # pinned (round 17): named at the point of use before anything is scored
        assert ENV_PINNED.format(name=knob) in err and "reviewed samples" not in err, err
        return
    assert "knob_reward scores 52 of the 52 reviewed samples" in err and "reviewed 1, now 5" in err, err
    assert "an environment variable, a file's metadata, a process it starts" in err, err


def test_the_replay_reads_the_review_the_verdict_signed(workspace, tiny_model, monkeypatch, capsys):
    """review.jsonl's scores edited to match the knob's new value: not the rows review.json pins, refused."""
    run_dir, knob, _ = _reviewed_run(workspace, tiny_model, monkeypatch, "knob", "stat", "edited")
    _set("stat", knob, 5, monkeypatch)
    rows = run_dir / "inspection" / "review.jsonl"
    rows.write_text(rows.read_text().replace('": 1.0}', '": 5.0}'))
    with pytest.raises(SystemExit) as refused:
        reviewed_reward_funcs(run_dir)
    assert refused.value.code == 3
    assert "inspection/review.jsonl is not the one the inspection verdict signed" in capsys.readouterr().err


#--------------------------------------------------------- real launches (round 13's B1-B3, and a run of two processes)
TINY = {"max_steps": 1, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 12,
        "logging_steps": 1, "save_steps": 1, "gradient_accumulation_steps": 1, "report_to": "none"}


@pytest.mark.slow
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_knob_changed_after_the_verdict_never_trains(workspace, monkeypatch, route):
    """B1 (a variable set in the launching environment), B2 (the knob file's size), B3 (the output of a process
    the reward starts): reviewed at 1, launched at 5. Before, the gate was open, the trainer did not refuse and
    training ran at reward 5.0; now the trainer refuses before its first step, naming the reward."""
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    folder = workspace / "user-rewards"
    folder.mkdir()
    module = f"rew13_{route}"
    knob = workspace / "knob" if route != "env" else Path("R13_KNOB")
    (folder / f"{module}.py").write_text(REWARD.format(knob=str(knob), body=ROUTES[route]))
    monkeypatch.syspath_prepend(str(folder))  # as tests/test_inspection_gate.py's reward_with_helper
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    monkeypatch.delitem(sys.modules, module, raising=False)
    _set(route, knob, 1, monkeypatch)
    data = workspace / "sums.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(16)))
    run_dir = emit_run("knob", dataset=str(data), base=TINY, rewards=[{"name": f"{module}.knob_reward"}])
    pass_inspection(run_dir, max_samples=None, reviewer="ana")
    _set(route, knob, 5, monkeypatch)
    assert check_inspection_gate(run_dir).passed  # nothing the gate can know of
    result = launch_training(LaunchRequest(run=str(run_dir)))
    assert result.launched, result.message
    status = wait_for(run_dir, lambda s: s.state not in ("starting", "running"), timeout=600)
    log = (run_dir / "train" / "logs" / "stdout.log").read_text()
    assert status.state == "failed" and "refusing to train" in log, (status.state, log[-3000:])
    if route == "env":  # pinned (round 17)
        assert ENV_PINNED.format(name=knob) in log, log[-3000:]
    else:
        assert "the reward knob_reward scores 52 of the 52 reviewed samples" in log and "now 5" in log, log[-3000:]
    progress = run_dir / "train" / "logs" / "progress.jsonl"
    assert not progress.exists() or not progress.read_text().strip()


# A variable only one rank's environment sets (as one node of several may): the review saw it unset (1 everywhere).
RANKED = '''import os


def ranked_knob_reward(completions, **kwargs):
    v = float(os.environ.get("RMP_KNOB_" + os.environ.get("RANK", "0"), "1"))
    return [v for c in completions]
'''


@pytest.mark.slow
def test_a_run_of_two_processes_replays_on_every_rank_and_every_rank_refuses_a_change(workspace, monkeypatch):
    """Two ranks over gloo (torchrun, as launch_training starts num_processes=2 on a CPU). Before, a run of several
    processes was not replayed at all: the knob changed on rank 1 trained there unchecked. Now every rank replays
    after the process group exists: with the reviewed knob each says so and the run trains to its end; with rank 1's
    knob at 5, rank 1's scores differ and rank 0's do not, yet both ranks say so, naming rank 1 and the reward, and
    both leave before the first step: no rank waits in a collective for one that left (a bounded wait here)."""
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    for rank in ("0", "1"):
        monkeypatch.delenv(f"RMP_KNOB_{rank}", raising=False)
    folder = workspace / "user-rewards"
    folder.mkdir()
    (folder / "rmp_ranked.py").write_text(RANKED)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    monkeypatch.delitem(sys.modules, "rmp_ranked", raising=False)
    data = workspace / "sums.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(16)))
    run_dir = emit_run("ranks", dataset=str(data), base=TINY, rewards=[{"name": "rmp_ranked.ranked_knob_reward"}])
    pass_inspection(run_dir, max_samples=None, reviewer="ana")
    log = run_dir / "train" / "logs" / "stdout.log"

    def launched_to_its_end(**request):
        result = launch_training(LaunchRequest(run=str(run_dir), num_processes=2, **request))
        assert result.launched, result.message
        return wait_for(run_dir, lambda s: s.state not in ("starting", "running"), timeout=600), log.read_text()

    status, text = launched_to_its_end()
    assert status.state == "succeeded", (status.state, text[-3000:])
    for rank in (0, 1):
        assert re.search(rf"replayed the review: 52 samples x 1 rewards, same scores; probed 16 training rows x 1 "
                         rf"rewards, same scores; 12 blind probes x 1 rewards, same scores \(\d+\.\d\d s\) \(rank "
                         rf"{rank} of 2\)", text), text[-3000:]

    # rank 1's environment only (a variable rank 1 reads that the review never read: judged by the replay; RANK,
    # set by the launcher per rank, is not pinned)
    monkeypatch.setenv("RMP_KNOB_1", "5")
    status, text = launched_to_its_end(archive_previous=True)
    assert status.state == "failed" and "replayed the review" not in text, (status.state, text[-3000:])
    for rank in (0, 1):
        assert f"refusing to train (rank {rank} of 2): on rank 1 (" in text, text[-3000:]
    assert "the reward ranked_knob_reward scores 52 of the 52 reviewed samples" in text and "now 5" in text, text
    assert "on rank 0 (" not in text, text[-3000:]  # rank 0 replayed the same: it refuses for rank 1
    # each rank's own status (torchrun's summary), not the SIGTERM torchrun sends the others at the first exit
    assert re.findall(r"exitcode +: (\S+) \(pid: \d+\)", text) == ["3", "3"], text[-3000:]
    progress = run_dir / "train" / "logs" / "progress.jsonl"
    assert not progress.exists() or not progress.read_text().strip()


def test_a_record_that_signs_no_review_has_nothing_to_replay(tmp_path, capsys):
    """A verdict without the samples' and the review's hashes (the gate never opens for it, the point-of-use check
    refuses it first): the replay says there is nothing to replay and scores nothing."""
    from mcp_server.runs import Run

    replay.replay_review(Run(tmp_path), [{"name": "format_reward"}], [], {"pins": {}})
    assert "signs no review to replay" in capsys.readouterr().err


# ---------------------------------------------------------------- row probes (round 15's G2: unsampled prompts)
# A reward that weighs each prompt by an answer key read outside the completion and its row: a JSON table in an
# environment variable, or a file read through a process it starts. The review samples 13 of the 20 rows.
KEYED = {
    "env": 'json.loads(os.environ.get(KEY, "{}"))',
    "subprocess": 'json.loads(subprocess.check_output(["/bin/sh", "-c", "cat " + KEY[:-1] + "?"]))',
    "memory": 'json.loads(getattr(__import__("builtins"), KEY, "{}"))',  # state in the process: no pin names it
}
KEYED_REWARD = '''import json, os, subprocess
KEY = {key!r}


def key_reward(completions, prompts=None, **kwargs):
    key = {body}
    return [key.get(p if isinstance(p, str) else p[-1]["content"], 1.0) for p in prompts]
'''


def _set_key(route: str, key: Path, unsampled: float, monkeypatch, rows: int = 20, sampled: int = 13) -> None:
    table = json.dumps({f"Q{i}": (1.0 if i < sampled else unsampled) for i in range(rows)})
    if route == "env":
        monkeypatch.setenv(str(key), table)
    elif route == "memory":
        monkeypatch.setattr("builtins." + str(key), table, raising=False)
    else:
        key.write_text(table)


# kind -> (the reward module, how it reads its input by route, how a test sets that input, the data set's rows):
# "knob": every score is the knob; "key": each of 20 prompts (13 sampled) weighed by an answer key
READS = {"knob": (REWARD, ROUTES, _set, 13), "key": (KEYED_REWARD, KEYED, _set_key, 20)}


def _reviewed_run(workspace: Path, tiny_model, monkeypatch, kind: str, route: str, tag: str,
                  rewards: list | None = None) -> tuple[Path, Path, object]:
    """A hand-made run (13 prompt groups of 4 completions sampled from the kind's data rows) whose reward reads its
    input (READS[kind]) through `route`, set to 1 everywhere at review, inspected and passed: (the run, the input
    (a file, or the environment variable's name), the review)."""
    template, bodies, set_input, rows = READS[kind]
    folder = workspace / "code"
    folder.mkdir()
    where = workspace / f"{kind}.json" if route not in ("env", "memory") else Path(f"R_{kind.upper()}_{tag}")
    module = f"{kind}rew_{tag}_{abs(hash(str(workspace)))}"
    (folder / f"{module}.py").write_text(template.format(**{kind: str(where)}, body=bodies[route]))
    monkeypatch.syspath_prepend(str(folder))
    set_input(route, where, 1, monkeypatch)
    run_dir = hand_made_run(workspace, tiny_model, kind, [["a", "b", "c", "d"]] * 13, ["2"] * rows,
                            rewards=[{"name": f"{module}.{kind}_reward"}, *(rewards or [])])
    review = inspect_rewards(InspectRequest(run=str(run_dir)))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    return run_dir, where, review


@pytest.mark.parametrize("route", ["memory", "env", pytest.param("subprocess", marks=pytest.mark.slow)])  # /bin/sh
def test_an_input_that_moves_only_unsampled_rows_is_refused(workspace, tiny_model, monkeypatch, capsys, route):
    """G2 (a: env, b: subprocess, c: the process's own state): after the verdict only the 7 never-sampled prompts'
    weights go 1 -> 7. The reviewed samples replay the same; the row probes (each training row scored with a
    reviewed completion at review, again by the trainer) differ: refused (status 3), naming the reward, a row and
    both scores. Before, the replay passed and training ran at 7. A variable is pinned since round 17: named at
    the point of use, before anything is scored."""
    run_dir, key, _ = _reviewed_run(workspace, tiny_model, monkeypatch, "key", route, route)
    reviewed_reward_funcs(run_dir)
    assert "same scores" in capsys.readouterr().err
    _set_key(route, key, 7.0, monkeypatch)
    assert check_inspection_gate(run_dir).passed  # nothing the gate can know of
    with pytest.raises(SystemExit) as refused:
        reviewed_reward_funcs(run_dir)
    err = capsys.readouterr().err
    assert refused.value.code == 3, err
    if route == "env":
        assert f"the environment variable {key} (read by key_reward): its value changed" in err, err
        return
    assert "the reward key_reward scores 7 of the 20 training rows" in err, err
    assert "(row 13: reviewed 1, now 7)" in err, err
    assert "reviewed samples differently" not in err, err  # the sampled prompts alone would have passed


def test_the_row_probes_cost_line_at_review_and_at_launch(workspace, tiny_model, monkeypatch, capsys):
    """(c, d) Unchanged: the trainer's check returns its rewards and says what the probes cost; the review says it
    too (result, sheet), naming the built-in rewards it leaves out. Rows past the cap are named at both ends."""
    from mcp_server.inspection import row_probes

    run_dir, key, review = _reviewed_run(workspace, tiny_model, monkeypatch, "key", "env", "cost",
                                         rewards=[{"name": "soft_overlong_punishment"}])
    assert review.row_probes == (
        "probed 20 training rows x 1 rewards (key_reward), each row paired with a reviewed completion: 20 reward "
        "calls here and again at each launch; left out (the project's own code, reads only the completion and its "
        "row): soft_overlong_punishment_reward"), review.row_probes
    said = []
    again = inspect_rewards(InspectRequest(run=str(run_dir)), report=lambda done, total, line: said.append(line))
    assert again.row_probes == review.row_probes and check_inspection_gate(run_dir).passed  # the same review bytes
    assert any(re.fullmatch(r"row probes: 20 reward calls in \d+\.\d\d s, the 20 rows read as the trainer reads "
                            r"them in \d+\.\d\d s", line) for line in said), said
    assert review.row_probes in (run_dir / "inspection" / "review.md").read_text()
    funcs, _ = reviewed_reward_funcs(run_dir)
    assert len(funcs) == 2
    assert re.search(r"replayed the review: 52 samples x 2 rewards, same scores; probed 20 training rows x 1 "
                     r"rewards, same scores; 12 blind probes x 1 rewards, same scores \(\d+\.\d\d s\), \d+\.\d\d s",
                     capsys.readouterr().err)
    monkeypatch.setattr(row_probes, "CAP", 15)
    review = inspect_rewards(InspectRequest(run=str(run_dir)))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    uncovered = "training rows 15-19 (5 of 20) are not probed (the row probes stop at 15 rows)"
    assert uncovered in review.row_probes and any(uncovered in w for w in review.warnings), review
    reviewed_reward_funcs(run_dir)
    assert f"probed 15 training rows x 1 rewards; {uncovered}" in capsys.readouterr().err


@pytest.mark.slow
def test_unsampled_rows_keyed_by_a_variable_train_unchanged_and_refuse_changed(workspace, monkeypatch):
    """(c) and G2 through real launches: the key unchanged trains to its end (the launch line says the rows were
    probed); the key changed for the prompts nobody sampled refuses before the first step, naming the reward."""
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    folder = workspace / "user-rewards"
    folder.mkdir()
    (folder / "rew15_key.py").write_text(KEYED_REWARD.format(key="R15_KEY", body=KEYED["env"]))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    monkeypatch.delitem(sys.modules, "rew15_key", raising=False)
    monkeypatch.setenv("R15_KEY", "{}")
    data = workspace / "sums.jsonl"
    prompts = [f"What is {i} + {i}?" for i in range(30)]
    data.write_text("".join(json.dumps({"prompt": p, "answer": str(2 * i)}) + "\n" for i, p in enumerate(prompts)))
    run_dir = emit_run("keyed", dataset=str(data), base=TINY, rewards=[{"name": "rew15_key.key_reward"}])
    pass_inspection(run_dir, max_samples=None, reviewer="ana")
    sampled = {json.loads(line)["prompt"][-1]["content"] if isinstance(json.loads(line)["prompt"], list)
               else json.loads(line)["prompt"] for line in (run_dir / "inspection" / "samples.jsonl").open()}
    log = run_dir / "train" / "logs" / "stdout.log"

    def launched(**request):
        result = launch_training(LaunchRequest(run=str(run_dir), **request))
        assert result.launched, result.message
        return wait_for(run_dir, lambda s: s.state not in ("starting", "running"), timeout=600), log.read_text()

    status, text = launched()
    assert status.state == "succeeded", (status.state, text[-3000:])
    assert "same scores; probed 30 training rows x 1 rewards, same scores" in text, text[-3000:]
    monkeypatch.setenv("R15_KEY", json.dumps({p: 7.0 for p in prompts if p not in sampled}))
    status, text = launched(archive_previous=True)
    assert status.state == "failed" and "refusing to train" in text, (status.state, text[-3000:])
    # a variable is pinned since round 17: named at the point of use, before the row probes would have
    assert "the environment variable R15_KEY (read by key_reward): its value changed" in text, text[-3000:]


def test_which_rewards_the_row_probes_score():
    """Workspace code (a dotted path, a judge outside the project, a built-in wrapping either) is probed; the
    project's own built-ins, reading only the completion and its row, are left out."""
    from mcp_server.inspection.row_probes import probed

    assert probed(RewardSpec(name="mymod.reward")) and probed(RewardSpec(name="rubric_judge", params={"rubric": "x"}))
    assert probed(RewardSpec(name="length_penalty", params={"reward": {"name": "mymod.reward"}}))
    assert not probed(RewardSpec(name="length_penalty", params={"reward": {"name": "correctness_reward"}}))
    assert not probed(RewardSpec(name="format_reward")) and not probed(RewardSpec(name="correctness_reward"))


# ------------------------------------------------ round 17, b01: an input that spares every reviewed completion
BONUS_REWARD = '''import builtins, os, re, subprocess
NAME = {name!r}


def bonus_reward(completions, **kwargs):
    rule = {body} or "(?!)"  # "bonus phrasings" the task owner lists
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [1.0 + (4.0 if re.fullmatch(rule, t) else 0.0) for t in texts]
'''
BONUS = {"memory": 'getattr(builtins, NAME, "")',  # state in the process: no pin names it (as a child's output)
         "env": 'os.environ.get(NAME, "")',
         "argv": 'subprocess.run(["/bin/cat", NAME], capture_output=True, text=True).stdout.strip()'}


def _bonus_run(workspace: Path, tiny_model, monkeypatch, route: str) -> tuple[Path, str]:
    """A hand-made run whose reward pays 1, plus 4 for a text its "bonus" input (unset at review) matches; inspected
    and passed: (the run, the input: a name, or a file for "argv")."""
    folder = workspace / "code"
    folder.mkdir()
    tag = abs(hash(str(workspace)))
    name = str(workspace / "bonus.txt") if route == "argv" else f"R17_BONUS_{tag}"
    (folder / f"bonusrew_{tag}.py").write_text(BONUS_REWARD.format(name=name, body=BONUS[route]))
    monkeypatch.syspath_prepend(str(folder))
    run_dir = hand_made_run(workspace, tiny_model, "bonus", [["a", "b", "c", "d"]] * 13, ["2"] * 13,
                            rewards=[{"name": f"bonusrew_{tag}.bonus_reward"}])
    inspect_rewards(InspectRequest(run=str(run_dir)))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    return run_dir, name


def _all_but_reviewed(run_dir: Path) -> str:
    """round 17's rule: a regex matching every text except the reviewed completions."""
    texts = set()
    for line in (run_dir / "inspection" / "samples.jsonl").read_text().splitlines():
        completion = json.loads(line)["completion"]
        texts.add(completion if isinstance(completion, str) else completion[-1]["content"])
    return "(?!(?:" + "|".join(re.escape(t) for t in sorted(texts)) + r")\Z)[\s\S]*"


@pytest.mark.parametrize("route", ["memory", "env"])
def test_an_input_that_spares_every_reviewed_completion_is_refused(workspace, tiny_model, monkeypatch, capsys,
                                                                    route):
    """Round 17, b01: after the verdict the reward's input pays 4 more for every text but the reviewed completions.
    The reviewed samples and the row probes (rows x reviewed completions) replay the same scores: training ran at
    5.0 behind "same scores". Now (memory: an input no pin can name) the blind probes, completions derived from the
    evidence key whose scores alone the review kept, signed, score otherwise: refused (status 3), naming the reward
    and a probe by number and kind, never its text; (env) the variable is pinned: refused at the point of use. A
    record of the probes edited to the new scores is not signed: refused too."""
    run_dir, name = _bonus_run(workspace, tiny_model, monkeypatch, route)
    reviewed_reward_funcs(run_dir)
    assert "12 blind probes x 1 rewards, same scores" in capsys.readouterr().err
    if route == "env":
        monkeypatch.setenv(name, _all_but_reviewed(run_dir))
    else:
        monkeypatch.setattr(f"builtins.{name}", _all_but_reviewed(run_dir), raising=False)
    assert check_inspection_gate(run_dir).passed  # nothing the gate can know of
    with pytest.raises(SystemExit) as refused:
        reviewed_reward_funcs(run_dir)
    err = capsys.readouterr().err
    assert refused.value.code == 3, err
    if route == "env":
        assert f"the environment variable {name} (read by bonus_reward): set where it was unset at review" in err, err
        return
    assert re.search(r"the reward bonus_reward scores \d+ of the 12 blind probes \(completions derived from the "
                     r"evidence key, never stored: nobody in the workspace knows them\) differently than at review "
                     r"\(probe \d+, (edited|derived): reviewed 1, now 5\)", err), err
    assert "reviewed samples differently" not in err and "training rows" not in err, err  # what saw nothing
    record = run_dir / "inspection" / "blind_probes.json"
    forged = json.loads(record.read_text())
    forged["scores"] = {"bonus_reward": [5.0] * 12}
    record.write_text(json.dumps(forged))
    with pytest.raises(SystemExit):
        reviewed_reward_funcs(run_dir)
    assert "blind_probes.json is missing, not signed here, or not of the review" in capsys.readouterr().err


@pytest.mark.slow  # the reward starts /bin/cat
def test_a_file_a_child_process_is_named_is_pinned(workspace, tiny_model, monkeypatch, capsys):
    """Round 17, b01 (subprocess): the reward reads its input through `/bin/cat FILE`. The review sheet says the
    reward starts child processes (their own reads are judged by the replay alone); the file named in the argv is
    pinned (absent at review), so the gate names it once it is written."""
    run_dir, name = _bonus_run(workspace, tiny_model, monkeypatch, "argv")
    sheet = (run_dir / "inspection" / "review.md").read_text()
    assert f"bonus_reward starts child processes (/bin/cat {name})" in sheet, sheet
    Path(name).write_text(_all_but_reviewed(run_dir) + "\n")
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and f"{name} (read by bonus_reward): added where nothing was" in str(gate), gate
