"""Issue 49, the tenth new-user walk (a fresh clone, the README only): what it met, through the door it used.

- A data file without a `prompt` column was refused with "no column 'prompt'; columns are: question, answer", and
  emit-config had no flag to name another column: the refusal now names the columns there, the closest match and
  the flag that maps it (`--prompt-column`, emit_grpo_config's prompt_column, now on the command line too), and
  that flag is what the suggestion says to type.
- export-model (and promote-checkpoint, through the same load) printed transformers' FutureWarning
  "`is_gradient_checkpointing` is deprecated" on a LoRA checkpoint: peft reads the deprecated alias while it wraps
  the model (model_ref.PEFT_ALIAS_READ); the door's stderr now carries no FutureWarning.
- A model-name typo waited about 20 s for TRL to import before emit-config said "did you mean": the name is now
  checked (built-in names, local directories, the local cache) before anything imports TRL or transformers.
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from pathlib import Path

import pytest

from conftest import run_cli
from support import ANY_TEXT_REWARDS, TINY_OVERRIDES, emit_config

from mcp_server.model_ref import PEFT_ALIAS_READ
from mcp_server.runs import Run
from mcp_server.tiny import make_task


def _questions(path, rows: int = 16):
    """`rows` of the tiny task with their chat-message prompts in a `question` column, no `prompt` column."""
    path.write_text("".join(json.dumps({"question": row["prompt"], "answer": row["answer"]}) + "\n"
                            for row in make_task(rows, seed=3)))
    return path


def test_a_missing_prompt_column_names_the_columns_the_closest_and_the_flag_that_maps_it(workspace):
    data = _questions(workspace / "questions.jsonl")
    overrides = [arg for key, value in TINY_OVERRIDES.items() for arg in ("--override", f"{key}={value}")]
    refused = run_cli("emit-config", "--model", "tiny", "--dataset", str(data), "--gpu", "cpu", *overrides)
    assert refused.returncode == 2, refused.stdout
    error = refused.stderr.strip().splitlines()[-1]
    assert error.startswith("error: prompt_column: no column 'prompt' in the data (its columns: 'question', "
                            "'answer')"), error
    assert "The closest match is 'question'" in error and "rename it to 'prompt'" in error, error
    suggested = re.search(r"`emit-config (--prompt-column \S+)`", error)
    assert suggested, error  # before: "no column 'prompt'; columns are: question, answer", and no such flag
    mapped = run_cli("emit-config", "--model", "tiny", "--dataset", str(data), "--gpu", "cpu", *overrides,
                     *suggested.group(1).split(), "--run-name", "mapped")
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
    assert json.loads(Run(workspace / "runs" / next(p.name for p in (workspace / "runs").iterdir())).request
                      .read_text())["prompt_column"] == "question"


def test_a_column_with_no_text_is_refused_naming_the_flag_with_no_guess(workspace):
    data = workspace / "numbers.jsonl"
    data.write_text(json.dumps({"id": 1, "answer": "2"}) + "\n")
    refused = run_cli("emit-config", "--model", "tiny", "--dataset", str(data), "--gpu", "cpu")
    assert refused.returncode == 2
    error = refused.stderr.strip().splitlines()[-1]
    assert "(its columns: 'id', 'answer')" in error and "none of them holds text or chat messages" in error, error
    assert "`emit-config --prompt-column NAME`" in error and "closest" not in error, error


def test_a_missing_answer_column_says_the_nearest_and_the_flag(workspace):
    data = workspace / "answr.jsonl"
    data.write_text(json.dumps({"prompt": "What is 1 + 1?", "answr": "2"}) + "\n")
    refused = run_cli("emit-config", "--model", "tiny", "--dataset", str(data), "--gpu", "cpu")
    assert refused.returncode == 2
    error = refused.stderr.strip().splitlines()[-1]
    assert error.startswith("error: answer_column: column 'answer'"), error
    assert "Did you mean 'answr'?" in error and "`emit-config --answer-column NAME`" in error, error


@pytest.mark.slow  # a process: warnings print on its stderr as a person's terminal shows them
def test_exporting_a_lora_checkpoint_prints_no_future_warning(workspace, tiny_model):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = emit_config(model="tiny", gpu="cpu", finetune="lora", run_name="lora", rewards=ANY_TEXT_REWARDS,
                         overrides=TINY_OVERRIDES)
    assert result.validation.valid, result.validation
    run = Run(Path(result.run_dir))
    with warnings.catch_warnings():  # this test's own wrapping reads the alias too (model_ref.PEFT_ALIAS_READ)
        warnings.filterwarnings("ignore", message=PEFT_ALIAS_READ, category=FutureWarning)
        adapter = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                                 LoraConfig(r=4, target_modules="all-linear"))
        adapter.save_pretrained(run.checkpoints)  # what a LoRA run's trainer saves: the adapter and its tokenizer
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(run.checkpoints)
    proc = run_cli("export-model", str(run.dir), "--allow-unpromoted", process=True, timeout=600,
                   env={"LLM_FINETUNING_CLI_WORKER": "0", "PYTHONWARNINGS": "default"})
    assert proc.returncode == 0, proc.stderr
    assert "(LoRA merged)" in proc.stdout, proc.stdout  # the adapter was loaded through peft and merged
    assert "FutureWarning" not in proc.stderr, proc.stderr  # before: `is_gradient_checkpointing` is deprecated


@pytest.mark.slow  # a process, its imports profiled
def test_a_model_name_typo_is_refused_before_trl_or_transformers_is_imported(workspace):
    """Walk 10: emit-config --model HuggingFaceTB/SmolLM2-135M-Instrct --gpu cpu imported TRL (18 s on a quiet
    2-core machine) before its did-you-mean. The training interpreter is this one and no warm worker is started, so
    anything TRL's checks import would be imported by this process (PYTHONPROFILEIMPORTTIME lists each import)."""
    typo = "HuggingFaceTB/SmolLM2-135M-Instrct"
    proc = run_cli("emit-config", "--model", typo, "--dataset", "tiny", "--gpu", "cpu", process=True, timeout=300,
                   env={"HF_HUB_OFFLINE": "1", "LLM_FINETUNING_CLI_WORKER": "0", "PYTHONPROFILEIMPORTTIME": "1",
                        "LLM_FINETUNING_PYTHON": sys.executable})
    assert proc.returncode == 2, proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors and errors[-1].startswith(f"error: model: '{typo}' is not a local model directory"), proc.stderr
    assert "Did you mean 'smollm2-135m'?" in errors[-1], errors
    imported = {m[1] for m in re.finditer(r"^import time:.*\|\s+([\w.]+)$", proc.stderr, re.M)}
    assert len(imported) > 50, "no import was profiled"
    assert not imported & {"trl", "transformers", "torch"}, sorted(imported & {"trl", "transformers", "torch"})
