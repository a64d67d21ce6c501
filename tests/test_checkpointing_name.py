"""Activation checkpointing under the name the installed transformers reads (issue 49): transformers 5.25 declares
TrainingArguments.gradient_checkpointing a deprecated alias of activation_checkpointing, and TRL's GRPOConfig
defaults the old name to True, so a config that names neither printed a FutureWarning at every start (sample,
train, promote). The emitted config names the replacement the installed code declares; a config written with the
old name (a person's, a published one) still validates, plans and trains as it says, with a warning that names the
new name; and every reader of the setting (the planner, the levers, the typed view) reads either name, the new one
first, as TrainingArguments resolves the pair."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import yaml

from mcp_server.config import GRPOView
from mcp_server.memory.models import MemoryPlanRequest
from mcp_server.memory.planner import plan_memory
from support import emit_run


def _installed_replacement() -> str | None:
    """The field the installed TrainingArguments declares gradient_checkpointing an alias of (None: no alias)."""
    from transformers import TrainingArguments

    declared = {f.name: f for f in dataclasses.fields(TrainingArguments)}
    text = (declared["gradient_checkpointing"].metadata.get("help") or "") if "gradient_checkpointing" in declared \
        else ""
    return next((name for name in declared if f"alias of `{name}`" in text), None)


def _parsed(run_dir):
    """train/config.yaml as train.py parses it (TRL's own parser), and every warning the parse raised."""
    from mcp_server.config.loader import parse_config

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _, args, _, _ = parse_config(["--config", str(run_dir / "train" / "config.yaml")], args_file=False)
    return args, [str(w.message) for w in seen if issubclass(w.category, FutureWarning)]


def test_the_emitted_config_turns_checkpointing_on_without_a_future_warning(workspace):
    replacement = _installed_replacement()
    run = emit_run("ckpt")
    written = yaml.safe_load((run / "train" / "config.yaml").read_text())
    args, future = _parsed(run)
    assert not [w for w in future if "checkpointing" in w], future
    assert args.gradient_checkpointing is True  # TRL's default, acted on
    if replacement is not None:
        assert written[replacement] is True and "gradient_checkpointing" not in written
        assert getattr(args, replacement) is True
    else:  # an older transformers: no replacement, nothing renamed
        assert "activation_checkpointing" not in written


def test_an_override_of_the_old_name_is_written_under_the_new_one(workspace):
    replacement = _installed_replacement()
    if replacement is None:
        pytest.skip("the installed transformers has no replacement for gradient_checkpointing")
    run = emit_run("ckpt-off", gradient_checkpointing=False)
    written = yaml.safe_load((run / "train" / "config.yaml").read_text())
    assert written[replacement] is False and "gradient_checkpointing" not in written
    args, future = _parsed(run)
    assert args.gradient_checkpointing is False and not [w for w in future if "checkpointing" in w]


@pytest.mark.parametrize("config, on", [
    ({"activation_checkpointing": False}, False),
    ({"gradient_checkpointing": False}, False),
    ({"gradient_checkpointing": True, "activation_checkpointing": False}, False),  # the new name wins
    ({"gradient_checkpointing": False, "activation_checkpointing": True}, True),
    ({}, True),  # TRL's default
])
def test_the_planner_and_the_view_read_either_name(config, on):
    plan = plan_memory(MemoryPlanRequest(model="qwen2.5-1.5b", gpu="H100", config=config, validate_levers=False))
    assert plan.run["gradient_checkpointing"] is on
    assert GRPOView(config).gradient_checkpointing is on and GRPOView(config).activation_checkpointing is on


def test_the_checkpointing_lever_patches_the_name_the_config_uses():
    base = dict(model="Qwen/Qwen2.5-3B-Instruct", gpu="RTX 4090", use_vllm=True, dtype="float32", beta=0.0,
                validate_levers=False)
    for key in ("activation_checkpointing", "gradient_checkpointing"):
        plan = plan_memory(MemoryPlanRequest(**base, config={key: False}))
        lever = next(lv for lv in plan.levers if lv.name == "gradient_checkpointing")
        assert lever.patch == {key: True}, lever


def test_a_config_with_the_old_name_validates_with_a_warning_naming_the_new_one(tmp_path):
    from mcp_server.memory.verdict import validate_config
    from mcp_server.recipe.models import ValidateRequest

    replacement = _installed_replacement()
    if replacement is None:
        pytest.skip("the installed transformers has no replacement for gradient_checkpointing")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"model_name_or_path": "qwen2.5-1.5b", "gradient_checkpointing": True,
                                    "output_dir": "out", "reward_funcs": ["mcp_server.rewards.format_reward"]}))
    result = validate_config(ValidateRequest(config_path=str(path), gpu="H100"))
    assert result.valid, result.findings
    found = [f for f in result.findings if f.field == "gradient_checkpointing"]
    assert [f.code for f in found] == ["deprecated_field"] and found[0].severity == "warning"
    assert "transformers" in found[0].message and replacement in found[0].fix


@pytest.mark.slow
def test_sampling_an_emitted_run_prints_no_future_warning_about_checkpointing(workspace, capfd):
    """The end-to-end row: what a person sees from `sample-completions` on a freshly emitted run holds no
    FutureWarning about it. The CLI's `main` in this process (issue 45: a CLI process cost minutes of the slow lane),
    so its training-interpreter part (parsing the config as train.py does, loading and sampling) runs here too:
    every warning any of it raises is recorded, whatever the filters, and descriptors 1 and 2 are read (capfd) for
    what a worker printed."""
    from conftest import run_cli

    run = emit_run("ckpt-sample")
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        proc = run_cli("sample-completions", str(run), "--num-prompts", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = capfd.readouterr()
    said = proc.stdout + proc.stderr + out.out + out.err
    raised = [str(w.message) for w in seen if issubclass(w.category, FutureWarning)]
    assert not [w for w in raised if "checkpointing" in w], raised
    assert "FutureWarning" not in said or "checkpointing" not in said, said[-2000:]
    assert not [line for line in said.splitlines() if "checkpointing" in line and "deprecated" in line], said[-2000:]
