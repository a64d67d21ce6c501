"""docs/walkthrough.md is what the tools print: scripts/make_walkthrough.py runs the whole session (baseline, emit,
sample, inspect, verdict, gate, environment, launch, watch, diagnose, promote, export) through the CLI in a fresh
workspace on the demo's quick SFT warm start, two GRPO steps, and every command and output block of the doc must
be what the walk shows now (`make_walkthrough.py --write` after an intended change, reviewed in its diff)."""

from __future__ import annotations

import pytest
import sys

from conftest import ROOT, cli_here

sys.path.insert(0, str(ROOT / "scripts"))
import make_walkthrough  # noqa: E402  (scripts/ is no package)


def in_this_process(workspace, argv):
    """A walk step through the CLI's main here (cli_here): what the command prints is the doc's subject, not the
    process boundary (test_cli.py checks that), and twelve start-ups with the libraries' imports cost the lane
    more than the walk's training. launch-training still starts the trainer's process."""
    return cli_here(*argv, env=make_walkthrough.cli_env(workspace), cwd=workspace)


def walk_runner():
    """In this process on a machine without a GPU; where one is visible, a process per command as the script runs
    them (torch counts the GPUs once per process, so CUDA_VISIBLE_DEVICES set for one call would not hide them)."""
    import torch

    return make_walkthrough._cli if torch.cuda.device_count() else in_this_process


@pytest.mark.slow
def test_the_walkthrough_is_what_the_tools_print_now():
    now = make_walkthrough.walk(walk_runner())
    assert set(now) == {"data", "config", *(step.key for step in make_walkthrough.STEPS)}
    text = make_walkthrough.DOC.read_text(encoding="utf-8")
    diff = make_walkthrough.differences(now, text)
    assert not diff, "the tools' output drifted from docs/walkthrough.md (python scripts/make_walkthrough.py " \
        "--write after an intended change):\n" + "\n".join(diff[:80])


def test_the_comparison_sees_a_changed_line_and_not_the_cpus_numbers():
    """The check itself: a tool's changed line is a difference naming its step; a reward or rate the CPU decides
    is the same placeholder whatever its value, and a whole number the walk sets is kept."""
    text = make_walkthrough.DOC.read_text(encoding="utf-8")
    shown = make_walkthrough.doc_blocks(text)
    assert not make_walkthrough.differences(shown, text)
    assert "GATE OPEN" in shown["gate"]
    changed = {**shown, "gate": shown["gate"].replace("GATE OPEN", "GATE CLOSED")}
    diff = make_walkthrough.differences(changed, text)
    assert any("(gate)" in line for line in diff) and any(line.startswith("+GATE CLOSED") for line in diff)
    assert make_walkthrough.differences({k: v for k, v in shown.items() if k != "export"}, text) == [
        f"step 'export' in {make_walkthrough.DOC.name} is no step of the walk"]

    from mcp_server.demo_models import QUICK
    from mcp_server.evaluation.tiny_suite import tiny_split

    train_rows, held_rows = tiny_split(QUICK.max_operand)
    assert f"{len(train_rows)} training rows" in text and f"{len(held_rows)} goldens" in text
    assert f"0 to {QUICK.max_operand}:" in text and f"goldens-demo-{QUICK.max_operand}.jsonl" in text

    line = "  base success rate: {} of 16 prompts (95% interval {}-{}; took {}s)"
    one = make_walkthrough.redact_numbers(line.format("62%", "31%", "86%", "0.5"), luck=False)
    other = make_walkthrough.redact_numbers(line.format("50%", "28%", "72%", "12.25"), luck=False)
    assert one == other == "  base success rate: N% of 16 prompts (95% interval N%-N%; took Ns)"
    assert make_walkthrough.redact_numbers("goldens: 0/9 passed, 3 gained", luck=True) == \
        "goldens: N/N passed, N gained"
