"""Which baseline a promotion compares with (promote_checkpoint): one evaluate_model wrote and recorded, of the
run's base model's content (issue 48, round 10 F3: a baseline of other weights at the same path made a model
PROMOTE over itself), on the run's goldens and graders, at the run's budget when there is one; and promotion.json's
signature. Moved out of promote.py, which holds the rule."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mcp_server.config import FIELD, GRPOView
from mcp_server.errors import UserInputError
from mcp_server.evaluation.drift import stage_report
from mcp_server.evaluation.evaluate import (
    baseline_model_pin, baseline_unrecorded, baselines_of, eval_plan, evaluate_model, load_goldens, read_baseline,
    resolve_goldens,
)
from mcp_server.evaluation.grader_replay import replay_baseline, replayed_pick
from mcp_server.evaluation.models import EVAL_TOKENS, EvaluateRequest, PromoteRequest
from mcp_server.evidence import valid
from mcp_server.inspection.pins import config_model_pin, model_content
from mcp_server.model_ref import known_name, resolve_model
from mcp_server.reporting import Report
from mcp_server.evaluation.graders_apart import graders_code
from mcp_server.rewards import reads
from mcp_server.rewards.sources import file_pin_changes
from mcp_server.rewards.spec import RewardSpec, read_reward_specs
from mcp_server.runs import Run, read_json_if_present, resolve_run
from mcp_server.training.runrecord import read_run_json
from mcp_server.userfiles import open_regular, read_bytes
from mcp_server.workspace import eval_root, sha256_file


PROMOTION = "promotion.json"


def promotion_signed(promotion) -> bool:
    """Whether promotion.json is one promote_checkpoint signed (evidence.py; issue 48, seventh round). Signed under
    the workspace's eval/ with the judged checkpoint's content hash inside, not under the run's path: a moved run
    keeps its promotion, and a copy into another run vouches only for a model of the same content, which
    checkpoint_refusal and the hash check still judge there."""
    return valid(eval_root(), PROMOTION, promotion)


class ReadBaseline(dict):
    """A baseline as parsed from one read of its file; `sha256`: that read's, the one the ledger judged (round 19:
    what is checked, compared with run.json and signed into a promotion is the bytes parsed)."""
    sha256 = ""


def read_recorded(path: Path) -> ReadBaseline:
    """The baseline at `path` from ONE read whose sha256 eval/baselines.jsonl records (baseline_unrecorded of
    those bytes); UserInputError ("baseline") naming why not."""
    data = read_bytes(path, "baseline")
    why = baseline_unrecorded(path, data)
    if why:
        raise UserInputError("baseline", why)
    try:
        baseline = ReadBaseline(json.loads(data.decode("utf-8")))
    except (ValueError, TypeError) as exc:
        raise UserInputError(str(path), f"cannot read the baseline: {exc}") from None
    baseline.sha256 = hashlib.sha256(data).hexdigest()
    return baseline


def check_baseline(run: Run, path: Path, baseline: dict) -> None:
    """A baseline is written once and read-only: one whose hash is not what the run recorded at launch (run.json
    "baselines") or at its last promotion (promotion.json), or whose pass rate is not its own items' count, was
    edited, and decides nothing."""
    sha = getattr(baseline, "sha256", "") or sha256_file(path)  # of the bytes parsed (read_recorded)
    earlier = read_json_if_present(run.promotion)
    earlier = (earlier if promotion_signed(earlier)  # an unsigned one recorded nothing
               and Path(str(earlier.get("baseline_path"))).name == path.name else {})
    recorded = ((read_run_json(run) or {}).get("baselines") or {}).get(path.name) or earlier.get("baseline_sha256")
    if recorded and recorded != sha:
        raise UserInputError("baseline", f"{path} (sha256 {sha[:12]}) is not the baseline this run recorded "
                             f"(sha256 {recorded[:12]}): it was edited since. Restore it; a baseline is never edited")
    items = baseline.get("items") or []
    passed = sum(bool(i.get("passed")) for i in items if isinstance(i, dict))
    if items and (baseline.get("passed") != passed or abs(float(baseline.get("pass_rate", -1)) - passed / len(items))
                  > 1e-9):
        raise UserInputError("baseline", f"{path} says {baseline.get('passed')} passed ({baseline.get('pass_rate')}) "
                             f"but its items hold {passed} of {len(items)}: it was edited. Restore it")


def choose_baseline(run: Run, request: PromoteRequest, config: dict, base: str, base_ref,
                    report: Report) -> tuple[Path, dict, str, float]:
    """(its file, the base model's baseline, the choice in words, the grader replay's seconds) from eval/: of the
    baselines on the request's goldens (any goldens when none given), those graded by this run's rewards
    (train/rewards.json), else by a part of them, when there are any: the others, another task's, are set aside
    unread, their reward code never imported (issue 49: a leftover baseline of another task, its reward module moved
    since, failed the promotion importing it). With none such, the baselines there decide (a run judged by other
    graders than it trains on). Only a baseline of the run's base model's content counts (reviewed_base_pin; issue
    48, round 10 F3), and only one whose stored replies its graders score as stored now (grader_replay). Measured
    now on the request's goldens when there is none yet, the base model as it is now checked to be that content
    first."""
    name = known_name(base)[0]  # the name the user gave, never a cache path (issue 49)
    ours = _run_graders(run)
    pin, whose = reviewed_base_pin(run, config)
    found, skipped, other = _baselines(str(base_ref) if base != "tiny" else "tiny", request.goldens, ours,
                                       model_content(pin))
    if len({b.get("goldens_sha256") for _, b in found}) > 1:  # which goldens each came from (issue 49)
        each = "; ".join(f"{p.name} on {b.get('goldens') or 'goldens not recorded'} (sha256 "
                         f"{str(b.get('goldens_sha256'))[:12]})" for p, b in found)
        raise UserInputError("goldens", f"{len(found)} baselines of {name} on different goldens: {each}. Give the "
                             "goldens this run is judged on: the goldens field (CLI: --goldens FILE), one of those "
                             "files")
    aside = f"; set aside: {'; '.join(skipped)}" if skipped else ""
    budget = int(GRPOView.given(config).max_completion_length or EVAL_TOKENS)  # what the run trains with
    if found:  # the first whose stored replies its graders still score as stored (grader_replay)
        path, baseline, replay = replayed_pick(_order(found, budget), request.goldens,
                                               lambda p, b: check_baseline(run, p, b))
        mine = "" if skipped or _graded_by(baseline, ours) else \
            " (no baseline is graded by this run's rewards: the baseline's graders decide)"
        tokens = "" if baseline.get("max_new_tokens") == budget else (
            f" (decoded with up to {baseline.get('max_new_tokens')} tokens, the run trains with {budget}: the "
            "checkpoint is decoded as the baseline was, so they compare, but not at the run's budget; evaluate_model "
            "with run RUN measures a baseline at it)")
        return path, baseline, (f"{path.name}: {name} graded by {_names(baseline.get('graders'))} on "
                                f"{baseline.get('goldens')}{mine}{tokens}{aside}"), replay
    content_refusal(name, pin, whose, other, bool(request.goldens))
    if not request.goldens:
        raise UserInputError(
            "goldens",
            f"no baseline for the base model {name} in {eval_root()} and no goldens given: evaluate the base "
            "model first (evaluate_model) or pass goldens",
        )
    base_now_refusal(name, base_ref, pin, whose)
    first = evaluate_model(EvaluateRequest(model=base, goldens=request.goldens, baseline="write",
                                           max_new_tokens=budget),
                           report=stage_report(report, "baseline of the base model", eval_plan(
                               base_ref, len(load_goldens(resolve_goldens(request.goldens))), budget)))
    path = Path(first.baseline_path)
    measured = read_recorded(path)  # one read, as recorded
    if model_content(measured.get("model_pin")) != model_content(pin):  # changed while it was measured
        base_now_refusal(name, base_ref, pin, whose)
    replay = replay_baseline(path, measured, request.goldens)
    return path, measured, f"{path.name}: measured now on {request.goldens}{aside}", replay


def _order(found: list, budget: int) -> list[tuple[Path, dict]]:
    """The baselines that stand on one goldens file, in the order they are preferred: those measured at the run's
    budget first (issue 49: a baseline at 256 tokens for a run that trains with 24), then the first measured (a
    later, looser grader never replaces it); promote takes the first whose grader replay holds."""
    return sorted(found, key=lambda item: (item[1].get("max_new_tokens") != budget, str(item[1].get("written_at")),
                                           item[0].name))


def _pick(found: list, budget: int) -> tuple[Path, dict]:
    return _order(found, budget)[0]


def _graded_by(baseline: dict, ours: list[RewardSpec] | None) -> bool:
    """Whether a grader of `baseline` is one of the run's rewards (by name and parameters); True without rewards."""
    return ours is None or any(_grader_key(g) in {_grader_key(r) for r in ours} for g in baseline.get("graders") or [])


