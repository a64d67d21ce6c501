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
