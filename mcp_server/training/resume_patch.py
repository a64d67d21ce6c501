"""resume_training with a patch: the way on after a guard stop (or any diagnosis) without starting over.

The patch (the root-cause finding's, from diagnose_run or train/logs/guard.json) is merged into the launched
train/config.yaml and validated first; a patch that does not validate is refused and nothing is written. Then
the config is written, and after a guard stop the inspection verdict's pins move for exactly the pins the patch
changes (a longer max_completion_length changes the sampling pin, a learning rate none), never the model's or the
data's: everything else the verdict vouches for must still match, so the gate still refuses any other change. A
pinned field changes only to a value the stop's findings (guard.json) propose: anything else is refused by name. A
run that was never guard-stopped moves no pin: its patch may change only what the verdict does not pin. The run
record keeps the patch (run.json `resume_patch`). After a guard stop the checkpoint resumed from is the last one
saved before the stop's step: the one saved at the stop already holds the failure.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path
from typing import Callable

import yaml

from mcp_server.inspection.pins import config_pins
from mcp_server.inspection.refilter import refilter_run
from mcp_server.recipe.runspec import RunSpec
from mcp_server.recipe.validate import validate_spec
from mcp_server.config.fields import group_of, pinned
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.errors import UserInputError
from mcp_server.runs import Run
from mcp_server.userfiles import decode, parse_yaml, read_bytes
from mcp_server.training.models import GateRefusal
from mcp_server.training.run_archive import ArchiveRefused, ArchiveSlot, remove_slot
from mcp_server.training.runrecord import read_run_json, signed_record
from mcp_server.workspace import atomic_write_json, atomic_write_text, sha256_file


FIXED_PINS = ("model", "data")  # what no patch moves
# Fields whose patched value would not act on a resume, and why: apply_patch refuses a change to any of them. The
# checkpoint's optimizer.pt, scheduler.pt and trainer_state.json values are put back from the config by the
# trainer (training/trainer/resumed_settings.py); these it cannot put back (issue 49).
NOT_ACTING = {
    "seed": "the checkpoint's rng_state.pth replaces the generators seed sets (Trainer._load_rng_state), and the "
            "sampler's order would change mid-epoch, so the batches skipped on resume would not be the ones trained",
    "data_seed": "the sampler's order would change mid-epoch, so the batches skipped on resume would not be the "
                 "ones trained",
    "optim": "the checkpoint's optimizer.pt holds the launched optimizer's state; another optimizer cannot load it",
    "optim_args": "arguments of the optimizer's constructor: the checkpoint's optimizer.pt replaces its state and "
                  "hyperparameters, and what the constructor alone uses is not re-applied",
    "optim_target_modules": "which modules the launched optimizer holds: the checkpoint's optimizer.pt is that one's",
    "resume_from_checkpoint": "resume_training passes the run's own checkpoint on the command line",
    "use_dora": "it adds parameters the checkpoint's adapter and optimizer.pt do not hold",
}
# With use_adaptive_entropy, TRL's GRPOTrainer._load_optimizer_and_scheduler puts the checkpoint's controller value
# (entropy_ctrl_state.json) over entropy_coef: the controller's own state, which a patch does not override.
ADAPTIVE = ("entropy_coef", "with use_adaptive_entropy the checkpoint's entropy_ctrl_state.json replaces it "
            "(TRL's GRPOTrainer._load_optimizer_and_scheduler): the controller goes on from its own value")


def not_acting(patch: dict, launched: dict) -> dict[str, str]:
    """{field: why} for each field of `patch` that changes a NOT_ACTING field's launched value."""
    def now(key: str):
        return launched.get(key, GRPOView.DEFAULTS.get(key))

    idle = {k: NOT_ACTING[k] for k, v in patch.items() if k in NOT_ACTING and now(k) != v}
    field, why = ADAPTIVE
    if field in patch and patch[field] != now(field) and patch.get("use_adaptive_entropy", now("use_adaptive_entropy")):
        idle[field] = why
    return idle


