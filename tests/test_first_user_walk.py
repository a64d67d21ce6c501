"""Issue 49, a new user's walk (the second pass): what they met, through the door they used.

- `sample-completions RUN --dataset plain.jsonl`, run in the workspace holding plain.jsonl, failed "no such file":
  the sampler works in the run directory, and the relative path was looked up there. It is now resolved as every
  door resolves one (workspace.find_existing: the workspace, runs/, the current directory) before that.
- promotion-report.md named a converted smollm2-135m by its cache path where the model card named its hub id:
  both now name it the same way (model_ref.report_name).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import cli_here, run_cli_json
from support import converted_smollm2, emit_run

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


def test_the_promotion_report_names_a_converted_model_as_the_model_card_does(workspace, tiny_model, tmp_path):
    """A directory as mcp_server/smollm2.py converts it (its smollm2.json names the model and the weights), built
    from the tiny model's weights so nothing is converted here."""
    from mcp_server import smollm2

    converted, goldens = converted_smollm2(tiny_model, tmp_path)
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
