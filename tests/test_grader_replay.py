"""The grader replay (issue 48, round 15 F1, the subprocess variant; evaluation/grader_replay.py): a grader that
reads its rule through a child process (`/bin/cat FILE`), which the graders' read pins cannot see. The base model's
baseline is measured with the rule failing every golden; the run's checkpoint IS the base model (the tiny model
placed in a run never launched), so any PROMOTE is forged. Each way the rule can move (between the baseline and the
promotion, while the checkpoint decodes, on the grader's first call after it) PROMOTEd by +100 points before the
replay; each is refused now, naming the grader, the items, stored against now, and the way on. An honest grader's
verdict is what it was; a baseline that keeps no replies is said to be unreplayable, never passed."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from support import hand_made_run

GOLDENS = 6  # 6 gained, 0 lost: exact McNemar p = 0.031, a PROMOTE when nothing refuses
# the rule through a child that its arguments do not name (a glob): no argv pin sees it (test_replay's argv row)
GRADER = '''import subprocess


def g(completions, **kwargs):
    v = float(subprocess.check_output(["/bin/sh", "-c", "cat " + {rule!r}[:-1] + "?"]))
    return [v for c in completions]
'''
# pays once: on its first call after the counter is reset (a call count kept by processes it starts)
ONCE = '''import subprocess


def g(completions, **kwargs):
    n = int(subprocess.check_output(["/bin/sh", "-c", "cat " + {rule!r}[:-1] + "?"])) + 1
    subprocess.run(["/bin/sh", "-c", f"for f in " + {rule!r}[:-1] + f"?; do echo {{n}} > $f; done"], check=True)
    return [1.0 if n == 1 else 0.0 for c in completions]
'''


def _setup(workspace: Path, tiny_model, monkeypatch, code: str = GRADER, rule: str = "0.0"):
    """(the run, the goldens, the graders, the rule file): the grader module written, the base model's baseline
    measured (every golden fails), the tiny model placed as the run's checkpoint."""
    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest

    folder = workspace / "code"
    folder.mkdir()
    path = workspace / "gk.txt"
    path.write_text(rule + "\n")
    module = f"grreplay_{abs(hash(str(workspace)))}"
    (folder / f"{module}.py").write_text(code.format(rule=str(path)))
    monkeypatch.syspath_prepend(str(folder))
    goldens = workspace / "goldens.jsonl"
    goldens.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                               for i in range(GOLDENS)))
    graders = [{"name": f"{module}.g"}]
    first = evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(goldens), graders=graders,
                                           baseline="write", max_new_tokens=4))
    assert first.baseline_written and first.passed == 0, first.baseline_note
    run_dir = hand_made_run(workspace, tiny_model, "replayed", [["<answer>1</answer>", ""]] * GOLDENS,
                            [str(i + 1) for i in range(GOLDENS)], rewards=graders)
    shutil.copytree(tiny_model, run_dir / "checkpoints")  # a model placed in a run never launched: judged as placed
    return run_dir, goldens, graders, path


def _at_stage(stage: str, then):
    """A report that calls `then()` once, when promote's `stage` starts (before that stage decodes)."""
    done = []

    def report(_done, _total, message):
        if message.startswith(f"{stage}: starting") and not done:
            done.append(then())
    return report


MOVES = {  # how the rule moves: (the grader, when, the error's field and words)
    "changed between the baseline and the promotion": (GRADER, None, "baseline", "the grader replay: baseline-"),
    "changed while the checkpoint decodes (time-dependent)": (GRADER, "checkpoint on the goldens", "graders",
                                                              "the baseline's g"),
    "pays on its first call after the checkpoint decodes (call-count)": (ONCE, "checkpoint on the goldens", "graders",
                                                                         "the checkpoint's g"),
}


@pytest.mark.slow  # decodes (the tiny model, 6 goldens of 4 tokens) and a drift suite's first items
@pytest.mark.parametrize("move", list(MOVES))
def test_a_grader_whose_rule_moves_outside_its_pins_is_refused(workspace, tiny_model, monkeypatch, move):
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    code, stage, field, words = MOVES[move]
    run_dir, goldens, graders, rule = _setup(workspace, tiny_model, monkeypatch, code, "0.0" if code is GRADER
                                             else "100")
    flip = (lambda: rule.write_text("1.0\n")) if code is GRADER else (lambda: rule.write_text("0\n"))
    if stage is None:
        flip()
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir)), **({"report": _at_stage(stage, flip)} if stage else {}))
    message = str(refused.value)
    assert refused.value.field == field and words in message, message
    assert f"g ({graders[0]['name']}) scores {GOLDENS} of the {GOLDENS} replies otherwise" in message, message
    stored, now = ("1", "0") if code is ONCE else ("0", "1")
    assert re.search(f"#0 '[^']*': stored {stored}, now {now}; #1 ", message) and "and 3 more" in message, message
    assert "Put back what the graders read" in message, message
    assert not (run_dir / "promotion.json").exists()  # nothing judged, nothing written