def patchable() -> tuple[str, ...]:
    """The fields a resume patch may change: the installed TRL's GRPO config fields outside FIXED_PINS' groups, less
    NOT_ACTING (tests/test_resume_patch_acts.py holds a row for each: the value the resumed trainer uses)."""
    return tuple(k for k in GRPOView.DEFAULTS if group_of(k) not in FIXED_PINS and k not in NOT_ACTING)


def config_hash_refusal(run: Run, record: dict, config: dict) -> GateRefusal:
    """train/config.yaml edited since the launch: which fields changed (against run.json's launched_config), whether
    the verdict pins each, and the way on: the launched values back and resume_training's patch for the fields a
    patch may change (issue 49: a changed learning_rate was told only "restore the launched config")."""
    launched, commit = record.get("launched_config"), record.get("git_commit")
    head = (f"train/config.yaml changed since the run started (sha256 {sha256_file(run.config)[:12]} vs "
            f"{str(record.get('config_sha256'))[:12]} at launch); the checkpoints belong to the old config")
    restore = (f"restore the launched config (git show {commit}:<run>/train/config.yaml) " if commit else
               "restore the launched config ")
    changed = ({k: (launched.get(k), config.get(k)) for k in dict.fromkeys([*launched, *config])
                if launched.get(k) != config.get(k)} if isinstance(launched, dict) else {})
    if not changed:
        same = ": its values are the launched ones (comments or layout differ)" if isinstance(launched, dict) else ""
        return GateRefusal(gate="config_hash", message=head + same, how_to_clear=restore + "to resume, or emit a "
                           "new run directory to train with the new one")
    said = "; ".join(f"{k}: {json.dumps(old)} at launch, {json.dumps(new)} now"
                     + (" (the inspection verdict pins it)" if pinned(k) else " (the verdict does not pin it)")
                     for k, (old, new) in changed.items())
    back = ", ".join(f"{k}: {json.dumps(old)}" for k, (old, _) in changed.items())
    patch = {k: new for k, (_, new) in changed.items()}
    idle = not_acting(patch, launched)
    if idle:  # a patch of these is refused (issue 49): never advised
        way = (f"put the launched values back ({back}) to resume; a resume cannot apply "
               + "; ".join(f"{k} ({why})" for k, why in idle.items())
               + ": emit a new run directory with the change to train with it")
    elif any(pinned(k) for k in changed):
        way = (f"put the launched values back ({back}) to resume; a change of a field the verdict pins trains on "
               "something nobody reviewed: emit a new run directory with it (or, after a guard stop, "
               "resume_training's patch of the stop's finding)")
    else:
        way = (f"put the launched values back in train/config.yaml ({back}), then resume with the change as a "
               f"patch: resume_training with patch {json.dumps(patch)} (CLI: llm-finetuning resume-training "
               f"{run.name} --patch '{json.dumps(patch)}'), which validates it, records it in run.json and keeps "
               "the launched config under archive/")
    return GateRefusal(gate="config_hash", message=f"{head}: {said}", how_to_clear=way)


def patch_problems(spec: RunSpec, patch: dict) -> list[str]:
    """Validation errors of the patched config that the patch causes or leaves on a field it sets."""
    before = {(x.code, x.field) for x in validate_spec(spec).findings if x.severity == "error"}
    after = validate_spec(spec.with_values({**spec.values, **patch})).findings
    return [f"{x.code} [{x.field}]: {x.message}" for x in after if x.severity == "error"
            and ((x.code, x.field) not in before or x.field in patch)]


