"""export_model: the run's checkpoint as a standalone model in <run>/export/.

LoRA adapters are merged into the base weights (peft), the model is saved as safetensors with its tokenizer
and a model card that records where it came from (base model, config hash, reward functions, inspection and
promotion verdicts). A smoke test reloads the export and checks that greedy outputs on a few goldens are
identical to the checkpoint's.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from mcp_server.config import GRPOView
from mcp_server.errors import UserInputError
from mcp_server.smollm2 import weights_note
from mcp_server.evaluation.evaluate import load_goldens, resolve_goldens
from mcp_server.generation import WAIT_TICK_S, generate, render_prompt
from mcp_server.evaluation.card_step import RUN, CardStep, card_step, reproduce, step_rows
from mcp_server.evaluation.checked_load import load_checked
from mcp_server.evaluation.models import ExportRequest, ExportResult
from mcp_server.evaluation.provenance import Provenance, trained_provenance
from mcp_server.evaluation.promote import checkpoint_refusal, promotion_problems, promotion_signed, state_refusal
from mcp_server.model_ref import BUILT_IN, known_name, load_model, report_name
from mcp_server.reporting import Report, silent, ticking
from mcp_server.runs import Run, read_json_if_present, resolve_run
from mcp_server.userfiles import not_regular
from mcp_server.worker import runs_in_training
from mcp_server.training.run_archive import ArchiveSlot
from mcp_server.workspace import archive_problem, atomic_write_text, refuse_run_outside, tree_digest, tree_files

EXPORT = ("to export that checkpoint as it is (export_model does not judge it: promote_checkpoint does, and without "
          "its PROMOTE set allow_unpromoted, CLI --allow-unpromoted; the model card names the step the run stopped at)")
STAGES = 4  # load (and merge), greedy before, save, reload and compare


def _smoke_prompts(promotion: dict | None, n: int) -> list:
    """Prompts for the smoke test: the promotion's goldens, else the tiny goldens."""
    goldens = (promotion or {}).get("goldens")
    path = Path(goldens) if goldens and Path(goldens).is_file() else None
    if path is None:
        path = resolve_goldens("tiny")
    return [r["prompt"] for r in load_goldens(path)[:n]]


class SmokeWork(NamedTuple):
    """What the smoke test's last phase does, as the stages before timed it: greedy decodes of the same goldens to
    the same length (as the checkpoint's took) and a load of the files the save wrote (as long as writing them took:
    a safetensors load reads back what the save wrote; the checkpoint's load, checked file by file and merged, is no
    measure of it: smollm2-135m at load 10-12, 75 s against a reload of a few seconds). Walk 11: the reload's "about
    55 s left" (the stages' mean rate, a quick save among them) took 2.7 min."""

    began: float  # time.monotonic() when the stage under way began
    prompts: int = 0
    max_new_tokens: int = 0
    decode_s: float = 0.0
    save_s: float | None = None

    def decoded(self, now: float) -> SmokeWork:
        return self._replace(decode_s=now - self.began, began=now)

    def saved(self, now: float) -> SmokeWork:
        return self._replace(save_s=now - self.began, began=now)

    def left(self) -> str:
        load = (f"a load of the files the save wrote, as writing them took {self.save_s:.1f} s"
                if self.save_s is not None else "a load of the files the save writes, as long as writing them")
        return (f"about {_clock(self.decode_s + (self.save_s or 0.0))} left (greedy outputs on the same "
                f"{self.prompts} goldens, up to {self.max_new_tokens} new tokens each, as the checkpoint's took "
                f"{self.decode_s:.1f} s, and {load})")


