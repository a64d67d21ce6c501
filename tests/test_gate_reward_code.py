"""Issue 33, "Gate bypasses" (reward code never hashed) and two mutation survivors: the reward-code hash that
the verdict pins and the trainer re-checks covers every callable a reward reaches: a user module exporting a
NamedReward, the dotted reward a length_penalty wraps, a rubric_judge's dotted judge and the files of a local
judge model, with the local modules each imports (relative imports included). A verdict whose reward-code pin
is edited by hand to the edited code's hash opens nothing. And the training process's own check (issue 25, "The
inspection gate"), run for real on an emitted train.py: its reward code is the reviewed code, train/ off its path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import checkout_env
from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
from mcp_server.inspection.models import InspectRequest, VerdictRequest
from mcp_server.inspection.review import inspect_rewards
from mcp_server.rewards import reward_code_sha256
from support import hand_made_run

NAMED = '''from mcp_server.rewards.named import NamedReward

from .helper import VALUE


def _score(completions, columns):
    return [VALUE if (c if isinstance(c, str) else c[-1]["content"]).strip() else 0.0 for c in completions]


named = NamedReward("named", _score)
'''
SCORED = '''from .helper import VALUE


def scored(completions, **kwargs):
    return [VALUE for _ in completions]
'''
JUDGE = '''from .helper import VALUE


def judge(text):
    return "PASS" if VALUE else "FAIL"
'''


@pytest.fixture()
def user_package(tmp_path, monkeypatch) -> Path:
    """userpkg_<test>/: a helper and three reward modules that import it relatively, importable here and in
    children (a name of its own per test: a module is imported once per process)."""
    package = tmp_path / f"userpkg_{abs(hash(str(tmp_path)))}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helper.py").write_text("VALUE = 1.0\n")
    (package / "named.py").write_text(NAMED)
    (package / "scores.py").write_text(SCORED)
    (package / "judges.py").write_text(JUDGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    return package


def _judge(judge: str) -> dict:
    return {"name": "rubric_judge", "params": {"rubric": "answers the question", "judge": judge,
                                               "policy_model": "tiny", "judge_family": "llama",
                                               "policy_family": "qwen"}}


def test_every_callable_a_reward_reaches_is_in_the_hash(user_package, tmp_path):
    judge_model = tmp_path / "judge-model"
    judge_model.mkdir()
    (judge_model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    weights = judge_model / "model.safetensors"
    weights.write_bytes(b"\0" * 64)
    pkg = user_package.name
    specs = {
        "dotted, relative import": [{"name": f"{pkg}.scores.scored"}],
        "a user module's NamedReward": [{"name": f"{pkg}.named.named"}],
        "length_penalty wrapping a dotted reward": [
            {"name": "length_penalty", "params": {"reward": {"name": f"{pkg}.scores.scored"}}}],
        "rubric_judge with a dotted judge": [_judge(f"{pkg}.judges.judge")],
    }
    before = {what: reward_code_sha256(spec) for what, spec in specs.items()}
    local_judge = reward_code_sha256([_judge(str(judge_model))])

    (user_package / "helper.py").write_text("VALUE = 0.25\n")  # the module every reward imports, relatively
    after = {what: reward_code_sha256(spec) for what, spec in specs.items()}
    assert [what for what in specs if before[what] == after[what]] == []

    weights.write_bytes(b"\1" * 64)  # the judge model's weights, same size
    assert reward_code_sha256([_judge(str(judge_model))]) != local_judge


def test_an_edited_reward_module_closes_the_gate_whatever_its_pin_says(workspace, tiny_model, user_package):
    right = "<reasoning>1 + 1 = 2</reasoning><answer>2</answer>"
    pkg = user_package.name
    run_dir = hand_made_run(workspace, tiny_model, "named", [[right, "", "", ""]] * 13, ["2"] * 13,
                             rewards=[{"name": f"{pkg}.named.named"}])
    inspect_rewards(InspectRequest(run=str(run_dir)))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="ana", agree_with_rest=True))
    assert check_inspection_gate(run_dir).passed

    (user_package / "helper.py").write_text("VALUE = 9.0\n")
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "the reward changed" in gate.reason, gate.reason

    # The verdict's pin hand-set to the edited code's hash: it is no longer the reviewed reward's.
    verdict_file = run_dir / "inspection" / "verdict.json"
    verdict = json.loads(verdict_file.read_text())
    verdict["pins"]["reward_code"] = reward_code_sha256([{"name": f"{pkg}.named.named"}])
    verdict_file.write_text(json.dumps(verdict))
    gate = check_inspection_gate(run_dir)
    assert not gate.passed and "reward-code hash is not the reviewed reward's" in gate.reason, gate.reason


@pytest.mark.slow
def test_the_trainer_refuses_reward_code_it_was_not_reviewed_on_and_ignores_train_dir(workspace, tiny_model):
    """An emitted train.py, run as launch.sh runs it: train/ shadows nothing, and a reward hash that is not the
    one it was handed (a helper edited after launch_training) stops it before any training."""
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.inspection.trained import REWARD_SHA_ENV
    from mcp_server.recipe.models import GRPORecipeRequest

    emitted = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_name="trainer",
                                                 overrides={"max_steps": 1, "report_to": "none"}))
    run_dir = Path(emitted.run_dir)
    (run_dir / "train" / "datasets.py").write_text("raise SystemExit('shadowed: train/datasets.py')\n")
    shadow = run_dir / "train" / "mcp_server"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise SystemExit('shadowed: train/mcp_server')\n")
    proc = subprocess.run([sys.executable, "train/train.py", "--config", "train/config.yaml"], cwd=run_dir,
                          capture_output=True, text=True, timeout=300,
                          env=checkout_env({REWARD_SHA_ENV: "0" * 64, "CUDA_VISIBLE_DEVICES": ""}))
    assert "shadowed" not in proc.stdout + proc.stderr
    assert proc.returncode == 3 and "refusing to train" in proc.stderr, proc.stderr[-2000:]
    assert not (run_dir / "train" / "logs" / "progress.jsonl").exists()


def test_a_reward_helper_imported_from_a_zip_archive_is_refused_in_words(workspace, tiny_model, tmp_path):
    """Round 15: a reward importing a helper from a zip archive on sys.path (zipimport) failed the review with
    "unexpected TrainingInterpreterError: NotADirectoryError .../h.zip/h.py". Refused, naming the archive and the
    fix; no verdict can be recorded on it."""
    import zipfile

    from conftest import run_cli

    tag = abs(hash(str(tmp_path)))
    archive = tmp_path / f"zhelp_{tag}.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        packed.writestr(f"zhelp_{tag}.py", "VALUE = 1.0\n")
    (workspace / f"zrew_{tag}.py").write_text(
        f"import sys\nsys.path.insert(0, {str(archive)!r})\nfrom zhelp_{tag} import VALUE\n\n\n"
        "def scored(completions, **kwargs):\n    return [VALUE for _ in completions]\n")
    run_dir = hand_made_run(workspace, tiny_model, "zipped", [["a", "b", "c", "d"]] * 13, ["2"] * 13,
                            rewards=[{"name": f"zrew_{tag}.scored"}])
    proc = run_cli("inspect-rewards", str(run_dir), env={"LLM_FINETUNING_WORKSPACE": str(workspace)}, cwd=workspace)
    assert proc.returncode == 2 and "unexpected" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    # named where the import happens (rewards/source_only.py refuses a user zip archive on sys.path)
    assert f"zhelp_{tag} would be imported from the zip archive {archive}" in proc.stderr, proc.stderr
    assert "unpack it" in proc.stderr and not (run_dir / "inspection" / "review.json").exists()