def apply_patch(run: Run, spec: RunSpec, patch: dict) -> tuple[list[GateRefusal], Callable[[], None], dict]:
    """Validate, write the patched config and move the verdict's pins for what it changes. Returns (refusals,
    undo, changed): refusals (nothing written) when the patch is not a mapping of fields or does not validate; undo
    puts the launched config and the verdict back (and drops its kept copy) when a later gate refuses the resume;
    changed: {field: {"old": launched value (None when unset), "new": patched value}} for each field it changes."""
    if not isinstance(patch, dict) or not all(isinstance(k, str) for k in patch):
        return [GateRefusal(gate="config", message="patch must be a JSON object of GRPOConfig fields",
                            how_to_clear="pass the patch of diagnose_run's root-cause finding as it stands")], \
            _nothing, {}
    idle = not_acting(patch, spec.values)
    if idle:
        return [GateRefusal(gate="config", message="the patch changes what a resume cannot apply: " + "; ".join(
            f"{k}: {why}" for k, why in idle.items()), how_to_clear=f"drop {', '.join(idle)} from the patch, or "
            "emit_grpo_config into a new run directory with the change and train it from the start")], _nothing, {}
    beyond = unproposed(run, spec.values, patch)
    if beyond:
        return [GateRefusal(gate="config", message="after the guard's stop the patch may change what the "
                            "inspection verdict pins only as the guard's findings (train/logs/guard.json) propose: "
                            + "; ".join(f"{k}: {json.dumps(patch[k], default=str)} is not proposed (" + (
                                "the findings propose " + " or ".join(json.dumps(v, default=str) for v in values)
                                if values else "no finding proposes a change of it") + ")"
                                for k, values in beyond.items()),
                            how_to_clear=f"drop {', '.join(beyond)} from the patch (or use a finding's value); a "
                            "setting nobody reviewed needs a review of its own: emit_grpo_config into a new run "
                            "directory with it, sample, inspect and record its verdict")], _nothing, {}
    problems = patch_problems(spec, patch)
    if problems:
        return [GateRefusal(gate="config", message="the patched config does not validate: " + "; ".join(problems),
                            how_to_clear="use the root-cause finding's patch (patch_valid true), or fix the "
                                         "fields")], _nothing, {}
    saved, moved = _read_checked(run, spec)
    if moved:
        return [moved], _nothing, {}
    try:  # the launched config, as it was: the patch's history, written through held descriptors (run_archive)
        with ArchiveSlot(run, "resume-patch") as slot:
            kept = slot.write("config.yaml", saved.get(run.config, ""))
    except ArchiveRefused as exc:
        return [GateRefusal(gate="config", message=exc.said, how_to_clear="replace archive/ with a directory inside "
                            "the run (or remove it), then resume again")], _nothing, {}

    def undo() -> None:
        for path, text in saved.items():
            atomic_write_text(path, text)
        remove_slot(run, slot.name, [kept.name], slot.made_archive)

    changed = {k: {"old": spec.values.get(k), "new": v} for k, v in patch.items()
               if k not in spec.values or spec.values[k] != v}
    _write(run, spec.values, patch, int(kept.parent.name.rsplit("-", 1)[1]), kept, saved)
    return [], undo, changed


def _read_checked(run: Run, spec: RunSpec) -> tuple[dict[Path, str], GateRefusal | None]:
    """The config's and the verdict's text, one read each, the config's bytes being those the resume checked
    (`spec.config_sha256`: the launched config's hash was compared with them); the patch is applied to this text,
    never to the file read again (round 18: a config.yaml changed after the check was patched and trained). A
    config whose bytes are not the checked ones is refused, nothing written."""
    saved: dict[Path, str] = {}
    for path in (run.config, run.verdict):
        if path.is_file():
            data = read_bytes(path, "run")
            if path == run.config and spec.config_sha256 and hashlib.sha256(data).hexdigest() != spec.config_sha256:
                return {}, GateRefusal(gate="config_hash", message=(
                    f"train/config.yaml changed while the resume read it (sha256 {spec.config_sha256[:12]} checked, "
                    f"{hashlib.sha256(data).hexdigest()[:12]} now): nothing was written"),
                    how_to_clear="leave train/config.yaml as launched while resume_training runs, then resume again")
            saved[path] = decode(data, path, "run")
    return saved, None


def changed_text(changed: dict) -> str:
    """`max_steps 2 -> 4, learning_rate (unset) -> 1e-06`: a resume's patch in words."""
    def shown(value) -> str:
        return "(unset)" if value is None else json.dumps(value, default=str)
    return ", ".join(f"{k} {shown(v['old'])} -> {shown(v['new'])}" for k, v in changed.items())


TOP_KEY = re.compile(r"([A-Za-z_][\w.-]*):(?: |$)")  # a top-level `key: value` line as emission's render writes it


