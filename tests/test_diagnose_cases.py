"""The diagnoses a second expert's trainer states found missed (issue 34: (c), (g), (h), kl with beta 0), a rate far
outside its range leading its symptoms (issue 32), every patch stating what else it changes, and an onset found
on logs longer than 64 as on short ones (a survivor of issue 33's mutation audit). Each input is a
trainer_state.json built by construction (no training, no luck), read through diagnose_run's doors: the core API,
and the CLI for one."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import run_cli_json
from mcp_server.recipe.variants import BASE_RECIPE
from support import SERIES_CONFIG, diagnose_series, healthy_rows, series_file, with_series


def problems(d):
    return [f for f in d.findings if f.severity != "info"]


def by_code(d, code):
    return next(f for f in d.findings if f.code == code)


def lengthens_or_masks(f) -> bool:
    return "max_completion_length" in f.patch or "mask_truncated_completions" in f.patch


def truncation_rows(n: int = 8) -> list[dict]:
    """Healthy, except completions cut more and more (0 -> 60%): nothing diverges, the reward still rises."""
    return with_series(healthy_rows(n), "completions/clipped_ratio", [0.0, 0.0, 0.1, 0.2, 0.4, 0.5, 0.6, 0.6][:n])


# ---------------------------------------------------------------- issue 32: a rate far outside its range
def test_far_rate_leads_its_symptoms_and_nothing_lengthens_completions(tmp_path):
    """3e-3 on a full fine-tune (300x the range's top) with completions cut more and more and nothing diverged
    yet: the rate was an info note and completions_truncated led with a patch doubling max_completion_length
    and masking truncation. The rate leads, the cut is its effect, and no patch lengthens or masks."""
    d = diagnose_series(tmp_path, with_series(truncation_rows(), "learning_rate", [3e-3] * 8), learning_rate=3e-3)
    first = problems(d)[0]
    assert (first.code, first.severity, first.caused_by) == ("lr_out_of_range", "warning", None), d.findings
    assert first.patch == {"learning_rate": BASE_RECIPE["learning_rate"]}
    cut = by_code(d, "completions_truncated")
    assert cut.caused_by == "lr_out_of_range" and cut.patch == {}
    assert not any(lengthens_or_masks(f) for f in d.findings), [(f.code, f.patch) for f in d.findings]
    assert any("smaller" in change for change in first.patch_changes), first.patch_changes


def test_rate_in_range_keeps_the_truncation_patch(tmp_path):
    """The twin: the same cut at the recipe's rate is the root, with its patch (the rule above is the rate's)."""
    d = diagnose_series(tmp_path, truncation_rows())
    first = problems(d)[0]
    assert first.code == "completions_truncated" and first.patch == {"max_completion_length": 48,
                                                                     "mask_truncated_completions": True}
    assert any("longer" in c for c in first.patch_changes) and any("leave the loss" in c
                                                                    for c in first.patch_changes)


def test_far_rate_on_a_healthy_run_stays_a_note(tmp_path):
    """No symptom: the far rate is a note (the demo's tiny model trains at such rates on purpose)."""
    rows = with_series(healthy_rows(8), "learning_rate", [3e-3] * 8)
    d = diagnose_series(tmp_path, rows, learning_rate=3e-3)
    assert d.healthy and by_code(d, "lr_out_of_range").severity == "info"


# ---------------------------------------------------------------- (c) correctness exactly 0 from step 1
def never_scores_rows(n: int = 8) -> list[dict]:
    rows = with_series(healthy_rows(n), "frac_reward_zero_std", [1.0] * n)
    rows = with_series(rows, "rewards/correctness_reward/mean", [0.0] * n)
    rows = with_series(rows, "rewards/correctness_reward/std", [0.0] * n)
    rows = with_series(rows, "rewards/format_reward/mean", [0.99] * n)
    rows = with_series(rows, "rewards/format_reward/std", [0.02] * n)
    rows = with_series(rows, "reward", [0.99] * n)
    return with_series(rows, "reward_std", [0.02] * n)


def test_correctness_zero_from_the_start_leads_with_its_cause(tmp_path):
    """Every group at zero spread from step 1, correctness exactly 0, format 99%: the tool patched num_generations
    and steps_per_generation to 16 (making the run off-policy) and never named the cause. The cause leads (base
    success 0: SFT first; or the answer extraction/column), no config patch follows."""
    d = diagnose_series(tmp_path, never_scores_rows(), num_generations=8)
    first = problems(d)[0]
    assert (first.code, first.severity, first.caused_by) == ("task_never_scores", "error", None), d.findings
    assert "SFT" in first.explanation and "answer column" in first.explanation and "format_reward" in \
        first.explanation
    assert first.patch == {} and first.add_rewards == []
    effect = by_code(d, "no_reward_signal")
    assert effect.caused_by == "task_never_scores" and effect.patch == {}
    assert not any({"num_generations", "steps_per_generation"} & set(f.patch) for f in d.findings)


def test_correctness_zero_through_the_cli(tmp_path):
    """The same trainer state through the CLI door: the cause first, in the JSON an agent reads."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(SERIES_CONFIG))
    proc, data = run_cli_json("diagnose-run", str(series_file(tmp_path, never_scores_rows())), "--config",
                              str(config), "--no-validate")
    assert proc.returncode == 1 and data["findings"][0]["code"] == "task_never_scores", data["findings"]


def test_correctness_that_scored_once_is_not_never(tmp_path):
    """The twin: one log with a success, so the task can score; the zero spread is no_reward_signal's."""
    rows = never_scores_rows()
    rows[3]["rewards/correctness_reward/mean"] = 0.01
    d = diagnose_series(tmp_path, rows)
    assert "task_never_scores" not in [f.code for f in d.findings]


def test_a_format_reward_that_never_pays_is_found_whichever_reward_it_is(tmp_path):
    """Issue 44: open-r1's published logs show rewards/format_reward/mean 0 at every step while accuracy trains;
    the never-scores check read only the correctness reward and called the run healthy. Every rewards/<name>/mean
    is read: the format reward that never pays is named, with what it costs."""
    rows = with_series(healthy_rows(8), "rewards/format_reward/mean", [0.0] * 8)
    rows = with_series(rows, "rewards/format_reward/std", [0.0] * 8)
    d = diagnose_series(tmp_path, rows)
    found = by_code(d, "reward_never_pays")
    assert not d.healthy and found.severity == "warning", d.findings
    assert "format_reward" in found.explanation and "correctness_reward" in found.explanation
    assert "task_never_scores" not in [f.code for f in d.findings]  # the task's reward pays


def test_a_reward_that_paid_once_or_a_penalty_at_zero_is_no_finding(tmp_path):
    """The twins: a format reward that paid at one log can pay; a penalty at 0 penalised nothing (its best)."""
    rows = with_series(healthy_rows(8), "rewards/format_reward/mean", [0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0])
    assert "reward_never_pays" not in [f.code for f in diagnose_series(tmp_path, rows).findings]
    rows = [{**row, "rewards/soft_overlong_punishment/mean": 0.0} for row in healthy_rows(8)]
    d = diagnose_series(tmp_path, rows)
    assert d.healthy, d.findings


def test_the_only_reward_never_paying_is_the_task_never_scoring_whatever_its_name(tmp_path):
    """A run whose one reward is not correctness-named (a custom reward) and never pays: nothing is reinforced."""
    rows = [{k: v for k, v in row.items() if "correctness" not in k} for row in never_scores_rows()]
    rows = with_series(rows, "rewards/format_reward/mean", [0.0] * 8)
    rows = with_series(rows, "reward", [0.0] * 8)
    d = diagnose_series(tmp_path, rows)
    assert problems(d)[0].code == "task_never_scores" and "format_reward" in problems(d)[0].explanation


def test_more_generations_stays_on_policy_and_says_what_it_changes(tmp_path):
    """Zero spread with a task that scores: the patch doubled num_generations and steps_per_generation, silently
    making an on-policy run off-policy and halving its prompts per step. It doubles the accumulation with it
    (the same prompts per optimizer step, still on-policy) and states what it changes."""
    rows = with_series(healthy_rows(8), "frac_reward_zero_std", [0.9] * 8)
    d = diagnose_series(tmp_path, rows)
    found = by_code(d, "no_reward_signal")
    assert found.patch == {"num_generations": 8, "gradient_accumulation_steps": 2}
    assert found.patch_changes == ["completions per generation batch 8 -> 16 (generation time and the reward's "
                                   "calls scale with it)"]


# ---------------------------------------------------------------- (g) truncation rising, correctness falling
def cut_and_falling_rows(n: int = 8) -> list[dict]:
    rows = with_series(healthy_rows(n), "completions/clipped_ratio", [0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.92])
    rows = with_series(rows, "rewards/correctness_reward/mean", [0.5, 0.45, 0.4, 0.33, 0.27, 0.2, 0.14, 0.1])
    return with_series(rows, "reward", [1.4, 1.33, 1.27, 1.2, 1.12, 1.05, 0.98, 0.9])


def test_truncation_with_correctness_falling_offers_soft_overlong_punishment(tmp_path, tiny_model):
    """Truncation rising to 92% with correctness falling: the root said "fix the cause ranked above" with nothing
    above it, and no patch. It offers DAPO's soft overlong punishment (TRL's get_soft_overlong_punishment) pinned at
    the run's limit, validated with the run's config, and no dangling reference."""
    d = diagnose_series(tmp_path, cut_and_falling_rows(), validate=True, model_name_or_path=str(tiny_model))
    first = problems(d)[0]
    assert (first.code, first.caused_by) == ("completions_truncated", None), d.findings
    assert first.add_rewards == [{"name": "soft_overlong_punishment", "weight": 1.0,
                                  "params": {"max_completion_len": 24, "soft_punish_cache": 5}}]
    assert first.patch_valid is True, first.patch_problems
    assert "ranked above" not in first.explanation and not lengthens_or_masks(first)
    assert by_code(d, "reward_falling").caused_by == "completions_truncated"


def test_truncation_on_a_diverging_run_points_at_its_cause(tmp_path):
    """The twin: the same cut on a run whose KL runs away: the cut is the divergence's, no reward is added."""
    rows = with_series(cut_and_falling_rows(), "kl", [0.01, 0.5, 1.5, 3.0, 6.0, 8.0, 9.0, 9.0])
    d = diagnose_series(tmp_path, rows)
    cut = by_code(d, "completions_truncated")
    assert cut.add_rewards == [] and not lengthens_or_masks(cut)
    assert problems(d)[0].code != "completions_truncated"


# ---------------------------------------------------------------- (h) clipping under reuse; kl with beta 0
def reuse_rows(n: int = 8) -> list[dict]:
    rows = [{k: v for k, v in r.items() if k != "kl"} for r in healthy_rows(n)]  # beta 0: TRL logs no kl
    rows = with_series(rows, "clip_ratio/region_mean", [0.04, 0.06, 0.08, 0.1, 0.18, 0.21, 0.23, 0.19])
    rows = with_series(rows, "clip_ratio/high_mean", [0.02, 0.03, 0.04, 0.05, 0.1, 0.12, 0.13, 0.11])
    return with_series(rows, "clip_ratio/high_max", [0.3, 0.5, 0.6, 0.8, 1.0, 1.0, 1.0, 1.0])


def test_clipping_under_reuse_is_flagged(tmp_path):
    """beta 0, num_iterations 4, 18-23% of tokens clipped in the second half, clip_ratio/high_max 1.0: called
    healthy at a 0.2 threshold. Flagged; the patch makes the run on-policy and says so."""
    d = diagnose_series(tmp_path, reuse_rows(), beta=0.0, num_iterations=4)
    found = by_code(d, "importance_ratio_blowup")
    assert found.severity == "warning" and found.patch == {"num_iterations": 1}
    assert "high_max" in found.explanation and "beta 0" in found.explanation
    assert any(c.startswith("makes the run on-policy") for c in found.patch_changes), found.patch_changes
    assert "config_not_the_runs" not in [f.code for f in d.findings]


def test_kl_logged_with_beta_zero_says_the_config_is_not_the_runs(tmp_path):
    """TRL 1.16 logs kl only when beta != 0: a kl column with the config's beta 0 means the config read is not the
    one the run trained with. It leads; the twin (beta 0.04, the same metrics) is healthy."""
    d = diagnose_series(tmp_path, healthy_rows(8), beta=0.0)
    first = problems(d)[0]
    assert (first.code, first.severity) == ("config_not_the_runs", "warning") and "kl" in first.explanation
    assert diagnose_series(tmp_path, healthy_rows(8), beta=0.04).healthy


def test_every_patch_states_what_else_it_changes(tmp_path):
    """Every finding with a patch states its side effects (or has none to state): on a run that reuses each
    generation, its patches say they make it on-policy; JSON keeps them for an agent."""
    rows = with_series(reuse_rows(), "frac_reward_zero_std", [0.95] * 8)
    d = diagnose_series(tmp_path, rows, beta=0.0, num_iterations=4)
    patched = [f for f in d.findings if f.patch]
    assert patched and all(f.patch_changes for f in patched), [(f.code, f.patch, f.patch_changes) for f in patched]
    assert json.loads(d.model_dump_json())["findings"][0]["patch_changes"] == d.findings[0].patch_changes


@pytest.mark.parametrize("logs, dead_from", [(40, 20), (100, 70), (100, 1), (65, 63)])
def test_an_onset_is_the_first_step_its_rule_fires_on_long_logs_too(tmp_path, logs, dead_from):
    """An off-by-one in the onset search over long logs (over 64 logs, bisected instead of scanned) moved every
    onset by a step. signal_lost fires once two logs after the first have zero spread and no gradient: a log dead
    from row `dead_from` on has its onset at the row after it, whatever the log's length."""
    rows = healthy_rows(logs)
    dead = [i >= dead_from for i in range(logs)]
    rows = with_series(rows, "frac_reward_zero_std", [1.0 if d else 0.1 for d in dead])
    rows = with_series(rows, "grad_norm", [0.0 if d else 0.5 for d in dead])
    found = next(f for f in diagnose_series(tmp_path, rows).findings if f.code == "signal_lost")
    assert found.onset == max(dead_from, 1) + 2, found  # steps are 1-based: row i is step i + 1


@pytest.mark.parametrize("steps", [2, 3, 8])
def test_an_explanation_names_no_finding_the_diagnosis_does_not_list(tmp_path, steps):
    """The seventh walk: on a 2-step run, no_reward_signal said its cause was completions_truncated "(ranked above)"
    while no such finding was listed. Every completion cut, every group at zero spread, correctness 0, over 2, 3
    and 8 steps: no explanation names a finding code that is not among the findings."""
    import re

    from mcp_server.diagnosis.registry import CODES

    rows = with_series(never_scores_rows(steps), "completions/clipped_ratio", [1.0] * steps)
    d = diagnose_series(tmp_path, rows)
    listed = {f.code for f in d.findings}
    for f in d.findings:
        named = {c for c in re.findall(r"\b[a-z_]{6,}\b", f.explanation) if c in CODES} - {f.code}
        assert named <= listed, (f.code, named - listed, f.explanation)


# ---------------------------------------------------------------- walk 12: the findings of a no-signal run agree
def _no_signal(rows: list[dict]) -> list[dict]:
    n = len(rows)
    return with_series(with_series(rows, "frac_reward_zero_std", [1.0] * n), "reward_std", [0.0] * n)


def _nothing_paid(n: int = 8, reward: str = "correctness_reward") -> list[dict]:
    """Walk 12's word-count run: one reward, 0 for every completion from the first log, no gradient."""
    rows = [{k: v for k, v in row.items() if not k.startswith("rewards/")} for row in healthy_rows(n)]
    rows = with_series(rows, f"rewards/{reward}/mean", [0.0] * n)
    rows = with_series(rows, f"rewards/{reward}/std", [0.0] * n)
    return with_series(with_series(_no_signal(rows), "reward", [0.0] * n), "grad_norm", [0.0] * n)


NO_SIGNAL_TABLE = {
    "nothing paid, one custom reward (walk 12)": (_nothing_paid(reward="word_count_reward"), {}),
    "nothing paid, no gradient": (_nothing_paid(), {}),
    "the task never scores, the format pays": (never_scores_rows(), {"num_generations": 8}),
    "every completion cut, nothing paid": (with_series(_nothing_paid(), "completions/clipped_ratio", [1.0] * 8), {}),
    "half cut, nothing paid": (with_series(_nothing_paid(), "completions/clipped_ratio", [0.5] * 8), {}),
    "a reward that returns None": (with_series(_nothing_paid(), "rewards/correctness_reward/mean",
                                               [float("nan")] * 8), {}),
    "a rate far out of range, nothing paid": (with_series(_nothing_paid(), "learning_rate", [3e-3] * 8),
                                              {"learning_rate": 3e-3}),
    "entropy collapsed, nothing paid": (with_series(_nothing_paid(), "entropy", [0.8, 0.5, 0.2, 0.05, 0.01, 0.005,
                                                                                 0.002, 0.001]), {}),
}


@pytest.mark.parametrize("case", list(NO_SIGNAL_TABLE))
def test_the_findings_of_a_no_signal_run_agree_on_what_fixes_it(tmp_path, case):
    """Walk 12: no_reward_signal said "The patch samples more completions per prompt" and "its patch is the fix" of
    task_never_scores, whose own words are that no config change fixes it. Over every finding that co-occurs on a
    run whose groups have no spread: an effect carries no patch and no words proposing one of its own, and what it
    says of its root's fix is what that root carries (its patch, or no config change)."""
    from mcp_server.diagnosis.triage import OWN_REMEDY

    rows, config = NO_SIGNAL_TABLE[case]
    d = diagnose_series(tmp_path, rows, **config)
    found = {f.code: f for f in problems(d)}
    effects = [f for f in found.values() if f.caused_by]
    assert effects, [(f.code, f.caused_by) for f in found.values()]
    for effect in effects:
        root = found[effect.caused_by]
        fixed = bool(root.patch or root.add_rewards)
        own, _, note = effect.explanation.partition(f" This is an effect of {root.code} (ranked above)")
        assert note, (effect.code, effect.explanation)
        assert effect.patch == {} and effect.add_rewards == [], (effect.code, effect.patch)
        assert not OWN_REMEDY.search(own), (effect.code, own)
        assert ("its patch is the fix" in note) == fixed and ("no config change fixes" in note) != fixed, note
    for f in found.values():  # a finding that carries no patch never speaks of one as its own
        if not (f.patch or f.add_rewards):
            assert not OWN_REMEDY.search(f.explanation.split(" This is an effect of ")[0]), (f.code, f.explanation)
    if case.startswith("nothing paid"):
        assert problems(d)[0].code == "task_never_scores" and {"no_reward_signal", "signal_lost"} <= set(found)
    if case == "half cut, nothing paid":  # what it measured stays when its own remedy goes
        assert "50% of the completions are cut" in found["no_reward_signal"].explanation, found["no_reward_signal"]


# ---------------------------------------------------------------- walk 13: the findings agree with the run's review
def _walk13_rows(steps: int = 4) -> list[dict]:
    """Walk 13's 24h->12h run: one reward at 0 at every step, no spread, no gradient, most completions cut."""
    rows = [{k: v for k, v in row.items() if not k.startswith("rewards/")} for row in healthy_rows(steps)]
    rows = with_series(rows, "rewards/time12_reward/mean", [0.0] * steps)
    rows = with_series(rows, "rewards/time12_reward/std", [0.0] * steps)
    rows = with_series(with_series(_no_signal(rows), "reward", [0.0] * steps), "grad_norm", [0.0] * steps)
    rows = with_series(rows, "learning_rate", [5e-4] * steps)
    return with_series(rows, "completions/clipped_ratio", ([0.875, 0.75, 0.625, 0.5] * steps)[:steps])


def _diagnose_reviewed(tmp_path, rows, review: dict | None):
    """diagnose_run on a run folder whose inspection review measured `review` (InspectResult's fields)."""
    from mcp_server.diagnosis.diagnose import diagnose_run
    from mcp_server.diagnosis.models import DiagnoseRequest

    run = tmp_path / "run"
    (run / "train" / "logs").mkdir(parents=True)
    (run / "inspection").mkdir()
    config = {**SERIES_CONFIG, "learning_rate": 5e-4, "use_peft": True, "num_generations": 8,
              "max_completion_length": 16}
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(config))
    if review is not None:
        (run / "inspection" / "review.json").write_text(json.dumps({"result": review, "reviewed_ids": []}))
    state = series_file(run / "train" / "logs", rows)
    return diagnose_run(DiagnoseRequest(source=str(state), config_path=str(run / "train" / "config.yaml"),
                                        validate_patches=False))