def launch_warnings(run_dir: str) -> list[str]:
    """What promote_checkpoint would find wrong with the baseline of the run's base model, said when the run is
    launched rather than after training (issue 49: a baseline made stale by the review was found only at promotion):
    none yet, none of the content the run trains from, one graders' code or inputs changed since (promote refuses
    it), one graded by other graders, on several goldens files, or decoded at another budget. The same functions
    promote_checkpoint chooses with (_baselines, _pick), nothing measured; each warning ends with the command that
    measures the baseline promote would use. Imports the graders (reward code): call it apart (worker.apart)."""
    run = resolve_run(run_dir)
    config = run.read_config()
    base = str(config.get(FIELD.model_name_or_path) or "")
    if not base:
        return []
    name, ours = known_name(base)[0], _run_graders(run)
    budget = int(GRPOView.given(config).max_completion_length or EVAL_TOKENS)
    key = resolve_model(base) if base != "tiny" else "tiny"
    goldens = _goldens_of(key)
    graders = f" --graders @{run.rewards}" if run.rewards.is_file() else ""
    way = (f". Measure it now, while the run trains: llm-finetuning evaluate-model {name} --goldens "
           f"{goldens[0] if len(goldens) == 1 else 'GOLDENS'}{graders} --run {run.dir}")
    try:
        pin, whose = reviewed_base_pin(run, config)
        found, skipped, other = _baselines(key, None, ours, model_content(pin))
        if not found:
            content_refusal(name, pin, whose, other, False)
    except UserInputError as exc:
        return [f"promote-checkpoint would refuse the baseline after training ({exc}){way}"]
    if not found:
        return [f"no baseline of {name} in {eval_root()}: promote-checkpoint compares the trained model with one "
                f"(or measures it then, after training, when given --goldens){way}"]
    if len({b.get("goldens_sha256") for _, b in found}) > 1:
        return [f"{len(found)} baselines of {name} on different goldens "
                f"({', '.join(sorted({str(b.get('goldens')) for _, b in found}))}): promote-checkpoint will need "
                "--goldens FILE, the goldens this run is judged on"]
    path, baseline = _pick(found, budget)
    warnings = [] if skipped or _graded_by(baseline, ours) else [
        f"{path.name} is graded by {_names(baseline.get('graders'))}, not this run's rewards "
        f"({_names([g.model_dump() for g in ours or []])}): promote-checkpoint would judge by the baseline's "
        f"graders{way}"]
    if baseline.get("max_new_tokens") != budget:
        warnings.append(f"{path.name} decoded up to {baseline.get('max_new_tokens')} tokens, the run trains with "
                        f"{budget}: promote-checkpoint would decode the checkpoint as the baseline was{way}")
    return warnings


