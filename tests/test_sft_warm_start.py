"""The SFT warm start on the trainer seam (training/sft_warm_start.py): real TRL SFTTrainer on the tiny model, its
stop rule driven by a success rate built by construction (the check itself is the caller's), so the step it stops
at is known whatever the training does."""

from __future__ import annotations

from mcp_server.tiny import split_task
from mcp_server.training.sft_warm_start import WarmStartSettings, sft_warm_start


def test_it_checks_every_n_steps_stops_at_the_target_and_saves_the_model(tiny_model, tmp_path):
    rows, _ = split_task(max_operand=3)
    rates = iter([0.0, 0.5, 1.0])  # what the caller's check says at steps 2, 4, 6
    checked, reports = [], []

    def success_rate(model, tokenizer) -> float:
        checked.append((model.training, tokenizer.padding_side))
        flipped = "left" if tokenizer.padding_side == "right" else "right"
        tokenizer.padding_side = flipped  # a check may move it (generation pads left): the warm start puts it back
        return next(rates)

    settings = WarmStartSettings(max_steps=20, check_every=2, target=0.5, learning_rate=3e-3, batch_size=4)
    warm = sft_warm_start(tiny_model, rows, tmp_path / "warm", settings, success_rate,
                          lambda done, total, message: reports.append((done, total, message)))
    assert (warm.steps, warm.success_rate) == (4, 0.5)  # stopped at the first check that reached the target
    assert len(checked) == 2 and all(not training for training, _ in checked)  # checked in eval mode
    assert checked[1][1] == checked[0][1]
    assert reports[0] == (1, 20, "") and reports[-1] == (4, 4, "train success 50%")
    assert (warm.model_dir / "config.json").is_file() and (warm.model_dir / "tokenizer_config.json").is_file()


def test_the_demos_shipped_warm_start_is_the_pinned_one_and_a_changed_one_is_refused(tmp_path, monkeypatch):
    """`make demo` reads its warm start as data (issue 32: trained at run time it was the CPU kernel set's): the
    shipped weights hash to the pinned sha256, the copy keeps its tokenizer, and one changed weight is refused."""
    import shutil

    import pytest
    from safetensors.numpy import load_file, save_file

    from mcp_server.demo_warm_start import SHIPPED_WARM_START, WARM_START_SHA256, shipped_warm_start
    from mcp_server.tiny import state_sha256

    copy = shipped_warm_start(tmp_path / "warm")
    assert state_sha256(copy) == WARM_START_SHA256 and (copy / "tokenizer.json").is_file()
    changed = tmp_path / "changed"
    shutil.copytree(SHIPPED_WARM_START, changed)
    weights = load_file(str(changed / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name] = weights[name].copy()
    weights[name].flat[0] += 1.0
    save_file(weights, str(changed / "model.safetensors"))
    monkeypatch.setattr("mcp_server.demo_warm_start.SHIPPED_WARM_START", changed)
    with pytest.raises(SystemExit, match="not the pinned ones"):
        shipped_warm_start(tmp_path / "warm")


def test_the_demo_reads_the_shipped_warm_start_and_it_never_saw_the_goldens():
    """The full demo's settings read the shipped warm start, built for its task; the build's SFT rows and check
    rows are training prompts, none of them a golden."""
    from mcp_server.demo_models import DemoSettings
    from mcp_server.demo_warm_start import WARM_CHECK_ROWS, WARM_MAX_OPERAND, check_rows
    from mcp_server.evaluation.tiny_suite import tiny_split

    assert DemoSettings().max_operand == WARM_MAX_OPERAND and DemoSettings().warm_start == "shipped"
    train_rows, held_rows = tiny_split(WARM_MAX_OPERAND)
    check = check_rows(train_rows)
    questions = lambda rows: {r["question"] for r in rows}  # noqa: E731
    assert len(check) == WARM_CHECK_ROWS and questions(check) <= questions(train_rows)
    assert not questions(train_rows) & questions(held_rows)