WALK13_REVIEWS = {  # review, steps: the lead task_never_scores names, whether it carries the sampling patch
    "walk 13: 12% of 16 prompts, 1.6% of completions, 4 x 8 completions": (
        {"base_success_rate": 0.125, "mean_success_rate": 0.015625, "rate_prompts": 16}, 4,
        "too few completions to meet a rare success", True),
    "the same rate over 40 steps: a zero it does not predict": (
        {"base_success_rate": 0.125, "mean_success_rate": 0.015625, "rate_prompts": 16}, 40,
        "what training scores differs from what the review scored", False),
    "a review that measured 0": ({"base_success_rate": 0.0, "mean_success_rate": 0.0, "rate_prompts": 16}, 4,
                                 "the review measured base success 0 of 16 prompts", False),
    "no review": (None, 4, "base success 0", False),
}


@pytest.mark.parametrize("case", list(WALK13_REVIEWS))
def test_a_run_that_never_scores_is_read_against_its_review_and_its_findings_agree(tmp_path, case):
    """Walk 13: task_never_scores said "base success 0: SFT first" of a run whose review measured 12% of 16 prompts
    (1.6% of completions: 4 steps x 8 completions pay none at 60% chance); completions_truncated offered a longer
    limit after the same diagnosis said "the cut is not why they score alike"; lr_out_of_range, "a note, not a
    symptom", said "RL updates at supervised rates destroy the policy" and carried a patch."""
    review, steps, lead, patched = WALK13_REVIEWS[case]
    d = _diagnose_reviewed(tmp_path, _walk13_rows(steps), review)
    found = {f.code: f for f in d.findings}
    root = problems(d)[0]
    assert root.code == "task_never_scores", [(f.code, f.caused_by) for f in d.findings]
    assert lead in root.explanation, root.explanation
    assert ("base success 0" in root.explanation) == (review is None or review["base_success_rate"] == 0)
    assert bool(root.patch) == patched and (root.patch.get("num_generations") == 16 if patched else True), root.patch
    assert ("No config change fixes" in root.explanation) == (not patched and lead != WALK13_REVIEWS["the same "
                                                               "rate over 40 steps: a zero it does not predict"][2])
    effect = found["no_reward_signal"]
    assert effect.caused_by == "task_never_scores" and effect.patch == {}
    assert ("its patch is the fix" in effect.explanation) == patched, effect.explanation
    said_not_cut = [f.code for f in d.findings if "the cut is not why they score alike" in f.explanation]
    if said_not_cut:  # no finding then lengthens completions
        assert not any("max_completion_length" in f.patch for f in d.findings), [(f.code, f.patch) for f in d.findings]
    rate = found["lr_out_of_range"]
    assert rate.severity == "info" and rate.patch == {} and "destroy" not in rate.explanation, rate