def _goldens_of(model: str) -> list[str]:
    """The goldens files the recorded baselines of `model` were measured on (for the command a warning gives)."""
    files = set()
    for path in baselines_of(model):
        try:
            files |= set() if baseline_unrecorded(path) else {str(read_baseline(path).get("goldens"))}
        except UserInputError:
            continue
    return sorted(files)


def reviewed_base_pin(run: Run, config: dict) -> tuple[dict | None, str]:
    """(the run's base model's pin, whose it is in words): the one its inspection verdict recorded (what the gate and
    the trainer held the launch to: computed once, reused here), else the config's model pinned now by the same
    function (inspection.pins.config_model_pin) for a run without a verdict (a model placed by hand)."""
    try:
        with open_regular(run.verdict, encoding="utf-8") as handle:
            verdict = json.loads(handle.read())
    except (OSError, ValueError):
        verdict = None
    pins = verdict.get("pins") if isinstance(verdict, dict) else None
    if isinstance(pins, dict) and isinstance(pins.get("model"), dict):
        return pins["model"], f"the base its inspection verdict reviewed ({run.verdict.name})"
    return config_model_pin(run, config), "its config's model as it is now (no inspection verdict)"


def _digest(pin) -> str:
    content = model_content(pin)
    return f"files sha256 {content[:12]}" if content else "its model's content not recorded: an earlier version's"