def patched_text(text: str, config: dict, patch: dict, n: int, why: str) -> str | None:
    """train/config.yaml's text with the patch applied in place: each patched key's own lines (its `key: value`
    and the lines of its value: emission.emit.render_yaml writes each key as its own block under its reasons)
    replaced, under `# patched at resume <n>: was <old>`; a key the config lacks appended under `# --- patched at
    resume <n>: <why>`; every other line as it was. None when the text does not hold each present key once at top
    level, or the new text would not read back as the patched config (the caller then rewrites it whole)."""
    lines = text.splitlines(keepends=True)
    blocks: dict[str, list[tuple[int, int]]] = {}
    for start, line in enumerate(lines):
        match = TOP_KEY.match(line)
        if match:
            end = start + 1
            while end < len(lines) and lines[end].startswith((" ", "- ")):
                end += 1
            blocks.setdefault(match.group(1), []).append((start, end))
    replace, appended = {}, {}
    for key, value in patch.items():
        if key in config and config[key] == value:
            continue  # unchanged: its line stays
        dumped = yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=False)
        if key not in config:
            appended[key] = dumped
        elif len(blocks.get(key, [])) == 1:
            was = json.dumps(config[key], default=str)
            replace[blocks[key][0]] = f"# patched at resume {n}: was {was}\n" + dumped
        else:
            return None
    out, skip_to = [], 0
    for index, line in enumerate(lines):
        if index < skip_to:
            continue
        block = next((b for b in replace if b[0] == index), None)
        if block:
            out.append(replace[block])
            skip_to = block[1]
        else:
            out.append(line)
    new = "".join(out)
    if appended:
        new += ("" if not new or new.endswith("\n") else "\n") + f"\n# --- patched at resume {n}: {why}\n"
        new += "".join(appended.values())
    try:
        same = parse_yaml(new, "the patched train/config.yaml", "patch") == {**config, **patch}
    except UserInputError:
        same = False
    return new if same else None


def _nothing() -> None:
    return None


def apply_refilter(run: Run, rule) -> tuple[list[GateRefusal], Callable[[], None], dict | None]:
    """resume_training's refilter (inspection.refilter): the data re-filtered from the run's own logged
    completions, the config naming it and the verdict's data moved to it. Returns (refusals: nothing written, undo:
    the config, the verdict and the new files as they were, for a later gate's refusal, the re-filter's answer)."""
    saved = {path: path.read_text(encoding="utf-8") for path in (run.config, run.verdict) if path.is_file()}
    try:
        done = refilter_run(str(run.dir), rule.model_dump())
    except UserInputError as exc:
        return [GateRefusal(gate="refilter", message=str(exc), how_to_clear=(
            "nothing logged: set log_completions: true (a logging field the verdict does not pin) and train on first; "
            "every prompt dropped: raise keep_share; or resume without refilter"))], _nothing, None

    def undo() -> None:
        for path, text in saved.items():
            atomic_write_text(path, text)
        if done.get("folder"):
            shutil.rmtree(run.dir / done["folder"], ignore_errors=True)

    return [], undo, done


def unproposed(run: Run, launched: dict, patch: dict) -> dict[str, list]:
    """After a guard stop: {field: the values the stop's findings' patches propose for it} for each field of
    `patch` the verdict pins (config.fields.pinned) whose value it changes to one no finding of the guard's own
    guard.json proposes (round 17, b05: the root cause's patch plus temperature 1.9 and top_k 3 moved the sampling
    pin). {} without a guard stop: then no pin moves, and the inspection gate refuses a pinned change itself."""
    stop = _guard_stop(run)
    if stop is None:
        return {}
    proposed: dict[str, list] = {}
    for finding in stop[1].get("findings") or []:
        if isinstance(finding, dict) and isinstance(finding.get("patch"), dict):
            for key, value in finding["patch"].items():
                proposed.setdefault(key, []).append(value)

    def same(a, b) -> bool:  # 0 and 0.0 alike, never True and 1
        return a == b and isinstance(a, bool) == isinstance(b, bool)

    return {k: proposed.get(k, []) for k, v in patch.items() if pinned(k) and (k not in launched or not same(
        launched[k], v)) and not any(same(v, p) for p in proposed.get(k, []))}


