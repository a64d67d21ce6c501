"""resume_training with a patch keeps the config a person reads (issue 49, a new user's walk): `resume-training RUN
--patch '{"max_steps": 4}'` re-dumped train/config.yaml and so deleted every reason emission wrote above its values
and its header, kept the launched config nowhere outside git, and its answer never said what the patch changed.
Now only the patched keys' lines change, a key the config lacks is appended under a `# --- patched at resume <n>`
comment, the launched config is kept under archive/resume-patch-<n>/, and the answer names each field old -> new.

A run that succeeded (or whose run.json is gone) is refused by resume_training, with or without a patch;
launch_training on it had told the person to resume it. The two now agree.
"""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import cli_here, run_cli_json
from support import emit_run, pass_inspection


def _patched(original: str, launched: dict, patch: dict, n: int = 1) -> str:
    """The config text a patch of keys the config holds should leave: each key's line, under its note."""
    text = original
    for key, value in patch.items():
        line = yaml.safe_dump({key: launched[key]})
        assert text.count(line) == 1, line
        text = text.replace(line, f"# patched at resume {n}: was {json.dumps(launched[key])}\n"
                            + yaml.safe_dump({key: value}))
    return text


def test_a_resume_patch_rewrites_only_the_patched_keys_lines(workspace, tiny_model):
    """The core call resume_training makes (apply_patch) on an emitted config: a present key's line rewritten in
    place, an absent key appended under its comment, the header and every reason byte-identical, the launched
    config kept; undone (a later gate's refusal), the run is as it was with no copy left behind."""
    from mcp_server.emission.emit import EMITTED_HEADER
    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.runs import Run
    from mcp_server.training.resume_patch import apply_patch

    run = Run(emit_run("patched-in-place"))
    original = run.config.read_text()
    launched = yaml.safe_load(original)
    assert "save_total_limit" not in launched and original.count("\n#") > 20  # the reasons the walk saw deleted
    patch = {"max_steps": launched["max_steps"] + 2, "logging_steps": launched["logging_steps"] + 1,
             "save_total_limit": 2}
    refusals, undo, changed = apply_patch(run, RunSpec.of_run(run), patch)
    assert not refusals, refusals
    text = run.config.read_text()
    assert text.startswith(EMITTED_HEADER) and yaml.safe_load(text) == {**launched, **patch}
    present = {k: v for k, v in patch.items() if k in launched}
    assert text == _patched(original, launched, present) + (
        "\n# --- patched at resume 1: resume_training's patch; the launched config is "
        "archive/resume-patch-1/config.yaml\nsave_total_limit: 2\n")
    assert (run.archive / "resume-patch-1" / "config.yaml").read_text() == original
    assert changed == {k: {"old": launched.get(k), "new": v} for k, v in patch.items()}
    undo()
    assert run.config.read_text() == original and not run.archive.exists()


@pytest.mark.slow
def test_resume_training_with_a_patch_through_the_cli_keeps_every_reason(workspace, tiny_model):
    """The walk's door: `resume-training RUN --patch '{"max_steps": N}'` on a stopped run with a checkpoint. It
    resumes; train/config.yaml differs from the launched one only in max_steps' line; the launched config is kept;
    the answer (JSON and the readable summary) says max_steps old -> new. The trainer it starts is stopped."""
    from test_run_tampering import stop_any_trainer, stopped_run

    template = emit_run("template")
    pass_inspection(template)
    run_dir = stopped_run((workspace, template), "walk49")
    readable = stopped_run((workspace, template), "walk49-readable")  # the same, for the readable summary
    config = run_dir / "train" / "config.yaml"
    original = config.read_text()
    launched = yaml.safe_load(original)
    patch = {"max_steps": launched["max_steps"] + 2}
    try:
        proc, out = run_cli_json("resume-training", str(run_dir), "--patch", json.dumps(patch), here=True)
    finally:
        stop_any_trainer(run_dir)
    assert proc.returncode == 0 and out["launched"], out
    assert config.read_text() == _patched(original, launched, patch)
    assert (run_dir / "archive" / "resume-patch-1" / "config.yaml").read_text() == original
    assert out["patched"] == {"max_steps": {"old": launched["max_steps"], "new": patch["max_steps"]}}
    said = f"max_steps {launched['max_steps']} -> {patch['max_steps']}"
    assert said in out["message"], out["message"]
    try:
        proc = cli_here("resume-training", str(readable), "--patch", json.dumps(patch))
    finally:
        stop_any_trainer(readable)
    assert proc.returncode == 0 and said in proc.stdout, proc.stdout + proc.stderr


