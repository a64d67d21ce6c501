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
