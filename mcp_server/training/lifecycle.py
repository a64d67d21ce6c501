"""A run's life on this machine as the files it leaves, in the order they are written: the declaration the
run-state table (tests/test_run_states.py) is generated from. A new state or a new file written by a launch gets
its rows there without a new test; a phase or write without a row fails that test.

Each write names a `runs.Run` member (or a checkpoint's file); a run's process can die before or after each.
What the doors then say (training_status, list_runs, stop_training, resume_training, promote_checkpoint) is
derived from what is on disk (runstate.derive_state, runrecord.checkpoints), never from what was meant to be.
"""

from __future__ import annotations

from mcp_server.training.trainer.digest import CHECKPOINT_DIGEST

# Every phase a run goes through (issue 48): only emitted; its inspection gate open; a launch under way; training;
# a stop asked; and how it ended; a resume of an ended run.
PHASES = ("emitted", "gated", "launching", "running", "stopping", "stopped", "failed", "succeeded", "resumed")

# One launch's writes in order, by Run member, with who writes it. "checkpoint" is a checkpoint-N folder written
# file by file (CHECKPOINT_WRITES); "final_model" the model train_and_save writes into output_dir at the end.
LAUNCH_WRITES: tuple[tuple[str, str], ...] = (
    ("run_json", "launch_training (state starting, the launcher's pid, the launch id)"),
    ("stdout", "train/launch.sh (the launch line, then the trainer's output)"),
    ("train_begin", "the trainer's progress callback, when training starts"),
    ("progress", "the trainer's progress callback, each logged step"),
    ("checkpoint", "the Trainer's save at save_steps, then the callback's record of it (train/logs/saves.jsonl)"),
    ("stop_request", "stop_training"),
    ("stopped", "the trainer, at the step end after a stop request"),
    ("final_model", "train_and_save: the model saved into output_dir, then its record (the final save); not after "
                    "a stop, whose checkpoint holds the model"),
    ("outcome", "the trainer's write_outcome: succeeded, stopped or failed"),
    ("exit_code", "train/launch.sh, when the training command ends"),
)

# A checkpoint as the Trainer writes it (transformers' Trainer._save_checkpoint: the model, the optimizer and
# scheduler, the RNG state, trainer_state.json) and the digest the run's callback writes last, with its line in the
# run's train/logs/saves.jsonl (digest.record_save; the line is what counts): a resume needs
# every one (without optimizer.pt it would silently restart the optimizer), so a folder missing any is never
# the latest checkpoint.
CHECKPOINT_WRITES = ("config.json", "model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                     "trainer_state.json", CHECKPOINT_DIGEST)

# The states the SLURM launcher alone reports (the scheduler's word: launchers/slurm/job.py); a local run never
# reaches them, so the local table has no row for them.
SCHEDULER_STATES = ("pending", "cancelled", "timed_out", "preempted")