# (cell, what launch's advice says instead, what resume's refusal says): runs resume_training refuses by state
REFUSED_BY_RESUME = {"succeeded": ("resume_training refuses a succeeded run", "succeeded"),
                     "running/record-lost": ("restore run.json", "Without the launch record")}


@pytest.mark.parametrize("which", list(REFUSED_BY_RESUME))
def test_launch_never_tells_the_person_to_resume_a_run_resume_refuses(tmp_path, monkeypatch, which):
    """A succeeded run, and one whose run.json is gone (constructed cells of the run-state table): launch-training
    refuses it, and its advice is what works; resume-training refuses it too, with a patch raising max_steps as
    without (the walk: launch said "resume_training to continue from the latest checkpoint", and resume
    refused)."""
    from test_run_states import Cell, build, lineage, make_template

    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(tmp_path))
    phase, _, variant = which.partition("/")
    run_dir = build(tmp_path, make_template(tmp_path), Cell(phase, tuple(lineage(phase)), variant or None, id=which))
    advised, refused = REFUSED_BY_RESUME[which]
    proc, out = run_cli_json("launch-training", str(run_dir), here=True)
    assert proc.returncode == 1 and [r["gate"] for r in out["refusals"]] == ["state"], out
    advice = out["refusals"][0]["how_to_clear"]
    assert "checkpoint" in out["refusals"][0]["message"], out  # it holds one: the advice that named resume
    assert "resume_training to continue" not in advice and advised in advice and "emit_grpo_config" in advice, advice
    for extra in ([], ["--patch", json.dumps({"max_steps": 8})]):
        proc, out = run_cli_json("resume-training", str(run_dir), *extra, here=True)
        assert proc.returncode == 1 and [r["gate"] for r in out["refusals"]] == ["state"], (extra, out)
        assert refused in out["refusals"][0]["message"], (extra, out["refusals"])


PATCHES = {"sampling": {"temperature": 0.7}, "config": {"beta": 0.02}, "reward_config": {"reward_weights": [2.0]}}
HAND_EDITS = {"none": {}, "sampling": {"top_p": 0.5}, "config": {"seed": 7}}


@pytest.mark.parametrize("edited", sorted(HAND_EDITS))
@pytest.mark.parametrize("patched", sorted(PATCHES))
def test_a_patch_after_a_guard_stop_moves_only_its_own_pin_never_a_hand_edit(workspace, tiny_model, patched, edited):
    """The whole table (issue 48, round 7): a run reviewed (the verdict's pins), its config then edited by hand in
    no group, the sampling settings or the other settings, then stopped by its guard and resumed with a patch of a
    sampling setting, another setting or the reward weights (apply_patch, as resume_training calls it). The
    verdict's pin of the patch's group moves to the patched config only where the config still matched the review
    there: a group edited by hand keeps its reviewed pin (the gate still refuses the edit), and no other pin moves."""
    from mcp_server.inspection.pins import config_pins
    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.runs import Run
    from mcp_server.training.resume_patch import apply_patch
    from support import record_launch, write_signed

    run = Run(emit_run(f"guard-{patched}-{edited}"))
    reviewed = config_pins(run)
    run.inspection.mkdir(exist_ok=True)
    run.verdict.write_text(json.dumps({"verdict": "pass", "pins": reviewed}))
    config = yaml.safe_load(run.config.read_text())
    run.config.write_text(yaml.safe_dump({**config, **HAND_EDITS[edited]}, sort_keys=False))  # after the review
    record_launch(run.dir, "g" * 32)
    run.logs.mkdir(parents=True, exist_ok=True)
    write_signed(run.stopped, {"step": 2, "by": "guard", "code": "entropy_collapse", "launch_id": "g" * 32})
    write_signed(run.guard, {"mode": "stop", "step": 2, "stopped": {"code": "entropy_collapse", "step": 2},
                             "findings": [{"code": "entropy_collapse", "severity": "error",
                                           "patch": PATCHES[patched]}], "launch_id": "g" * 32})
    refusals, _, _ = apply_patch(run, RunSpec.of_run(run), PATCHES[patched])
    assert not refusals, refusals
    verdict, now = json.loads(run.verdict.read_text()), config_pins(run)
    moves = patched != edited
    want = {group: now[group] if group == patched and moves else pin for group, pin in reviewed.items()}
    assert verdict["pins"] == want, (patched, edited)
    assert [u["pins"] for u in verdict.get("pin_updates", [])] == ([[patched]] if moves else [])
    if edited != "none":
        assert now[edited] != verdict["pins"][edited]  # the hand edit is still what the gate refuses