def _guard_stop(run: Run) -> tuple[dict, dict] | None:
    """(stopped.json, guard.json), the trainer's, when the run's guard stopped its last launch, else None:
    stopped.json says so, the guard's own record (guard.json)
    holds the same stop (code and step) among its hard findings, and both are the trainer's (signed: evidence.py)
    of the run's last launch (the launcher's record of it, runrecord.launch_of). A hand-written stopped.json or
    guard.json moves no pin (issue 48)."""
    stopped, guard = _last_launch(run, run.stopped), _last_launch(run, run.guard)
    if not (isinstance(stopped, dict) and stopped.get("by") == "guard" and isinstance(guard, dict)):
        return None
    decision = guard.get("stopped") if isinstance(guard.get("stopped"), dict) else {}
    hard = {f.get("code") for f in guard.get("findings") or [] if isinstance(f, dict) and f.get("severity") == "error"}
    same = (stopped.get("launch_id") == guard.get("launch_id") and decision.get("code") == stopped.get("code") in hard
            and decision.get("step") == stopped.get("step"))
    return (stopped, guard) if same else None


def _last_launch(run: Run, path: Path) -> dict | None:
    """The trainer's signed record at `path` of the run's last launch (runrecord.signed_record), None otherwise
    (absent, written by hand, another launch's, or a damaged run.json)."""
    try:
        return signed_record(run, path, read_run_json(run))
    except UserInputError:
        return None


def _write(run: Run, config: dict, patch: dict, n: int, kept: Path, saved: dict[Path, str]) -> None:
    """Write the patched config (patch number `n`, the launched one kept at `kept`); after a guard stop, move the
    verdict's pins the patch changes (never the model's or the data's: a patch is a setting, and another data set
    needs its own review). A run never guard-stopped moves nothing, so the gate refuses a patch of anything the
    verdict pins. `saved`: the config's and the verdict's text as checked (_read_checked), never read again."""
    try:
        verdict = json.loads(saved[run.verdict]) if run.verdict in saved else None
    except ValueError:
        verdict = None
    stop = (_guard_stop(run) or (None,))[0]
    before = config_pins(run) if isinstance(verdict, dict) and stop is not None else None
    why = (f"after the guard's stop at step {stop.get('step')} ({stop.get('code')})" if stop is not None else
           "resume_training's patch") + f"; the launched config is {kept.relative_to(run.dir)}"
    text = saved.get(run.config, "")
    new = patched_text(text, config, patch, n, why)
    if new is None:  # not emission's layout (a key twice, a flow mapping): whole, under the config's own header lines
        head = "".join(line for line in text.splitlines(keepends=True)[:1] if line.startswith("#"))
        new = (head + f"# --- rewritten at resume {n} (its layout could not be kept in place): {why}\n"
               + yaml.safe_dump({**config, **patch}, sort_keys=False))
    atomic_write_text(run.config, new)
    if before is not None:
        after = config_pins(run)
        pins = verdict.get("pins") if isinstance(verdict.get("pins"), dict) else {}
        moved = [k for k in after if k not in FIXED_PINS and after[k] != before.get(k) and pins.get(k) == before.get(k)]
        if moved:
            pins.update({k: after[k] for k in moved})  # the trainer applies pin_updates to its "trained" pin
            updates = verdict.get("pin_updates") if isinstance(verdict.get("pin_updates"), list) else []
            verdict["pin_updates"] = updates + [{"patch": patch, "pins": moved, "time": time.time(),
                                                 "by": "resume_training"}]
            atomic_write_json(run.verdict, verdict)


def last_good_checkpoint(run: Run, done: list[Path]) -> tuple[Path | None, str | None]:
    """(checkpoint, why) to resume a patched run from: after a guard stop the last one before its step."""
    stopped = _last_launch(run, run.stopped)  # the trainer's own stop: a hand-written one picks no checkpoint
    if not (isinstance(stopped, dict) and stopped.get("by") == "guard" and isinstance(stopped.get("step"), int)):
        return (done[-1] if done else None), None
    before = [p for p in done if int(p.name.split("-")[-1]) < stopped["step"]]
    why = (f"the guard stopped at step {stopped['step']} ({stopped.get('code')}): the checkpoint saved there holds "
           "the failure")
    return (before[-1] if before else None), why