def content_refusal(name: str, pin, whose: str, other: list, goldens: bool) -> None:
    """The refusal when no baseline is of the run's base content: the content unknown here (a hub model no cache
    holds), or, without goldens to measure it now, baselines of `name` on other content, each named with its
    digest beside the run's."""
    if model_content(pin) is None:
        raise UserInputError("baseline", f"the content of this run's base model {name} ({whose}) is not known here "
                             "(a hub model the local cache does not hold): no baseline can be shown to be of it. "
                             "Download it into the cache, or judge a run whose base is a local folder")
    if other and not goldens:
        each = "; ".join(f"{p.name} ({_digest(b.get('model_pin'))})" for p, b in other[:4])
        raise UserInputError("baseline", f"no baseline in {eval_root()} is of this run's base model {name} as it "
                             f"trained ({whose}: {_digest(pin)}): {each}; other weights, config or tokenizer "
                             "under that name would compare the checkpoint with another model. "
                             f"Measure the base model as the run trained from it (evaluate_model {name} with the "
                             "goldens and graders; CLI: llm-finetuning evaluate-model ... --goldens FILE), or pass "
                             "goldens (CLI: --goldens FILE) to measure it now")


def base_now_refusal(name: str, base_ref, pin, whose: str) -> None:
    """Refuse to measure the base model now when it is not the content the run trained from (the same pin function;
    a folder's files hashed once more, a file over 64 MiB by its stat)."""
    now = baseline_model_pin(base_ref)
    if model_content(now) != model_content(pin):
        raise UserInputError("model", f"the base model {name} is not now what this run trained from ({whose}: "
                             f"{_digest(pin)}; now: {_digest(now)}): a baseline measured now would be of another "
                             "model. Put its files back as they were, then promote again")


def _names(graders) -> str:
    return ", ".join(str(g.get("name", "?")) for g in graders or [] if isinstance(g, dict))


def _run_graders(run: Run) -> list[RewardSpec] | None:
    """The run's reward specs (train/rewards.json); None when it has none (a model placed in a run by hand)."""
    if not run.rewards.is_file():
        return None
    try:
        return read_reward_specs(run.rewards, "rewards")
    except UserInputError:
        return None


def _grader_key(spec) -> tuple:
    spec = RewardSpec.model_validate(spec) if not isinstance(spec, RewardSpec) else spec
    return spec.name.strip(), json.dumps(spec.params, sort_keys=True, default=str)