def _other(key: str, now):
    """A value of `key` other than `now` (the launched one, or TRL's default), of the field's own type."""
    from mcp_server.config.grpo_fields import GRPOView

    kind = str(GRPOView.__annotations__.get(key, ""))
    if isinstance(now, bool) or now is None and kind.startswith("bool"):
        return not now
    if isinstance(now, (int, float)):
        return now + (1 if isinstance(now, int) else 0.5)
    if now is None and kind.startswith(("int", "float")):
        return 2 if kind.startswith("int") else 0.5
    return f"{now}-other" if isinstance(now, str) or kind.startswith("str") else {"other": now}


# validate_spec raises (TRL's GRPOConfig.__post_init__: AttributeError 'cp_enabled') on a mapping here, where it
# should answer an error naming the field: not this table's contract (said in round 17's fix report)
VALIDATION_RAISES = {"parallelism_config"}


@pytest.mark.parametrize("column", ["not proposed", "proposed", "another value proposed"])
def test_a_guard_stopped_resume_changes_a_pinned_field_only_as_the_findings_propose(workspace, tiny_model, column):
    """The table (round 17, b05): every field a resume patch may change (resume_patch.patchable) x whether the
    guard's findings of the stop (its signed guard.json) propose that field at the patched value, propose it at
    another value, or do not name it. A field the verdict pins (config.fields.pinned) is refused by name, before
    anything is written, unless a finding proposes that very value; a field it does not pin is the patch's to
    change as on any resume. (A patch of the finding's learning_rate plus temperature 1.9 and top_k 3 had moved the
    verdict's sampling pin and trained on settings nobody reviewed.)"""
    from mcp_server.config.fields import pinned
    from mcp_server.config.grpo_fields import GRPOView
    from mcp_server.inspection.pins import config_pins
    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.runs import Run
    from mcp_server.training.resume_patch import apply_patch, patchable
    from support import record_launch, write_signed

    run = Run(emit_run("guard-table"))
    run.inspection.mkdir(exist_ok=True)
    run.verdict.write_text(json.dumps({"verdict": "pass", "pins": config_pins(run)}))
    record_launch(run.dir, "g" * 32)
    run.logs.mkdir(parents=True, exist_ok=True)
    write_signed(run.stopped, {"step": 2, "by": "guard", "code": "kl_explosion", "launch_id": "g" * 32})
    config, verdict = run.config.read_text(), run.verdict.read_text()
    spec, wrong = RunSpec.of_run(run), []
    for key in patchable():
        if key in VALIDATION_RAISES and column == "proposed":
            continue
        now = spec.values.get(key, GRPOView.DEFAULTS.get(key))
        value = _other(key, now)
        proposal = {"not proposed": {"beta": 0.5} if key != "beta" else {"learning_rate": 1e-7},
                    "proposed": {key: value}, "another value proposed": {key: _other(key, value)}}[column]
        write_signed(run.guard, {"mode": "stop", "step": 2, "stopped": {"code": "kl_explosion", "step": 2},
                                 "findings": [{"code": "kl_explosion", "severity": "error", "patch": proposal}],
                                 "launch_id": "g" * 32})
        refusals, undo, _ = apply_patch(run, spec, {key: value})
        said = " ".join(r.message for r in refusals)
        refused = f"{key}: {json.dumps(value)} is not proposed" in said
        if refused != (pinned(key) and column != "proposed"):
            wrong.append((key, value, "refused" if refused else "not refused", said[:200]))
        if refused and (run.config.read_text() != config or run.verdict.read_text() != verdict):
            wrong.append((key, "written though refused"))
        undo()
    assert not wrong, wrong


def test_a_resume_patch_is_applied_to_the_config_bytes_checked_never_to_a_second_read(workspace, tiny_model):
    """Round 18 (issue 48, "what trains is what was reviewed"): apply_patch read train/config.yaml again after
    resume_training had read and checked it (RunSpec, its sha256 against the launch's): a config changed in between
    was patched and trained. Now the patch is applied to the bytes checked; a config that is not them is refused
    naming it, and nothing is written (the edit stays as it is, no kept copy)."""
    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.runs import Run
    from mcp_server.training.resume_patch import apply_patch

    run = Run(emit_run("patched-after-a-check"))
    spec = RunSpec.of_run(run)  # as resume_training reads and checks it
    launched = yaml.safe_load(run.config.read_text())
    line = yaml.safe_dump({"learning_rate": launched["learning_rate"]})
    edited = run.config.read_text().replace(line, "learning_rate: 0.5\n")
    assert edited != run.config.read_text()
    run.config.write_text(edited)  # changed after the check
    refusals, _, changed = apply_patch(run, spec, {"max_steps": launched["max_steps"] + 2})
    assert [r.gate for r in refusals] == ["config_hash"] and "train/config.yaml changed" in refusals[0].message
    assert run.config.read_text() == edited and not changed and not run.archive.exists()
