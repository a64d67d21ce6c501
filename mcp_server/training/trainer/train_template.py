"""GRPO training for run {{RUN}}, emitted by llm-finetuning (trainer: GRPO single-turn).

Runs train/config.yaml (which `trl grpo --config` also accepts) with this run's rewards from
train/rewards.json and writes one progress line per logged step to train/logs/progress.jsonl.

    python train/train.py --config train/config.yaml
"""

import os
import sys

# train/ is sys.path[0] when this script runs: a train/datasets.py or train/mcp_server/ would shadow the code the
# inspection verdict reviewed. It leaves the path before anything is imported (os and sys are already loaded).
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != _HERE]

try:  # report_to's trackers write inside the run unless their variables say elsewhere; set before TRL imports them
    from mcp_server.training.trainer.tracker_dirs import keep_trackers_in_run
except ImportError:
    sys.exit("llm-finetuning is not installed in this Python: pip install llm-finetuning (or the plugin's root)")
keep_trackers_in_run(os.path.dirname(_HERE))
# HF generate grows its KV cache by torch.cat every step; expandable segments let the freed blocks merge instead of
# leaving cached segments behind (the memory plan's generation phase); a value already set is kept
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

from pathlib import Path  # noqa: E402

try:
    from mcp_server.inspection.trained import check_reviewed_inputs, reviewed_reward_funcs
    from mcp_server.training.trainer.script_support import (eval_dataset, grpo_trainer, parse_config, train_and_save,
                                                            train_dataset, trainer_kwargs)
except ImportError:
    sys.exit("llm-finetuning is not installed in this Python: pip install llm-finetuning (or the plugin's root)")

RUN_DIR = Path(__file__).resolve().parents[1]
PROMPT_COLUMN = "{{PROMPT_COLUMN}}"


def build_trainer(argv=None):
    """The GRPOTrainer for the config named on the command line (`argv`, default sys.argv), not yet trained."""
    script_args, training_args, model_args, dataset_args = parse_config(argv)
    dataset = train_dataset(script_args, dataset_args, PROMPT_COLUMN, RUN_DIR)
    evaluation = eval_dataset(script_args, training_args, dataset_args, PROMPT_COLUMN, RUN_DIR)  # as `trl grpo`
    # Exits when the rows, prompt column, settings, model or reward code are not what the verdict reviewed.
    check_reviewed_inputs(RUN_DIR, dataset, PROMPT_COLUMN, script_args, training_args, model_args)
    reward_funcs, _ = reviewed_reward_funcs(RUN_DIR)
    # TRL's GRPOTrainer, or with train/dynamic_sampling.json its dynamic-sampling subclass
    return grpo_trainer(RUN_DIR, reward_funcs=reward_funcs, eval_dataset=evaluation,
                        **trainer_kwargs(RUN_DIR, training_args, model_args, dataset))


def main():
    train_and_save(build_trainer(), RUN_DIR)


if __name__ == "__main__":
    main()
