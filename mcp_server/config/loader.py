"""TRL's own reading of a run: its config parsed with `trl grpo`'s dataclasses and its training split loaded as
`trl grpo` loads it. train/train.py (through training.trainer.script_support), sampling (inspection.training_inputs)
and the rehearsal (recipe.rehearsal_run) read a run through these two functions, so what each sees is one thing.
Heavy imports (TRL, datasets) happen inside the functions: the light server imports this module's names only.
"""

from __future__ import annotations

from pathlib import Path


def parse_config(argv=None, values: dict | None = None, args_file: bool = True):
    """(script_args, training_args, model_args, dataset_args) from the config named in `argv` (default sys.argv),
    as `trl grpo` parses it, with model_init_kwargs filled in as `trl grpo` passes them to from_pretrained.
    `values`: the config's mapping as the caller already read it (the trainer's RunSpec): TRL's parser takes it
    instead of reading the file named after --config again (its `env:` block exported as TrlParser exports it).
    `args_file`: False reads no `<script>.args` file (transformers' HfArgumentParser reads sys.argv[0]'s, e.g.
    train/train.args, by default): the config's own values, for the trainer's check of what else set a field."""
    import os
    import sys

    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser
    from trl.scripts.grpo import GRPOScriptArguments

    parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig))
    if values is not None:
        argv = list(sys.argv[1:] if argv is None else argv)
        if "--config" in argv:  # the file the values were read from: not read again
            del argv[argv.index("--config"):argv.index("--config") + 2]
        values = dict(values)
        env = values.pop("env", {})
        if not isinstance(env, dict):  # TrlParser.parse_args_and_config's own checks and order
            raise ValueError("`env` field should be a dict in the YAML file.")
        os.environ.update({key: str(value) for key, value in env.items()})
        unknown = parser.set_defaults_with_config(**values)
        if unknown:
            raise ValueError(f"Unknown arguments from config file: {unknown}. Please remove them, add them to the "
                             "dataclass, or set `fail_with_unknown_args=False`.")
    if values is not None and not args_file:  # the config is already applied: the command line alone
        parsed = parser.parse_args_into_dataclasses(args=argv, look_for_args_file=False)
    else:
        parsed = parser.parse_args_and_config(argv)
    script_args, training_args, model_args, dataset_args = parsed
    kwargs = dict(revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code,
                  attn_implementation=model_args.attn_implementation, dtype=model_args.dtype)
    kwargs.update(training_args.model_init_kwargs or {})
    training_args.model_init_kwargs = kwargs
    return script_args, training_args, model_args, dataset_args


def train_dataset(script_args, dataset_args, column: str, cache_dir: str | Path):
    """The training split, its prompt column named 'prompt' as GRPOTrainer reads it, prepared in `cache_dir` (a
    fresh, empty folder the caller keeps while the rows are used: datasets maps its arrow files from there)."""
    return _split(script_args, dataset_args, column, cache_dir, script_args.dataset_train_split)


def evaluates(training_args) -> bool:
    """Whether the run evaluates: trl/scripts/grpo.py passes `eval_dataset=dataset[script_args.dataset_test_split]
    if training_args.eval_strategy != "no" else None`."""
    return str(training_args.eval_strategy) not in ("no", "IntervalStrategy.NO")


def eval_dataset(script_args, training_args, dataset_args, column: str, cache_dir: str | Path):
    """The evaluation split as `trl grpo` passes it when the run evaluates (`evaluates`), else None."""
    if not evaluates(training_args):
        return None
    return _split(script_args, dataset_args, column, cache_dir, script_args.dataset_test_split)


def _split(script_args, dataset_args, column: str, cache_dir: str | Path, split: str):
    import datasets
    from trl import get_dataset

    before = datasets.config.HF_DATASETS_CACHE
    datasets.config.HF_DATASETS_CACHE = Path(cache_dir)  # read at each load, so no earlier cache entry is used
    try:
        if dataset_args.datasets:
            dataset = get_dataset(dataset_args)[split]
        else:
            dataset = datasets.load_dataset(script_args.dataset_name, name=script_args.dataset_config, split=split)
    finally:
        datasets.config.HF_DATASETS_CACHE = before
    if column != "prompt":
        dataset = dataset.rename_column(column, "prompt")
    # The rows in memory, not mapped from the cache's arrow files: the trainer reads them at every step, and
    # what it hashed at its check is what trains even if the cache folder is changed later (issue 48).
    return dataset.flatten_indices(keep_in_memory=True) if hasattr(dataset, "flatten_indices") else dataset
