"""What every emitted training script shares (the trainer seam): parsing the config as `trl grpo` does, the
training data, the model kwargs, the progress callback with its guard, and the end of training.

One template per trainer imports it (`train_template.py`: GRPO single-turn; `train_agentic_template.py`: GRPO
with tools and an environment); emission copies the template the run's trainer names into train/train.py.
Imported by train/train.py in the training interpreter.
"""

from __future__ import annotations

from pathlib import Path

from datasets import load_dataset
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser, get_dataset, get_peft_config
from trl import get_quantization_config
from trl.scripts.grpo import GRPOScriptArguments

from mcp_server.training.progress import ProgressCallback, write_outcome


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


def parse_config(argv=None):
    """(script_args, training_args, model_args, dataset_args) from the config named in `argv` (default sys.argv)."""
    parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig))
    script_args, training_args, model_args, dataset_args = parser.parse_args_and_config(argv)
    training_args.model_init_kwargs = model_init_kwargs(model_args, training_args)
    return script_args, training_args, model_args, dataset_args


def train_dataset(script_args, dataset_args, prompt_column: str):
    """The training split, its prompt column named 'prompt' as GRPOTrainer reads it."""
    if dataset_args.datasets:
        dataset = get_dataset(dataset_args)[script_args.dataset_train_split]
    else:
        dataset = load_dataset(script_args.dataset_name, name=script_args.dataset_config,
                               split=script_args.dataset_train_split)
    if prompt_column != "prompt":
        dataset = dataset.rename_column(prompt_column, "prompt")
    return dataset


def trainer_kwargs(run_dir: Path, training_args, model_args, dataset) -> dict:
    """The GRPOTrainer arguments every trainer shares: the model, config, data, PEFT/quantisation and the
    progress callback (which carries the live guard). With vLLM's CPU build, TRL's weight sync to vLLM goes through
    vLLM's reload (training.vllm_cpu: TRL's own fails on a CPU)."""
    if training_args.use_vllm:
        from mcp_server.training import vllm_cpu

        vllm_cpu.install(str(run_dir / "cache" / "vllm-weights"))
    return dict(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
        callbacks=[ProgressCallback(run_dir)],
    )


def train_and_save(trainer, run_dir: Path) -> None:
    """Train (resuming when the config says so), save, and record the outcome on the main process."""
    training_args = trainer.args
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    if trainer.accelerator.is_main_process:
        write_outcome(run_dir, "succeeded", global_step=trainer.state.global_step, output_dir=training_args.output_dir)
