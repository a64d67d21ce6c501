"""The typed view of a GRPO config (recipe.config_view, generated into recipe/grpo_fields.py) stays the installed
TRL's: every field, its type and its default; and the light server reads it without importing TRL."""

from __future__ import annotations

import pytest
import subprocess
import sys

from mcp_server.recipe.config_view import GENERATED, render
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.recipe.trl_fields import installed_trl


def test_generated_fields_are_the_installed_trls():
    trl = installed_trl()
    assert GENERATED.read_text(encoding="utf-8") == render(trl), (
        f"recipe/grpo_fields.py is not TRL {trl['trl_version']}'s fields: run "
        "`python -m mcp_server.recipe.config_view --write` in the training interpreter and review the diff")
    assert GRPOView.DEFAULTS == {name: meta["default"] for name, meta in trl["fields"].items()}


def test_three_readings_of_one_config():
    values = {"num_generations": 16, "max_completion_length": None}
    view = GRPOView(values)
    assert (view.num_generations, view.max_completion_length, view.learning_rate) == (16, None, 1e-6)
    assert GRPOView.given(values).learning_rate is None  # only what the config says
    assert GRPOView(values, {"learning_rate": 3e-6}).learning_rate == 3e-6  # another TRL's defaults
    values["learning_rate"] = 5e-7  # a view reads the dict as it is now
    assert view.learning_rate == 5e-7
    view.datasets.append({"path": "json"})  # a list default is a copy: the next reader sees TRL's []
    assert GRPOView(values).datasets == [] and "datasets" not in values


@pytest.mark.slow
def test_the_view_imports_no_trl():
    code = ("import sys, mcp_server.config.grpo_fields; "
            "print([m for m in ('trl', 'torch', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_recipe_value_is_a_field_of_this_trl():
    from mcp_server.recipe.variants import SEED, TRAINING_SAMPLES, VARIANTS, recipe_values

    keys = set(SEED) | set(TRAINING_SAMPLES) | {k for values in VARIANTS.values() for k in values}
    assert keys <= set(GRPOView.DEFAULTS), keys - set(GRPOView.DEFAULTS)
    recipe = recipe_values("dapo", "lora", 70.0)
    values, why = recipe.values, recipe.reasons
    assert set(values) == set(why) and values["learning_rate"] == 5e-6  # the rate by size, written once


def test_every_field_the_metadata_declares_is_a_field_of_the_generated_trl():
    """config.fields declares each field's group, pin and engine names once (issue 46): a name there that TRL
    renamed or dropped would silently never match, so each must be a field of the generated table."""
    from mcp_server.config.fields import declared_names

    assert declared_names() <= set(GRPOView.DEFAULTS), declared_names() - set(GRPOView.DEFAULTS)


def test_pins_sampling_and_sections_follow_the_field_metadata():
    """The readers ask config.fields instead of keeping lists: the verdict pins every sampling field and leaves
    the schedule, layout, logging and saving unpinned; a field nobody classified is pinned (the safe default);
    sampling's TRL defaults cover every engine setting; the emitted YAML's sections come from the groups."""
    from mcp_server.config import fields
    from mcp_server.emission.emit import render_yaml
    from mcp_server.inspection.pins import REWARD_CONFIG_KEYS, SAMPLING_KEYS

    assert set(SAMPLING_KEYS) == set(fields.fields_in("sampling")) >= set(fields.ENGINES)
    assert set(REWARD_CONFIG_KEYS) == {"reward_funcs", "reward_weights", "reward_model_name_or_path"}
    assert not fields.pinned("learning_rate") and not fields.pinned("save_steps")
    assert fields.pinned("beta") and fields.pinned("loss_type") and fields.pinned("temperature")
    assert fields.engine_name("max_completion_length", "vllm") == "max_tokens"
    assert fields.engine_name("max_completion_length", "transformers") == "max_new_tokens"
    text = render_yaml({"beta": 0.0, "lora_r": 8, "dataset_name": "d", "reward_funcs": ["r"]}, "# h\n")
    assert [line for line in text.splitlines() if line.startswith("# ---")] == [
        "# --- model", "# --- data", "# --- rewards", "# --- GRPO / training"]


def test_the_probe_reads_the_declared_types_after_trls_parser_ran_in_this_process(tmp_path, monkeypatch):
    """transformers' HfArgumentParser rewrites a dataclass field's `type` in place (`list[str] | None` becomes
    `list[str]`); a process where TrlParser ran before the probe (the suite's files sharing an xdist worker, the
    trainer itself) read the rewritten types: the clean-clone suite at 8c1278b9 failed here. The probe reads the
    class bodies' declarations, so the generated file is the same whatever parsed the classes first."""
    from transformers import HfArgumentParser
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig
    from trl.scripts.grpo import GRPOScriptArguments

    from mcp_server.recipe.trl_fields import probe_installed_trl

    monkeypatch.setenv("LLM_FINETUNING_CACHE", str(tmp_path))  # no probe kept on disk from an earlier process
    HfArgumentParser((GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig))
    assert GENERATED.read_text(encoding="utf-8") == render(probe_installed_trl.__wrapped__())
