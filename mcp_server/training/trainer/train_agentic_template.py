"""GRPO training for run {{RUN}}, emitted by llm-finetuning (trainer: GRPO with tools and environments).

Runs train/config.yaml with this run's rewards (train/rewards.json) and the environment and tools named in
train/agentic.json, passed to GRPOTrainer as `environment_factory` and `tools` (`trl grpo` accepts only
reward_funcs). Every environment and tool call runs under the recorded timeout. TRL's start-up requirements
(transformers release, a chat template it can parse tool calls from, `reset`, typed and documented tools)
are checked from the tokenizer before the model loads.

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

import json  # noqa: E402
from pathlib import Path  # noqa: E402

from trl import GRPOTrainer  # noqa: E402

try:
    from mcp_server.agentic.checks import check_agentic
    from mcp_server.agentic.spec import AgenticRecord, load
    from mcp_server.inspection.trained import check_reviewed_inputs, reviewed_reward_funcs
    from mcp_server.runs import Run
    from mcp_server.training.trainer.script_support import parse_config, train_and_save, train_dataset, trainer_kwargs
    from mcp_server.training.trainer.tool_batch import log_first_batch
except ImportError:
    sys.exit("llm-finetuning is not installed in this Python: pip install llm-finetuning (or the plugin's root)")

RUN_DIR = Path(__file__).resolve().parents[1]
PROMPT_COLUMN = "{{PROMPT_COLUMN}}"


def build_trainer(argv=None):
    """The GRPOTrainer for the config named on the command line (`argv`, default sys.argv), not yet trained."""
    script_args, training_args, model_args, dataset_args = parse_config(argv)
    record = json.loads(Run(RUN_DIR).agentic.read_text())
    values = {"model_name_or_path": model_args.model_name_or_path, "model_revision": model_args.model_revision,
              "max_completion_length": training_args.max_completion_length,
              "max_tool_calling_iterations": training_args.max_tool_calling_iterations}
    errors = [f for f in check_agentic(record, values) if f["severity"] == "error"]
    if errors:
        sys.exit("\n".join(f"{f['field']}: {f['message']}" for f in errors))
    environment_factory, tools = load(AgenticRecord(**record))
    dataset = train_dataset(script_args, dataset_args, PROMPT_COLUMN, RUN_DIR)
    # Exits when the rows, prompt column, settings, model or reward code are not what the verdict reviewed.
    check_reviewed_inputs(RUN_DIR, dataset, PROMPT_COLUMN, script_args, training_args, model_args)
    reward_funcs, _ = reviewed_reward_funcs(RUN_DIR)
    return GRPOTrainer(reward_funcs=reward_funcs, tools=tools or None, environment_factory=environment_factory,
                       **trainer_kwargs(RUN_DIR, training_args, model_args, dataset))


def main():
    trainer = build_trainer()
    log_first_batch(trainer, RUN_DIR)  # train/logs/tool-batch.jsonl: the first batch's ids and tool_mask
    train_and_save(trainer, RUN_DIR)


if __name__ == "__main__":
    main()
