"""Issue 49, a new user's walk (the second pass): what they met, through the door they used.

- `sample-completions RUN --dataset plain.jsonl`, run in the workspace holding plain.jsonl, failed "no such file":
  the sampler works in the run directory, and the relative path was looked up there. It is now resolved as every
  door resolves one (workspace.find_existing: the workspace, runs/, the current directory) before that.
- A NOT VALID emission (`--override beta=-1`, any error but an unresolvable reward or a value TRL refuses) left a
  run directory that list-runs showed as not_launched: it now writes nothing, unless its only errors are of sizing
  for the target (emission.emit.KEPT_FOR_SIZING), which it keeps and names.
- promotion-report.md named a converted smollm2-135m by its cache path where the model card named its hub id:
  both now name it the same way (model_ref.report_name).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import ANY_TEXT_REWARDS, cli_here, run_cli_json
from support import TINY_OVERRIDES, emit_run

from mcp_server.runs import Run


@pytest.mark.parametrize("given", ["plain.jsonl", "./plain.jsonl", "data/plain.jsonl"])
def test_sample_completions_reads_a_relative_dataset_from_the_workspace(workspace, tiny_model, given):
    run = Run(emit_run("relative"))
    place = workspace / given
    place.parent.mkdir(parents=True, exist_ok=True)
    place.write_text("".join(json.dumps({"prompt": f"Say {i}."}) + "\n" for i in range(3)))
    proc, sampled = run_cli_json("sample-completions", run.name, "--dataset", given, "--num-prompts", "2", "--n",
                                 "2", "--max-new-tokens", "4", here=True, cwd=workspace)
    assert proc.returncode == 0, proc.stderr
    assert sampled["dataset_rows"] == 3, sampled
    assert json.loads(run.samples_meta.read_text())["dataset"] == str(place.resolve())


EMIT = ("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--rewards",
        json.dumps(ANY_TEXT_REWARDS),
        *(arg for key, value in TINY_OVERRIDES.items() for arg in ("--override", f"{key}={value}")))
# One NOT VALID emission per rule family (recipe.registry.TOPICS) that an emission can meet, and an error it finds.
# Not here: "rehearsal" (emission does not rehearse), "TRL's own checks" (the rules before them catch what a
# GRPOConfig refuses), "memory" (memory_does_not_fit is sizing: kept, as the last test shows for its kin).
FAMILIES = {
    "fields": (["--override", "beta=-1"], "out_of_range"),
    "run": (["--override", "generation_batch_size=8", "--override", "steps_per_generation=2"],
            "generation_batch_conflict"),
    "rewards": (["--override", "reward_weights=[1.0,2.0]"], "reward_weights_mismatch"),
    "start-up and effect": (["--finetune", "lora", "--override", "sync_ref_model=true", "--override", "beta=0.04"],
                            "sync_ref_model_with_peft"),
    "dynamic sampling": (["--dynamic-sampling", '{"enabled": true}', "--override", "scale_rewards=batch"],
                         "dynamic_sampling_batch_scaling"),
    "start-up rehearsal": (["--override", "use_vllm=true", "--override", "vllm_mode=colocate", "--override",
                            "vllm_tensor_parallel_size=3"], "vllm_tensor_parallel_world"),
    "saving and logging": (["--override", "logging_steps=1000"], "too_few_logged_rows"),
    "architecture": (["--override", "max_completion_length=100000"], "completion_beyond_context"),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_not_valid_emission_leaves_no_run_directory(workspace, tiny_model, family):
    extra, code = FAMILIES[family]
    before = sorted(p.name for p in workspace.iterdir())
    proc = cli_here(*EMIT, *extra, "--run-name", "bad", "--json", env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and code in [f["code"] for f in result["validation"]["findings"]
                                             if f["severity"] == "error"], result["validation"]
    assert result["kept"].startswith("NOT VALID: nothing was written (no run directory was created"), result["kept"]
    runs = workspace / "runs"
    assert not runs.exists() or list(runs.iterdir()) == [], list(runs.iterdir())  # nor a hidden .emit-* staging
    assert sorted(p.name for p in workspace.iterdir() if p.name != "runs") == before
    listed = cli_here("list-runs", "--json", env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    assert "bad" not in listed.stdout, listed.stdout


def test_an_emission_not_valid_only_for_its_sizing_is_kept_and_says_why(workspace, tiny_model):
    """On 8 GPUs, 4 micro-batches of 16 make a generation batch of more than 75 prompts: the tiny task's."""
    emit = [arg if arg != "cpu" else "A100" for arg in EMIT]
    proc = cli_here(*emit, "--num-gpus", "8", "--override", "gradient_accumulation_steps=4", "--override",
                    "per_device_train_batch_size=16", "--run-name", "big", "--json",
                    env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    result = json.loads(proc.stdout)
    errors = [f["code"] for f in result["validation"]["findings"] if f["severity"] == "error"]
    assert proc.returncode == 1 and errors == ["dataset_smaller_than_generation_batch"], result["validation"]
    assert result["kept"].startswith("NOT VALID only for its sizing (the data set is smaller than one generation "
                                     "batch)"), result["kept"]
    assert Run(Path(result["run_dir"])).config.is_file()


def test_the_promotion_report_names_a_converted_model_as_the_model_card_does(workspace, tiny_model, tmp_path):
    """A directory as mcp_server/smollm2.py converts it (its smollm2.json names the model and the weights), built
    from the tiny model's weights so nothing is converted here."""
    from mcp_server import smollm2

    converted = tmp_path / "cache" / "smollm2-135m-q4_1-0123456789abcdef-v1"
    shutil.copytree(tiny_model, converted)
    (converted / "smollm2.json").write_text(json.dumps({"name": smollm2.NAME, "weights_of": smollm2.HUB_ID}))
    goldens = tmp_path / "goldens.jsonl"
    goldens.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                               for i in range(3)))
    run = workspace / "runs" / "2026-01-01-named"
    (run / "train").mkdir(parents=True)
    shutil.copytree(tiny_model, run / "checkpoints")
    config = {"model_name_or_path": str(converted), "output_dir": "checkpoints", "max_completion_length": 8}
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "train" / "rewards.json").write_text(json.dumps([{"name": "correctness_reward", "params": {},
                                                             "weight": 1.0}]))
    proc = cli_here("promote-checkpoint", str(run), "--goldens", str(goldens))
    assert proc.returncode in (0, 1), proc.stderr  # PROMOTE or REJECT: the report is written either way
    line = next(x for x in (run / "promotion-report.md").read_text().splitlines() if x.startswith("- Base model:"))
    assert line.startswith(f"- Base model: `{smollm2.HUB_ID}` (loaded from `{converted}`); baseline "), line
    assert Path(line.rsplit("`", 2)[-2]).name.startswith(f"baseline-smollm2-135m-v{smollm2.BUILD_VERSION}--"), line
