"""Issue 49's seventh walk: what our own runs print is ours to keep clean. transformers 5.25 warns (FutureWarning) at
every start that sets gradient_checkpointing and not activation_checkpointing, as TRL's default does; the launcher
printed the workspace with a double slash where the shell's PWD held one."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

from mcp_server.training.sft_warm_start import WarmStartSettings, sft_config

ROOT = Path(__file__).resolve().parents[1]


def test_the_warm_starts_config_warns_nothing(tmp_path):
    settings = WarmStartSettings(max_steps=2, check_every=1, target=0.5, learning_rate=1e-5, batch_size=2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        config = sft_config(tmp_path, settings)
    assert not [w for w in seen if issubclass(w.category, FutureWarning)], [str(w.message) for w in seen]
    assert config.gradient_checkpointing is True  # TRL's default, as before: only its name changed


def test_the_launcher_names_the_workspace_with_single_slashes(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("launch_server_under_test", ROOT / "scripts" / "launch_server.py")
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    (tmp_path / "project").mkdir()
    monkeypatch.setenv("PWD", f"{tmp_path}//project/")
    assert launcher.project_dir() == str(tmp_path / "project")