def _clock(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def _greedy(model, tokenizer, prompts: list, max_new_tokens: int, report: Report = silent,
            what: str = "greedy outputs") -> list[str]:
    """Greedy completions of the goldens, saying every WAIT_TICK_S what it does and for how long (walk 13: "greedy
    outputs of the checkpoint on 4 goldens", then 96 s without a line)."""
    with ticking(report, WAIT_TICK_S, lambda elapsed: f"{what} on {len(prompts)} goldens, up to {max_new_tokens} "
                 f"new tokens each: {elapsed:.0f} s so far"):
        return generate(model, tokenizer, [render_prompt(tokenizer, p) for p in prompts], max_new_tokens)


def model_card(run: Run, base: str, trained: Provenance, promotion: dict | None, merged: bool,
               ckpt_sha: str | None = None, at: CardStep | None = None) -> str:
    """The card: what trained as the launch's signed record gives it (provenance.py), never the files as now
    (rewards.json's reward names and weights included); `at`: the model's step, its run's state and how to train
    that model again (card_step.py)."""
    verdict = (promotion or {}).get("verdict")
    config_sha, reward_sha, inspection = trained.config_sha256, trained.reward_code_sha256, trained.inspection
    gone = "unrecorded" if not trained.recorded else "unknown"
    inspection_line = "none recorded" if trained.recorded else "unrecorded"
    if inspection:
        inspection_line = str(inspection.get("verdict", "?"))
        if inspection.get("reviewer"):
            inspection_line += f" by {inspection['reviewer']}"
    reward_names = []
    for spec in trained.rewards or []:
        name = f"`{spec.get('name')}`"
        if spec.get("weight", 1.0) != 1.0:
            name += f" x{spec['weight']}"
        reward_names.append(name)
    name, hub_id = known_name(base)  # the model's real name, never the machine's path to it (issue 49)
    lines = [
        "---",
        *([f"base_model: {hub_id or name}"] if hub_id or name in BUILT_IN else []),  # a name, never a path
        "library_name: transformers",
        "tags: [grpo, trl, rlvr, llm-finetuning]",
        "---",
        "",
        f"# {run.name}",
        "",
        f"GRPO fine-tune of `{name}` made with llm-finetuning (TRL GRPOTrainer)"
        + (", LoRA adapters merged into the base weights." if merged else "."),
        *(["", f"Base weights: {weights_note(base)}."] if weights_note(base) else []),
        "",
        "| | |",
        "|---|---|",
        f"| Base model | {report_name(base)} |",
        f"| Training config sha256 | `{config_sha or gone}` |",
        f"| Checkpoint content sha256 | `{ckpt_sha or 'unknown'}` |",
        *(step_rows(at) if at else []),
        f"| Reward functions | {', '.join(reward_names) or gone} |",
        f"| Reward code sha256 | `{reward_sha or gone}` |",
        f"| Inspection verdict | {inspection_line} |",
        f"| Promotion verdict | {verdict or 'never judged'} |",
    ]
    if promotion:
        lines += [
            f"| Goldens pass rate | {promotion['checkpoint_pass_rate']:.1%} (baseline "
            f"{promotion['baseline_pass_rate']:.1%}) |",
            f"| Goldens sha256 | `{promotion['goldens_sha256']}` |",
        ]
        lines += ["", "## Promotion evidence", "", *[f"- {r}" for r in promotion.get("reasons", [])]]
    if trained.notes:  # what differs now from what trained, or why it is unrecorded
        lines += ["", "## Provenance", "", *[f"- {note}" for note in trained.notes]]
    if verdict != "PROMOTE":
        lines += ["", "**This export was not promoted.** Do not ship it without reading the promotion report."]
    lines += ["", *(reproduce(at) if at else [f"Reproduce: {RUN}."])]
    return "\n".join(lines) + "\n"


def _promotion_of(run: Run, config: dict, ckpt: Path, ckpt_sha: str, given: bool) -> tuple[dict | None, str | None]:
    """(promotion.json when it vouches for `ckpt`, else None; why not). What the card records is optional: a run
    without it is still exported, and the card says "unknown". The promotion applies to the checkpoint it judged,
    by content, wherever the run now lives (a checkpoint retrained in place or another one is not promoted), and
    only as promote_checkpoint measured it, of a model promote_checkpoint would judge (checkpoint_refusal)."""
    promotion = read_json_if_present(run.promotion)
    if not isinstance(promotion, dict):
        return None, None
    forged = promotion_problems(promotion)[:1] if not promotion_signed(promotion) else []
    if forged:  # unsigned (written or copied by hand): no verdict at all, PROMOTE or REJECT
        return None, f"{run.promotion} is not a promotion promote_checkpoint measured: {forged[0]}"
    judged = promotion.get("checkpoint_sha256")
    if judged != ckpt_sha:
        return None, (f"{ckpt} (content sha256 {ckpt_sha[:12]}) is not the checkpoint the promotion judged ("
                      + (f"{promotion.get('checkpoint')}, sha256 {judged[:12]}): it changed since, or is another one"
                         if isinstance(judged, str) else "promotion.json records no content hash") + ")")
    if promotion.get("verdict") != "PROMOTE":
        return promotion, None
    forged = promotion_problems(promotion)
    refusal = checkpoint_refusal(run, config, ckpt, given)
    if refusal and not forged:  # a promotion never vouches for a model promote_checkpoint would refuse to judge
        forged = [str(refusal)]
    if forged:  # a PROMOTE is exported only as promote_checkpoint measured it
        return None, f"{run.promotion} is not a promotion promote_checkpoint measured: " + "; ".join(forged)
    return promotion, None


def modes_as_umask(folder: Path) -> None:
    """The export's modes as a plain copy's: files 0666, folders 0777, less the process's umask (walk 10: export/
    was 0700 and model.safetensors and README.md 0600, mkdtemp's and mkstemp's, beside 0644 files), each set
    explicitly (chmod): the umask is read, never set (round 19: os.umask is process-wide, and the MCP server runs
    calls on threads)."""
    mask = _umask(folder)
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


def _umask(folder: Path) -> int:
    """The process's umask, read without setting it: /proc (Linux), else from the mode of a folder made with 0777
    in `folder` (and removed)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    probe = folder / f".umask-{os.getpid()}-{secrets.token_hex(8)}"
    probe.mkdir(0o777)  # never there before: mkdir refuses a name taken
    try:
        return ~probe.stat().st_mode & 0o777
    finally:
        probe.rmdir()


def refuse_staged_changes(staged: Path, model, tokenizer, card: str) -> None:
    """UserInputError unless every file of the staging folder is what export wrote from memory, each read once:
    the weights tensor by tensor against the model that loaded from the checked checkpoint (what was promoted), the
    config and tokenizer files against the model's config and the tokenizer in memory, README.md the card written;
    no other file. Round 18: the folder save_pretrained wrote was never checked, so a file swapped or planted there
    while export staged it was exported as the promoted model; round 20: a link (to a folder outside the workspace,
    dangling) or a pipe planted there was no file to rglob + is_file, and was exported (foreign_entries)."""
    from mcp_server.inspection.loaded_weights import weights_read
    from mcp_server.inspection.private_copy import configs_read, tokenizer_read

    read, problems = weights_read(model, staged, "replaced as the export wrote them")
    for more, wrong in (configs_read(model, staged), tokenizer_read(tokenizer, staged)):
        read, problems = {**read, **more}, problems + wrong
    if (staged / "README.md").read_bytes() != card.encode("utf-8"):
        problems.append("README.md: not the model card export wrote")
    problems += foreign_entries(staged, {*read, "README.md"})
    if problems:
        raise UserInputError("run", f"the export's staging folder {staged} changed as it was written, nothing was "
                             "exported: " + "; ".join(problems[:4]) + ". Export again")


def foreign_entries(staged: Path, written: set[str]) -> list[str]:
    """Every entry under `staged` (walked by lstat, no link followed) that is not a regular file export wrote
    (`written`: relative paths), each named with what it is: a symbolic link (to a folder, to nothing, or even to
    a file of the right bytes), a pipe, a socket, a device, a file with several names (a hard link), a folder
    holding no written file. What export/ holds is then only the files the export wrote."""
    problems, folders = [], [staged]
    while folders:
        folder = folders.pop()
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                rel, found = Path(entry.path).relative_to(staged).as_posix(), entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(found.st_mode) and any(w.startswith(rel + "/") for w in written):
                    folders.append(Path(entry.path))
                    continue
                what = ("a symbolic link" if stat.S_ISLNK(found.st_mode) else "a folder"
                        if stat.S_ISDIR(found.st_mode) else not_regular(entry.path) if not stat.S_ISREG(found.st_mode)
                        else f"a file with {found.st_nlink} names" if found.st_nlink > 1
                        else None if rel in written else "a file")
                if what:
                    problems.append(f"{rel}: {what}, not written by the export")
    return problems


@runs_in_training  # needs torch / TRL / transformers: the training interpreter's worker
def export_model(request: ExportRequest, report: Report = silent) -> ExportResult:
    run = refuse_run_outside(resolve_run(request.run), "export_model")
    try:
        config, base, ckpt = run.trained_model(request.checkpoint)
    except UserInputError:  # no model there: a run still training (or failed) is named by its state (issue 49)
        refusal = state_refusal(run, bool(request.checkpoint), EXPORT)[1]
        if refusal is not None:
            raise refusal from None
        raise
    ckpt_files = tree_files(ckpt)  # each file's sha256, as checked: what the load is compared with (load_checked)
    ckpt_sha = tree_digest(ckpt_files)
    promotion, mismatch = _promotion_of(run, config, ckpt, ckpt_sha, bool(request.checkpoint))
    verdict = (promotion or {}).get("verdict")
    if verdict != "PROMOTE" and not request.allow_unpromoted:
        if mismatch:
            raise UserInputError("checkpoint", f"{mismatch}: run promote_checkpoint on it, or set allow_unpromoted "
                                 "(CLI: --allow-unpromoted) to export it unjudged (the model card will say so)")
        if verdict:  # judged, and not promoted (walk 11: "run promote_checkpoint first" after its REJECT)
            raise UserInputError(
                "run", f"{run.name}: promote_checkpoint judged this checkpoint {verdict}, not PROMOTE (its reasons: "
                f"{run.promotion_report}): train on and promote a later checkpoint, or set "
                "allow_unpromoted (CLI: --allow-unpromoted) to export it anyway (the model card will say so)")
        raise UserInputError(
            "run", f"{run.name} has no PROMOTE verdict (never judged): run promote_checkpoint first, or set "
            "allow_unpromoted (CLI: --allow-unpromoted) to export anyway (the model card will say so)",
        )

    if run.export.exists() and not request.archive_previous:
        raise UserInputError(
            "run", f"{run.export} holds an earlier export: nothing is overwritten. Set archive_previous "
            "(CLI: --archive-previous) to move it to archive/ first, or export another run")
    if run.export.exists() and archive_problem(run.dir):  # refused before the model loads
        raise UserInputError("run", archive_problem(run.dir))

    merged = (ckpt / "adapter_config.json").is_file() and not (ckpt / "config.json").is_file()
    report(0, STAGES, f"loading {ckpt}" + (" and merging its LoRA adapters" if merged else ""))
    model, tokenizer = load_checked(ckpt, ckpt_files)  # merged in memory when it is an adapter
    max_new_tokens = int(GRPOView.given(config).max_completion_length or 64)
    prompts = _smoke_prompts(promotion, request.smoke_items)
    report(1, STAGES, f"greedy outputs of the checkpoint on {len(prompts)} goldens")
    work = SmokeWork(time.monotonic(), len(prompts), max_new_tokens)
    before = _greedy(model, tokenizer, prompts, max_new_tokens, report, "greedy outputs of the checkpoint")
    work = work.decoded(time.monotonic())

    rewards = read_json_if_present(run.rewards, list) or []
    trained = trained_provenance(run, ckpt, rewards)  # the launch's signed record, never the files as now

    export_dir = run.export
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=run.dir))  # beside export/, swapped in: nothing half-written
    try:
        report(2, STAGES, f"saving safetensors, tokenizer and model card; after the save {work.left()}")
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        card = model_card(run, base, trained, promotion, merged, ckpt_sha,
                          card_step(run, config, ckpt, bool(request.checkpoint)))
        atomic_write_text(tmp / "README.md", card)
        modes_as_umask(tmp)
        work = work.saved(time.monotonic())
        report(3, STAGES, f"reloading the export and comparing greedy outputs: {work.left()}")
        after = _greedy(*load_model(tmp), prompts, max_new_tokens, report, "greedy outputs of the export")
        refuse_staged_changes(tmp, model, tokenizer, card)  # last, before it is swapped in
        archived = None
        if export_dir.exists():  # archive_previous (checked above, and again as it moves: run_archive)
            with ArchiveSlot(run, "export") as slot:
                archived = slot.become(export_dir)
        tmp.rename(export_dir)
        report(STAGES, STAGES, f"exported to {export_dir}")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(
        run_dir=str(run.dir), export_dir=str(export_dir), merged_lora=merged,
        files=sorted(p.name for p in export_dir.iterdir()), model_card=str(export_dir / "README.md"),
        config_sha256=trained.config_sha256, provenance_notes=trained.notes, checkpoint_sha256=ckpt_sha,
        archived_previous=str(archived) if archived else None,
        promotion_verdict=verdict, smoke_identical=before == after,
        smoke_items=len(prompts),
    )
