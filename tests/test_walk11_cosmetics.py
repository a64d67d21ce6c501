"""Walk 11's cosmetic findings, each at the door the user met it: the review's config patch offering what the
config already holds, diagnose_run printing one evidence line twice, check-environment's CPU line contradicting the
README's CPU model, and export's refusal after a REJECT reading as if promote_checkpoint had never run."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli, run_cli_json
from support import diagnose_series, emit_run, healthy_rows


@pytest.mark.slow
def test_the_review_offers_no_patch_the_config_already_holds(workspace):
    """review.md said "Config patch from these samples: `{"log_completions": true}`" to a config holding it."""
    run = emit_run("patch")
    assert "log_completions: true" in (run / "train" / "config.yaml").read_text()
    proc, sampled = run_cli_json("sample-completions", str(run), "--num-prompts", "13", here=True)
    assert proc.returncode == 0, proc.stderr
    assert "log_completions" not in sampled["lengths"]["config_patch"], sampled["lengths"]
    assert run_cli("inspect-rewards", str(run)).returncode == 0
    line = next(x for x in (run / "inspection" / "review.md").read_text().splitlines()
                if x.startswith("- Config patch from these samples"))
    assert "log_completions" not in line, line


def test_one_logged_step_is_one_evidence_line_not_two(tmp_path):
    """diagnose-run printed `frac_reward_zero_std @ step 1 = 1.0` twice (the first and the last log, one log)."""
    from mcp_server.diagnosis.tools import human_diagnosis

    rows = [{**healthy_rows(1)[0], "frac_reward_zero_std": 1.0, "reward_std": 0.0, "grad_norm": 0.0}]
    diagnosis = diagnose_series(tmp_path, rows)
    found = next(f for f in diagnosis.findings if f.code == "no_reward_signal")
    keys = [(e.metric, e.step, str(e.value)) for e in found.evidence]
    assert len(keys) == len(set(keys)), keys
    lines = human_diagnosis(diagnosis).splitlines()
    assert sum("frac_reward_zero_std @ step 1 = 1.0" in line for line in lines) == 1, lines


def test_check_environment_on_a_cpu_names_the_readmes_cpu_model(workspace):
    """"models of a few million parameters" while the README recommends smollm2-135m (134.5M) on a CPU."""
    proc, report = run_cli_json("check-environment", here=True, cwd=workspace)
    assert proc.returncode in (0, 1), proc.stderr
    if report["gpus"]:
        pytest.skip("a GPU machine: the CPU line is not said")
    assert "few million" not in report["allows"] and "smollm2-135m" in report["allows"], report["allows"]
    assert "smollm2-135m" in Path(__file__).resolve().parents[1].joinpath("README.md").read_text()


@pytest.mark.slow
def test_a_gracefully_stopped_run_does_not_look_finished(workspace):
    """After a graceful stop, checkpoints/ held a model at its top level as a finished run's does (train_and_save
    saved into output_dir after the loop the stop ended): now only the stop's checkpoint holds it."""
    from support import pass_inspection, wait_for

    run = emit_run("stopped", max_steps=200)
    pass_inspection(run)
    proc, launched = run_cli_json("launch-training", str(run), here=True)
    assert proc.returncode == 0 and launched["launched"], proc.stderr
    try:
        wait_for(run, lambda s: (s.step or 0) >= 1 or s.state not in ("starting", "running"))
        proc, stop = run_cli_json("stop-training", str(run), "--timeout", "300", here=True)
        assert proc.returncode == 0 and stop["graceful"], stop
    finally:
        status = wait_for(run, lambda s: s.state not in ("starting", "running", "stopping"))
    assert status.state == "stopped", status
    out = run / "checkpoints"
    top = sorted(p.name for p in out.iterdir() if p.is_file())
    assert not [name for name in top if name.endswith(".safetensors") or name == "config.json"], top
    assert any(p.name.startswith("checkpoint-") for p in out.iterdir()), sorted(p.name for p in out.iterdir())
