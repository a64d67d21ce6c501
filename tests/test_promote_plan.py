"""Walk 9: `promote-checkpoint` on a LoRA run printed nothing for 69 s (the checkpoint loading), then "plan: 40
goldens ... from a model of unknown size", with no time estimate, where the guide promises one for every
evaluation. A trainer's LoRA checkpoint (adapter_config.json, no config.json) has its base model's size; the
first line says at once what promote does, and the checkpoint's stage gives its plan, with a time, before it
loads the checkpoint. Through the CLI, in a process of its own as the user ran it."""

from __future__ import annotations

import re

import pytest

from conftest import run_cli
from test_evaluation import make_run, small_task  # noqa: F401 - small_task is a fixture


@pytest.mark.slow  # decodes
def test_promote_plans_a_lora_checkpoint_by_its_base_model_and_says_first_what_it_does(workspace, tiny_model,
                                                                                      small_task):  # noqa: F811
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    adapter = workspace / "adapter"
    model.save_pretrained(adapter)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(adapter)
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "config.json").is_file()
    run = make_run(workspace, "lora", tiny_model, adapter)
    proc = run_cli("evaluate-model", str(tiny_model), "--goldens", str(small_task[0]), "--run", str(run),
                   cwd=workspace)
    assert proc.returncode == 0 and "baseline written" in proc.stdout, proc.stdout + proc.stderr

    proc = run_cli("promote-checkpoint", str(run), cwd=workspace, process=True)
    assert proc.returncode in (0, 1), proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("  ... ")]
    assert said and said[0].startswith(f"  ... judging {run / 'checkpoints'} of {run.name}: "), proc.stderr
    plan = next(line for line in said if "checkpoint on the goldens: starting; plan:" in line)
    assert "unknown size" not in plan and re.search(r"from a [\d.,]+M-parameter model", plan), plan
    assert re.search(r"decoding about \d", plan), plan  # a time, as evaluate-model's plan gives
