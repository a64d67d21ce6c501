"""GRPO training for run {{RUN}}, emitted by llm-finetuning.

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

from pathlib import Path  # noqa: E402

from datasets import load_dataset  # noqa: E402
from trl import DatasetMixtureConfig, GRPOConfig, GRPOTrainer, ModelConfig, TrlParser, get_dataset  # noqa: E402
from trl import get_peft_config, get_quantization_config  # noqa: E402
from trl.scripts.grpo import GRPOScriptArguments  # noqa: E402

try:
    from mcp_server.inspection.trained import reviewed_reward_funcs
    from mcp_server.training.progress import ProgressCallback, write_outcome
except ImportError:
    sys.exit("llm-finetuning is not installed in this Python: pip install llm-finetuning (or the plugin's root)")

RUN_DIR = Path(__file__).resolve().parents[1]
PROMPT_COLUMN = "{{PROMPT_COLUMN}}"


def model_init_kwargs(model_args, training_args) -> dict:
    """What `trl grpo` passes to from_pretrained: the model section's revision, attention and dtype, TRL's
    trust_remote_code, and anything in model_init_kwargs (which wins)."""
    kwargs = dict(
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    kwargs.update(training_args.model_init_kwargs or {})
    return kwargs


def build_trainer(argv=None):
    """The GRPOTrainer for the config named on the command line (`argv`, default sys.argv), not yet trained."""
    parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig))
    script_args, training_args, model_args, dataset_args = parser.parse_args_and_config(argv)
    training_args.model_init_kwargs = model_init_kwargs(model_args, training_args)

    if dataset_args.datasets:
        dataset = get_dataset(dataset_args)[script_args.dataset_train_split]
    else:
        dataset = load_dataset(script_args.dataset_name, name=script_args.dataset_config,
                               split=script_args.dataset_train_split)
    if PROMPT_COLUMN != "prompt":
        dataset = dataset.rename_column(PROMPT_COLUMN, "prompt")

    reward_funcs, _ = reviewed_reward_funcs(RUN_DIR)  # exits when the code is not what the verdict reviewed
    return GRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
        callbacks=[ProgressCallback(RUN_DIR)],
    )


def main():
    trainer = build_trainer()
    training_args = trainer.args
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    if trainer.accelerator.is_main_process:
        write_outcome(RUN_DIR, "succeeded", global_step=trainer.state.global_step, output_dir=training_args.output_dir)


if __name__ == "__main__":
    main()
