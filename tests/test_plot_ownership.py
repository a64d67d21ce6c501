"""Round 14 D1: the read-only server (`--read-only`; training_status declared as writing nothing, readOnlyHint true)
called with `plot: true` overwrote the person's own <run>/progress.png. Now the read-only mode draws no plot and says
so, and in any mode a progress.png that is not a plot training_status drew (status.PLOT_MARK) is left as it is and
named. The table: what is at progress.png x whether the CLI draws the plot there."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli_json
from support import write_signed_lines

ROWS = [{"step": i + 1, "loss": 0.1, "reward": 0.1 * i, "reward_std": 0.2, "kl": 0.01, "entropy": 1.0,
         "completions/mean_length": 20.0, "grad_norm": 0.5, "lr": 1e-6} for i in range(4)]
MINE = b"my own figure, not yours"


def _run(workspace: Path, name: str = "2026-01-01-plotted") -> Path:
    run = workspace / "runs" / name
    (run / "train" / "logs").mkdir(parents=True)
    write_signed_lines(run / "train" / "logs" / "progress.jsonl", ROWS)
    return run


def _person_file(plot: Path, outside: Path) -> None:
    plot.write_bytes(MINE)


def _link(plot: Path, outside: Path) -> None:
    outside.write_bytes(MINE)
    plot.symlink_to(outside)


def _folder(plot: Path, outside: Path) -> None:
    plot.mkdir()
    (plot / "keep.txt").write_bytes(MINE)


# what is at <run>/progress.png -> (how it is made, whether training_status draws there)
AT_THE_PLOT = {"nothing": (None, True), "the person's file": (_person_file, False),
               "a link to the person's file": (_link, False), "a folder": (_folder, False)}


@pytest.mark.slow
@pytest.mark.parametrize("kind", AT_THE_PLOT)
def test_training_status_replaces_no_progress_png_it_did_not_draw(workspace, tmp_path, kind):
    make, drawn = AT_THE_PLOT[kind]
    run = _run(workspace)
    plot, outside = run / "progress.png", tmp_path / "outside.png"
    if make:
        make(plot, outside)
    before = {p: p.read_bytes() for p in (plot, outside, plot / "keep.txt") if p.is_file()}
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    proc, status = run_cli_json("training-status", str(run), "--plot", env=env)
    assert proc.returncode in (0, 1), proc.stderr
    if drawn:
        assert status["plot_path"] == str(plot) and plot.read_bytes()[:4] == b"\x89PNG", status
        proc, again = run_cli_json("training-status", str(run), "--plot", env=env)  # its own plot: drawn again
        assert again["plot_path"] == str(plot), again
    else:
        assert status["plot_path"] is None and f"{plot} is there and is not a plot" in status["note"], status
        assert {p: p.read_bytes() for p in before} == before and plot.is_symlink() == (kind.startswith("a link"))


@pytest.mark.slow
def test_the_read_only_server_draws_no_plot_and_says_so(workspace):
    """Over the MCP door in read-only mode: the person's progress.png stays, and where there is none none is made;
    the result says no plot was drawn. The CLI in read-only mode the same."""
    from test_server_inputs import Wire, request

    mine = _run(workspace)
    (mine / "progress.png").write_bytes(MINE)
    bare = _run(workspace, "2026-01-02-bare")
    env = {"LLM_FINETUNING_READ_ONLY": "1", "LLM_FINETUNING_WORKSPACE": str(workspace)}
    wire = Wire("--read-only", env=env)
    try:
        wire.hello()
        for run in (mine, bare):
            wire.send(request(run.name, "tools/call", {"name": "training_status", "arguments": {
                "run": str(run), "plot": True}}))
        replies = {r["id"]: r for r in wire.until(lambda r: len(r) == 2, 300)}
    finally:
        wire.close()
    for run in (mine, bare):
        result = replies[run.name]["result"]
        status = result["structuredContent"]
        assert not result.get("isError") and status["plot_path"] is None, result
        assert "no plot drawn: the read-only server writes nothing" in status["note"], status
        assert not any(c.get("type") == "image" for c in result["content"]), result
    assert (mine / "progress.png").read_bytes() == MINE and not (bare / "progress.png").exists()
    proc, status = run_cli_json("training-status", str(mine), "--plot", env=env)
    assert status["plot_path"] is None and "read-only" in status["note"], status
    assert (mine / "progress.png").read_bytes() == MINE


@pytest.mark.slow
@pytest.mark.parametrize("logged", [3, 1])
def test_the_plot_ticks_whole_steps(workspace, logged):
    """Walk 9: three logged steps drew x ticks at 1.25 and 1.75; walk 13: one step drew an axis from 0.945 to 1.05.
    The ticks are whole steps and so are the axis's ends; the plot carries the ticks and the axis it drew as text
    (a PNG Comment), read here through the CLI's plot."""
    from PIL import Image

    run = workspace / "runs" / "2026-01-03-three"
    (run / "train" / "logs").mkdir(parents=True)
    write_signed_lines(run / "train" / "logs" / "progress.jsonl", ROWS[:logged])
    proc, status = run_cli_json("training-status", str(run), "--plot", env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    assert status["plot_path"] == str(run / "progress.png"), proc.stderr
    with Image.open(run / "progress.png") as image:
        comment = image.text["Comment"]
    shown, _, axis = comment.removeprefix("step ticks: ").partition("; axis ")
    ticks = [float(t) for t in shown.split(", ")]
    assert ticks == ([1.0, 2.0, 3.0] if logged == 3 else [0.0, 1.0, 2.0]), comment
    if logged == 1:
        assert axis == "0 to 2", comment
