"""Walk 12: on a loaded machine, 30-50 s passed between a decoding's plan line and its first "token 1" line (the
prompts' prefill, threads waking) with nothing printed, in sampling, evaluate-model and promote-checkpoint alike.
Every generate call now says, while it waits for its first decode step, what it waits for, for how long so far and
what a step should take (the plan's figure where one was made). The window is forced, not timed: the model's own
forward pass (code the tool runs at that moment) holds its first call until the tool has said it waits."""

from __future__ import annotations

import threading

import pytest

WAIT_S = 60  # the longest the held forward pass waits for the line; a missing line fails the test, never hangs it


def _held_model(tiny_model, said: threading.Event):
    """The tiny model, whose first forward pass waits until `said` is set."""
    from mcp_server.model_ref import load_model

    model, tokenizer = load_model(tiny_model)
    held = {"first": True}

    def hold(module, args, kwargs):
        if held["first"]:
            held["first"] = False
            assert said.wait(WAIT_S), "the tool said nothing while its first decode step waited"

    model.register_forward_pre_hook(hold, with_kwargs=True)
    return model, tokenizer


@pytest.mark.parametrize("plan", [None, {"generate_calls": 1, "max_new_tokens": 4, "estimated_seconds": 8.0}])
def test_a_decode_that_waits_for_its_first_token_says_so_with_its_figures(tiny_model, monkeypatch, plan):
    """evaluate_rows (evaluate-model, promote-checkpoint and the drift suite decode through it): the first decode
    step held; a line says which prompts wait for token 1, the seconds so far and, with a plan, its decode step."""
    from mcp_server import generation
    from mcp_server.evaluation.evaluate import evaluate_rows

    monkeypatch.setattr(generation, "WAIT_TICK_S", 0.05)  # how often; the window itself is the model's
    said, lines = threading.Event(), []

    def report(done, total, message):
        lines.append(message)
        if "waiting for token 1" in message:
            said.set()

    rows = [{"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"}] * 3
    items = evaluate_rows(None, rows, [{"name": "correctness_reward"}], 4, loaded=_held_model(tiny_model, said),
                          report=generation.planned(report, plan))
    assert len(items) == 3
    waiting = next(line for line in lines if "waiting for token 1" in line)
    assert "decoding prompts 1-3 of 3: waiting for token 1 of up to 4 (the prompts' prefill)" in waiting, waiting
    assert " s so far" in waiting, waiting
    if plan:
        assert "a decode step planned at about 2 s, the first one longer" in waiting, waiting
    step = lines.index(next(line for line in lines if "token 1 of up to 4;" in line or "token 1 of up to 4" in line
                            and "waiting" not in line))
    assert all("waiting" not in line for line in lines[step:]), lines  # once a step ran, no wait is said


def test_a_launch_gate_that_takes_long_says_so_with_its_seconds(workspace, monkeypatch):
    """Walk 12: a launch printed each gate's first line, then nothing while the gate ran (a minute on a busy
    machine). While a gate runs, a line names it with its seconds so far. The window is forced: the report of the
    first gate's line (code the tool runs inside that gate) holds until the tool has said the gate is still running."""
    from support import emit_run

    from mcp_server.training import launch_gates
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    monkeypatch.setattr(launch_gates, "GATE_TICK_S", 0.05)
    run_dir = emit_run("held-gate")
    said, lines = threading.Event(), []

    def report(done, total, message):
        lines.append(message)
        if message.startswith("gates: still checking"):
            said.set()
        elif message.startswith("gates: the logs folder"):
            assert said.wait(WAIT_S), "the tool said nothing while its gate ran"

    result = launch_training(LaunchRequest(run=str(run_dir)), report)
    assert not result.launched  # no inspection verdict: refused, after every gate ran
    still = next(line for line in lines if line.startswith("gates: still checking"))
    assert " s in this gate so far" in still, still
