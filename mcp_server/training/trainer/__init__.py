"""The trainer process: what the emitted train/train.py imports and runs in the training interpreter (under
train/launch.sh, train/launch.slurm or by hand), apart from the server. Nothing here starts, reads or stops a run
from outside; the server reads what it writes (progress.jsonl, guard.json, outcome.json) through the run's files.

- train_template.py, train_agentic_template.py  the trainer templates emission copies into train/train.py
- script_support.py  what both templates share: the config parsed as TRL does, the data, the trainer's arguments,
                     training and saving
- dynamic_sampling.py  DAPO's dynamic sampling: a GRPOTrainer subclass (train/dynamic_sampling.json turns it on)
- progress.py        the progress callback: progress.jsonl, the stop request and signals, the outcome markers
- guard.py           the live guard the callback runs (diagnosis's guard rules); training_status reads its file
- vllm_cpu.py        vLLM's weight sync on a CPU (colocate and server mode)
- tool_batch.py      an agentic run's first trained batch, logged
- tracker_dirs.py    report_to's trackers kept inside the run

The inspection's checks of what trains (inspection/trained.py, inspection/training_inputs.py) run here too; they
stay with the inspection that pins what they check.
"""
