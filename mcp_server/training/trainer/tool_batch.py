"""train/logs/tool-batch.jsonl: the first batch an agentic run trains on, as TRL built it: one line per rollout of
this rank's share (the first MAX_ROWS) with the completion's token ids, TRL's `tool_mask` (0 on the tool results
it appended, which the loss skips) and the loss mask. A person, or a test, decodes the masked tokens to see that
they are exactly the tool results. Written once, by the main process, from the output of
`GRPOTrainer._generate_and_score_completions` (what each generation round of training calls); sample_trajectories
builds the same trainer without this hook, so the inspection writes nothing into the run's logs.
Imported by train/train.py in the training interpreter.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp_server.runs import Run
from mcp_server.workspace import atomic_write_text

MAX_ROWS = 16  # a few groups are enough to read; a large generation batch of long rollouts would be megabytes


def _rows(trainer, output: dict) -> list[dict]:
    ids, completion = output["completion_ids"].tolist(), output["completion_mask"].tolist()
    tool = output["tool_mask"].tolist() if "tool_mask" in output else [[1] * len(r) for r in ids]
    pad = trainer._tokenizer.pad_token_id
    rows = []
    for i, row in enumerate(ids[:MAX_ROWS]):
        length = sum(completion[i])
        if not length:  # a truncated rollout that mask_truncated_completions masked whole: its ids up to the padding
            length = len(row)
            while length and row[length - 1] == pad:
                length -= 1
        rows.append({"step": trainer.state.global_step, "row": i, "completion_ids": row[:length],
                     "tool_mask": tool[i][:length],
                     "loss_mask": [a * b for a, b in zip(completion[i][:length], tool[i][:length], strict=True)]})
    return rows


def log_first_batch(trainer, run_dir: Path) -> None:
    """Have `trainer` write its first generated batch to the run's tool-batch.jsonl (main process only)."""
    generate_and_score = trainer._generate_and_score_completions
    path = Run(Path(run_dir)).tool_batch

    def logged(inputs):
        output = generate_and_score(inputs)
        if trainer._generate_and_score_completions is logged:  # once: the hook removes itself
            trainer._generate_and_score_completions = generate_and_score
            if trainer.accelerator.is_main_process:
                atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in _rows(trainer, output)))
        return output

    trainer._generate_and_score_completions = logged