def _baselines(model: str, goldens: str | None, run_graders: list[RewardSpec] | None,
               content: str | None) -> tuple[list, list[str], list]:
    """(the model's baselines to choose from, those set aside in words, those of other content than `content`):
    of `content` alone (model_content of their recorded model_pin; one without is of unknown content); on
    `goldens` when given; of those, the
    ones graded by the run's rewards exactly (by name and parameters), else by a part of them, when any is, the
    rest set aside unread. One whose graders' code changed since it was measured is refused, naming it: it would
    compare the checkpoint under other graders than the base model's; one whose graders no longer load, naming it
    and the run's rewards (_graders_code)."""
    sha = sha256_file(resolve_goldens(goldens)) if goldens else None
    # a file evaluate_model did not write (or not as it is) decides nothing: each read once, those bytes judged
    every = [(path, read_recorded(path)) for path in baselines_of(model)]
    other = [(p, b) for p, b in every if content is None or model_content(b.get("model_pin")) != content]
    every = [item for item in every if item not in other]
    found = [(path, b) for path, b in every if sha is None or b.get("goldens_sha256") == sha]
    if every and not found:  # measuring a baseline on goldens chosen after training would let them be chosen
        raise UserInputError("goldens", f"{goldens} (sha256 {sha[:12]}) is not the goldens the baseline was measured "
                             f"on (baselines of this model: {', '.join(p.name for p, _ in every)}): the comparison "
                             "would mean nothing; measure the base model on them with evaluate_model first")
    skipped = []
    if run_graders:
        ours = {_grader_key(g) for g in run_graders}

        def keys(baseline: dict) -> set | None:
            try:
                return {_grader_key(g) for g in baseline.get("graders") or []}
            except ValueError:
                return None

        exact = [(p, b) for p, b in found if keys(b) == ours]
        kept = exact or [(p, b) for p, b in found if keys(b) and keys(b) <= ours]
        if kept:  # the others are another task's: set aside unread (issue 49)
            skipped = [f"{p.name} (graded by {_names(b.get('graders'))}, not this run's rewards)"
                       for p, b in found if (p, b) not in kept]
            found = kept
    moved = {path.name: reads.differences(b.get("graders_reads"), reads.now(b.get("graders_reads")))
             for path, b in found}  # a file the graders read is part of what the baseline measured
    code = {path.name: _graders_code(path, b, run_graders) for path, b in found
            if not moved[path.name] and b.get("graders_code_sha256")}
    changed = [(path, b) for path, b in found if moved[path.name] or path.name in code and
               code[path.name]["sha256"] != b["graders_code_sha256"]]
    if changed and len(changed) == len(found):
        path, baseline = changed[0]
        same_inputs(path, baseline, reads.now(baseline.get("graders_reads")))
        # round 15; and a file whose bytes that ran in the keyless worker are not what it holds (sources.MOVED)
        lines = file_pin_changes(baseline.get("graders_files")) + code.get(path.name, {}).get("moved", [])
        files = "".join(f"; {line}" for line in dict.fromkeys(lines))
        raise UserInputError("baseline", f"the graders' code changed since {path.name} was measured (its graders: "
                             f"{', '.join(g.get('name', '?') for g in baseline.get('graders') or [])}{files}): put "
                             "it back, or evaluate the base model again (evaluate_model files a baseline for the new "
                             "code beside this one)")
    return [item for item in found if item not in changed], skipped, other


def same_inputs(path: Path, baseline: dict, read: dict) -> None:
    """Refuse when the graders read other content than when `baseline` was measured (rewards.reads; older: not)."""
    moved = reads.unlike(baseline["graders_reads"], read) if isinstance(baseline.get("graders_reads"), dict) else []
    if moved:
        raise UserInputError("baseline", f"a file the graders read is not what they read when {path.name} was "
                             f"measured: {'; '.join(moved[:3])}. Put it back, or evaluate the base model again "
                             "(evaluate_model files a baseline for what the graders read now beside this one)")


def _graders_code(path: Path, baseline: dict, run_graders: list[RewardSpec] | None) -> dict:
    """graders_apart.graders_code of a baseline's graders (sha256, files, moved), taken in the keyless worker; one
    that no longer imports is refused naming them and the way on."""
    try:
        return graders_code(baseline.get("graders") or [])
    except UserInputError as exc:
        ours = _names([g.model_dump() for g in run_graders or []]) or "not recorded"
        raise UserInputError("baseline", f"{path.name} is graded by {_names(baseline.get('graders'))}, which does not "
                             f"load now ({exc}); this run's rewards are {ours}. Give the goldens this run is judged on "
                             "(CLI: --goldens FILE) after measuring the base model on them with evaluate_model "
                             "--graders set to the run's rewards, or put the module back") from None