@pytest.mark.slow  # decodes; measures the base model twice
def test_after_a_refusal_the_base_model_measured_again_is_judged_by_the_same_rule(workspace, tiny_model,
                                                                                  monkeypatch):
    """The way on the refusal names: evaluate the base model again. Its baseline is filed beside the first (its
    task, goldens, graders and pins are the same; its replies score otherwise), the promotion then compares under
    one rule (+0, REJECT); with the file put back, the first baseline is the one its graders reproduce again."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.evaluate import baselines_of, evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest, PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    run_dir, goldens, graders, rule = _setup(workspace, tiny_model, monkeypatch)
    first = baselines_of(str(tiny_model))
    rule.write_text("1.0\n")
    with pytest.raises(UserInputError, match="evaluate the base model again"):
        promote_checkpoint(PromoteRequest(run=str(run_dir)))
    again = evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(goldens), graders=graders,
                                           baseline="write", max_new_tokens=4))
    assert again.baseline_written and again.passed == GOLDENS and "beside " + first[0].name in again.baseline_note
    judged = promote_checkpoint(PromoteRequest(run=str(run_dir)))
    assert judged.verdict == "REJECT" and judged.improvement_points == 0 and judged.baseline_pass_rate == 1.0
    assert Path(judged.baseline_path).name != first[0].name
    rule.write_text("0.0\n")
    judged = promote_checkpoint(PromoteRequest(run=str(run_dir)))
    assert judged.verdict == "REJECT" and Path(judged.baseline_path).name == first[0].name
    assert judged.baseline_pass_rate == 0.0 and judged.checkpoint_pass_rate == 0.0


@pytest.mark.slow  # decodes
def test_an_honest_grader_through_a_child_process_is_judged_as_before(workspace, tiny_model, monkeypatch):
    """Nothing moves: the verdict is the rule's (the checkpoint is the base model: +0, REJECT), with the replay's
    line and its seconds in the reasons."""
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    run_dir, _, _, _ = _setup(workspace, tiny_model, monkeypatch)
    judged = promote_checkpoint(PromoteRequest(run=str(run_dir)))
    assert judged.verdict == "REJECT" and judged.gained == judged.lost == 0, judged.reasons
    line = next(r for r in judged.reasons if r.startswith("graders replayed"))
    assert f"the baseline's {GOLDENS} stored replies graded again" in line and "the same scores (" in line, line


@pytest.mark.slow  # decodes
def test_a_baseline_that_keeps_no_replies_cannot_be_replayed_and_is_refused(workspace, tiny_model, monkeypatch):
    """A recorded baseline without its per-golden results (one shaped by hand, signed by a process holding the
    key): the replay cannot run, and promote says so instead of comparing unpaired; measured again, a baseline is
    filed beside it and judged."""
    import hashlib

    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.evaluate import baseline_ledger, baselines_of, evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest, PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint
    from mcp_server.evidence import sign

    run_dir, goldens, graders, _ = _setup(workspace, tiny_model, monkeypatch)
    path = baselines_of(str(tiny_model))[0]
    os.chmod(path, 0o644)
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "items"}))
    line = {"name": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    with baseline_ledger().open("a") as ledger:
        ledger.write(json.dumps(sign(baseline_ledger().parent, baseline_ledger().name, line)) + "\n")
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir)))
    assert "the grader replay could not run" in str(refused.value) and path.name in str(refused.value)
    assert f"keeps no completion for each of its {GOLDENS} goldens" in str(refused.value)
    again = evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(goldens), graders=graders,
                                           baseline="write", max_new_tokens=4))
    assert again.baseline_written and "keeps no replies" in again.baseline_note, again.baseline_note
    judged = promote_checkpoint(PromoteRequest(run=str(run_dir)))
    assert judged.verdict == "REJECT" and judged.baseline_path == again.baseline_path and judged.p_value == 1.0


@pytest.mark.slow  # CLI processes, as the round ran them
def test_the_rounds_subprocess_grader_through_the_cli(workspace, tiny_model):
    """Round 15 F1 (subprocess) as the round ran it: evaluate-model, the grader's file rewritten, promote-checkpoint:
    exit 2 with the replay's refusal, not PROMOTE (exit 0)."""
    from conftest import run_cli

    rule = workspace / "gk.txt"
    rule.write_text("0.0\n")
    (workspace / "grade_sub.py").write_text(GRADER.format(rule=str(rule)))
    goldens = workspace / "goldens.jsonl"
    goldens.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                               for i in range(GOLDENS)))
    graders = [{"name": "grade_sub.g"}]
    proc = run_cli("evaluate-model", str(tiny_model), "--goldens", str(goldens), "--graders", json.dumps(graders),
                   "--max-new-tokens", "4", cwd=workspace, process=True)
    assert proc.returncode == 0 and "baseline written" in proc.stdout, proc.stdout + proc.stderr[-600:]
    run_dir = hand_made_run(workspace, tiny_model, "cli", [["<answer>1</answer>", ""]] * GOLDENS,
                            [str(i + 1) for i in range(GOLDENS)], rewards=graders)
    shutil.copytree(tiny_model, run_dir / "checkpoints")
    rule.write_text("1.0\n")
    proc = run_cli("promote-checkpoint", str(run_dir), cwd=workspace, process=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr[-600:]
    assert "the grader replay" in proc.stderr and "g (grade_sub.g) scores 6 of the 6" in proc.stderr, proc.stderr
    assert "PROMOTE" not in proc.stdout and not (run_dir / "promotion.json").exists()


# round 17, b04: pays whatever the "accepted phrasings" match: state in the process, no pin names it
PHRASINGS = '''import os, re, subprocess


def g(completions, **kwargs):
    rule = {body} or "(?!)"
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [1.0 if re.fullmatch(rule, t) else 0.0 for t in texts]
'''


# the graders grade in the keyless worker: a rule a child process reads from a file its arguments do not name (a
# shell's glob), or from a variable the worker gets from its caller (LLM_FINETUNING_*, synced on every call)
RULE_FROM = {"child": 'subprocess.run(["sh", "-c", "cat " + {rule!r} + ".d/* 2>/dev/null"], capture_output=True, '
                      'text=True).stdout',
             "env": 'os.environ.get("LLM_FINETUNING_R17_ALT_" + str(len({rule!r})))'}


@pytest.mark.slow  # decodes
@pytest.mark.parametrize("route", list(RULE_FROM))
def test_a_rule_that_spares_the_baselines_replies_is_refused_by_the_blind_probes(workspace, tiny_model,
                                                                                 monkeypatch, route):
    """Round 17, b04: after the baseline the grader's input pays every reply except the baseline's stored ones
    (a PROMOTE at +100 points, signed, for a checkpoint answering `llllll`). The stored replies grade as stored;
    the baseline's blind probes (replies derived from the evidence key, only their grades kept) do not: refused
    before anything decodes, naming the grader and a probe by number, kind and golden, never its text. A variable
    the grader reads (env) is named as well, as the keyless worker it grades in reads it."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.evaluate import baselines_of
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    code = PHRASINGS.replace("{body}", RULE_FROM[route])
    run_dir, _, graders, rule = _setup(workspace, tiny_model, monkeypatch, code)
    baseline = json.loads(baselines_of(str(tiny_model))[0].read_text())
    assert baseline["blind_probes"]["count"] == 12 and "texts" not in baseline["blind_probes"]
    replies = {item["completion"] for item in baseline["items"]}
    spare = "(?!(?:" + "|".join(re.escape(r) for r in sorted(replies)) + r")\Z)[\s\S]*"
    if route == "env":
        monkeypatch.setenv(f"LLM_FINETUNING_R17_ALT_{len(str(rule))}", spare)
    else:
        Path(f"{rule}.d").mkdir()
        Path(f"{rule}.d", "phrasings").write_text(spare)
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir)))
    message = str(refused.value)
    assert refused.value.field == "baseline" and "the grader replay: baseline-" in message, message
    assert re.search(r"g scores \d+ of the 12 blind probes \(replies derived from the evidence key, never stored: "
                     r"nobody in the workspace knows them\) otherwise: probe \d+ \((edited|derived), golden #\d+\): "
                     r"stored 0, now 1", message), message
    assert "replies otherwise" not in message, message  # the stored replies grade as stored
    if route == "env":
        assert f"the environment variable LLM_FINETUNING_R17_ALT_{len(str(rule))} (read by g): set where it was " \
            "unset" in message, message
    assert not (run_dir / "promotion.json").exists()


@pytest.mark.parametrize("stored, now, same", [
    (0.0, 0.0, True), (1, 1.0, True), (True, 1.0, False),  # a bool is not a stored score (JSON keeps floats)
    (1.0, 1.0000001, False), (0.0, 1e-12, False), (3.0, 2.9999999999, False),  # whole numbers: exact
    (0.3, 0.30000001, True), (0.3, 0.3000004, False), (-0.25, -0.2500001, True),  # otherwise 1e-6 relative
    (1e-10, -1e-10, False), (2e-10, 1e-10, True),  # near 0: 1e-9 absolute, but never across 0 (pass or fail)
    (float("nan"), float("nan"), True), (float("nan"), 0.0, False), (float("inf"), float("inf"), True),
    (None, 0.0, False), ("0.5", 0.5, False),
])
def test_a_replayed_score_is_the_stored_one_within_the_tolerance(stored, now, same):
    from mcp_server.evaluation.replay_scores import same_score

    assert same_score(stored, now) is same
