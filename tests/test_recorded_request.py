"""train/request.json is read through one typed model (recipe/recorded.py), through the doors: what emission wrote
reads back as written; a field this version does not know, or a value of the wrong type, is refused naming the file
and the field; an old record without the fields emission added later, and a target-only record beside a copied
config, read with their documented defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ANY_TEXT_REWARDS, run_cli, run_cli_json

from mcp_server.recipe.recorded import RecordedRequest, read_recorded


@pytest.fixture()
def emitted(workspace) -> Path:
    proc, result = run_cli_json("emit-config", "--model", "tiny", "--gpu", "cpu", "--run-name", "recorded",
                                "--rewards", json.dumps(ANY_TEXT_REWARDS), here=True)
    assert proc.returncode == 0, proc.stderr
    return Path(result["run_dir"])


def _status(run: Path):
    return run_cli("training-status", str(run), env={"LLM_FINETUNING_WORKSPACE": str(run.parents[1])})


def test_the_record_emission_wrote_reads_back_as_written(emitted):
    written = json.loads((emitted / "train" / "request.json").read_text())
    recorded = read_recorded(emitted / "train" / "request.json")
    assert recorded.model_dump() == written
    assert (recorded.gpu, recorded.cpu, recorded.trainer, recorded.variant_chosen) == ("cpu", True, "grpo", "grpo")
    proc = _status(emitted)
    assert proc.returncode == 0 and "has not been launched" in proc.stdout, proc.stderr


def test_an_unknown_field_is_refused_naming_it(emitted):
    path = emitted / "train" / "request.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "gpus": 8}))
    proc = _status(emitted)
    assert proc.returncode == 2
    assert f"{path} is not a recorded recipe request (train/request.json): unknown field 'gpus' (did you mean " \
           "'gpu'?)" in proc.stderr, proc.stderr
    listed = run_cli_json("list-runs", here=True, env={"LLM_FINETUNING_WORKSPACE": str(emitted.parents[1])})[1]
    (run,) = listed["runs"]
    assert run["state"] == "unreadable" and "unknown field 'gpus'" in run["error"]


def test_a_value_of_the_wrong_type_is_refused_naming_its_field(emitted):
    path = emitted / "train" / "request.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "num_gpus": "eight"}))
    proc = run_cli("validate-config", str(emitted / "train" / "config.yaml"))
    assert proc.returncode == 2 and "request.json is not a recorded recipe request" in proc.stderr, proc.stderr
    assert "num_gpus: Input should be a valid integer" in proc.stderr


def test_an_old_record_reads_with_the_documented_defaults(emitted):
    """A run emitted before agentic GRPO: no trainer, variant_chosen or is_moe (nor guard, nor report_to)."""
    path = emitted / "train" / "request.json"
    old = {k: v for k, v in json.loads(path.read_text()).items()
           if k not in ("trainer", "variant_chosen", "is_moe", "guard", "report_to", "tools", "tool_timeout_s",
                        "environment")}
    path.write_text(json.dumps(old))
    recorded = read_recorded(path)
    assert (recorded.trainer, recorded.variant_chosen, recorded.is_moe, recorded.guard) == ("grpo", None, None,
                                                                                              "warn")
    assert _status(emitted).returncode == 0
    proc = run_cli("validate-config", str(path.parent / "config.yaml"), "--no-rehearse")  # the record, not a step
    assert proc.returncode == 0 and "CPU" in proc.stdout, proc.stdout + proc.stderr


def test_a_target_only_record_beside_a_copied_config_is_its_target(tmp_path, emitted):
    """A config copied with a request.json that holds only the target (as a person writes one)."""
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "config.yaml").write_text((emitted / "train" / "config.yaml").read_text())
    (copy / "request.json").write_text(json.dumps({"gpu": "cpu"}))
    recorded = read_recorded(copy / "request.json")
    assert (recorded.model, recorded.dataset, recorded.num_gpus) == (None, None, 1)
    assert recorded.fields_given() == {"gpu": "cpu"}
    assert read_recorded(tmp_path / "missing.json") == RecordedRequest()
