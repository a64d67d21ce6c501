"""What diagnosis reads, as tables generated from the comparisons it reads through (issue 48, the m11 audit's
diagnosis survivors; the m12 audit's): a step logged twice in a row, the grad-norm spike's running level, a metric
logged null, a non-finite metric in a Trainer's printed stdout, the reward's trend.

Each table's rows come from the rule's own declaration (values.METRIC_NAMES and METRIC_PREFIXES: the metrics
diagnosis reads; context.SPIKE_FACTOR and SPIKE_FLOOR: the spike's thresholds; metrics.PRINTED_NONFINITE: how a
printed dict shows a non-finite float; context.FLAT_MIN_POINTS: the flat rule's minimum), each row asserting what the
reader or the rule must give; inputs are constructed (a run's signed progress log, an export), nothing trains.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from mcp_server.diagnosis.context import FLAT_MIN_POINTS, SPIKE_FACTOR, SPIKE_FLOOR, Ctx
from mcp_server.diagnosis.diagnose import diagnose_run
from mcp_server.diagnosis.metrics import PRINTED_NONFINITE, LoadedRun, load_run, normalize_row
from mcp_server.diagnosis.models import DiagnoseRequest
from mcp_server.diagnosis.values import METRIC_NAMES, METRIC_PREFIXES
from support import write_signed_lines

NAN, INF = math.nan, math.inf
CONFIG = {"model_name_or_path": "tiny", "learning_rate": 1e-6, "beta": 0.04, "num_generations": 4,
          "per_device_train_batch_size": 8, "max_completion_length": 24, "use_cpu": True,
          "output_dir": "checkpoints"}
# Every metric diagnosis reads: its names, and one metric of each family it reads by prefix (under the name the
# reader gives it: TRL < 0.17's rewards/<func> reads as rewards/<func>/mean).
READ = sorted(METRIC_NAMES) + [prefix + ("probe/mean" if prefix == "rewards/" else "probe")
                               for prefix in METRIC_PREFIXES]
FUNCTIONS = {"rewards/format_reward/mean": 0.9, "rewards/format_reward/std": 0.2}  # per-function reward columns


def base(step: int, functions: bool = True) -> dict:
    """One logged step of a healthy run (TRL's names), with or without the per-function reward columns."""
    row = {"step": step, "loss": 0.05, "grad_norm": 0.5, "learning_rate": 1e-6, "reward": 0.5 + 0.01 * step,
           "reward_std": 0.3, "frac_reward_zero_std": 0.1, "kl": 0.01, "entropy": 0.8,
           "completions/mean_length": 20.0, "num_tokens": 1000.0 * step}
    return {**row, **(FUNCTIONS if functions else {})}


def reading(row: dict, name: str):
    """What a reader holds for `name` in one row: 'absent', 'null' (logged, no number), 'nan', or the number."""
    if name not in row:
        return "absent"
    value = row[name]
    return "null" if value is None else "nan" if isinstance(value, float) and math.isnan(value) else value


def run_with(root: Path, rows: list[dict], tail: list[dict] | None = None) -> Path:
    """A run directory whose train/logs/progress.jsonl holds `rows` signed as its trainer writes them."""
    run = root / "runs" / "r"
    (run / "train" / "logs").mkdir(parents=True)
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    write_signed_lines(run / "train" / "logs" / "progress.jsonl", rows + (tail or []))
    return run


# ---------------------------------------------------------------- one step written twice in a row
# m11-diagnosis-same-step-drops-first-line: rows_from_records reads a step lower than the one before in a run's own
# progress log as a resume starting over there; a step equal to the one before (its metrics over two lines, not a
# resume) is one step whose lines merge: what only the first line holds stays, a value on both is the later one.
PLACES = {  # where the metric is: (its value on the first line, on the second; None: not on that line)
    "first-only": (0.25, None), "second-only": (None, 0.75), "both": (0.25, 0.75),
    "both-nan-first": (NAN, 0.75), "both-nan-second": (0.25, NAN)}
SOURCES = ("own-log", "export", "resumed")


def twice(place: str, name: str, source: str, root: Path) -> tuple[Path, dict]:
    """(the source, the row step 3 must read as): steps 1-4 logged, step 3 over two lines in a row (the first with
    `name`, loss and num_tokens, the second with `name` and grad_norm, per `place`); `resumed`: an earlier attempt
    logged 1-4 (step 3 with entropy only it has), then the resume from checkpoint-2 logs 3 twice and 4."""
    first, second = PLACES[place]
    one = {"step": 3, "loss": 0.03, "num_tokens": 3000.0, **({name: first} if first is not None else {})}
    two = {"step": 3, "grad_norm": 0.3, **({name: second} if second is not None else {})}
    steps = [{"step": s, "reward": 0.5, "grad_norm": 0.5} for s in (1, 2)]
    four = {"step": 4, "reward": 0.6, "grad_norm": 0.4}
    lines = [*steps, one, two, four]
    if source == "resumed":
        lines = [*steps, {"step": 3, "entropy": 9.0, "loss": 9.0}, four, one, two, four]
    expected = {k: reading({**one, **two}, k) for k in {**one, **two}}  # the later line's value wins
    if source == "export":
        path = root / "metrics.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return path, expected
    return run_with(root, lines), expected


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("name", READ)
@pytest.mark.parametrize("place", list(PLACES))
def test_a_step_logged_twice_in_a_row_reads_as_one_step_of_both_lines(tmp_path, workspace, place, name, source):
    """Before: in a run's own progress log (and a resumed one's) the second line was read as a resume at its own
    step: the first line's metrics the second lacks were dropped (a NaN loss followed by a line of rewards for the
    same step gave no nan_loss). An export reads the same step the same way."""
    path, expected = twice(place, name, source, workspace)
    rows = load_run(path).rows
    step3 = next(r for r in rows if r["step"] == 3)
    assert {k: reading(step3, k) for k in step3} == expected, step3
    assert [r["step"] for r in rows] == [1, 2, 3, 4], rows


# ---------------------------------------------------------------- the grad-norm spike's running level
# m11-diagnosis-spike-one-value-level: a spike is judged against the median of the previous (up to WINDOW) non-zero
# grad norms, never fewer than LEVEL_MIN of them; it is a spike above SPIKE_FACTOR x that level and from SPIKE_FLOOR.
WINDOW, LEVEL_MIN = 10, 2
LEVEL = 0.25  # the earlier values' level: SPIKE_FACTOR x LEVEL above SPIKE_FLOOR, so the factor decides
LOW = SPIKE_FLOOR / SPIKE_FACTOR / 4  # a level whose factor's threshold is under the floor: the floor decides
LEVELS = {  # the value after the earlier ones, by the threshold it is compared with: (level, value)
    "factor-below": (LEVEL, SPIKE_FACTOR * LEVEL * 0.96), "factor-at": (LEVEL, SPIKE_FACTOR * LEVEL),
    "factor-above": (LEVEL, SPIKE_FACTOR * LEVEL * 1.04), "floor-below": (LOW, SPIKE_FLOOR * 0.96),
    "floor-at": (LOW, SPIKE_FLOOR), "floor-above": (LOW, SPIKE_FLOOR * 1.04)}


def earlier_values(count: int, level: float, zeros: bool) -> list[float]:
    """`count` earlier non-zero grad norms whose last WINDOW have the median `level` (older ones 40x it: a level
    read past the window would hide the spike), a zero after each when `zeros` (no advantage: no level)."""
    values = [level * 40] * max(0, count - WINDOW) + [level] * min(count, WINDOW)
    return [v for value in values for v in ((value, 0.0) if zeros else (value,))]


@pytest.mark.parametrize("zeros", [False, True], ids=["plain", "zeros-between"])
@pytest.mark.parametrize("count", [*range(WINDOW + 2), 2 * WINDOW + 1])
@pytest.mark.parametrize("where", list(LEVELS))
def test_a_grad_norm_spike_is_judged_against_the_running_level_of_enough_earlier_values(where, count, zeros):
    """A first grad norm of mostly zero-advantage groups (0.08, then 1.2) is no level to judge a spike by: a
    healthy run read as diverged would be told to lower its learning rate."""
    level, value = LEVELS[where]
    series = [*earlier_values(count, level, zeros), value]
    rows = [{"step": i + 1, "grad_norm": v, "loss": 0.05} for i, v in enumerate(series)]
    ctx = Ctx(LoadedRun(kind="jsonl", metrics_path=None, rows=rows))
    above = value > SPIKE_FACTOR * level and value >= SPIKE_FLOOR
    expected = [(len(series), value, level)] if count >= LEVEL_MIN and above else []
    assert ctx.grad_spikes() == expected, (series, ctx.grad_spikes())
    assert ctx.diverged == bool(expected)


# ---------------------------------------------------------------- a metric logged null, NaN, infinite or not at all
# m11-diagnosis-null-metric-key-dropped: TRL logs null for a metric whose every value in the window was NaN. The
# reader keeps it logged (no number), and reads it NaN where TRL's null is a NaN (a reward function's mean; the
# total reward and its std beside per-function columns); the live guard and diagnose_run read it alike. A reward
# that is null, NaN or infinite at every step is a lost signal (an error); one not logged, or any other metric so
# logged, is not.
FORMS = {"null": None, "nan": NAN, "inf": INF, "missing": ...}


def expected_reading(name: str, form: str, functions: bool):
    if form == "missing":
        return "absent"
    if form != "null":
        return "nan" if form == "nan" else INF
    per_function = functions or name.startswith("rewards/")
    nan = name.startswith("rewards/") and name.endswith("/mean") or name in ("reward", "reward_std") and per_function
    return "nan" if nan else "null"


@pytest.mark.parametrize("functions", [True, False], ids=["with-functions", "without-functions"])
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("name", READ)
def test_a_metric_logged_null_nan_inf_or_not_at_all_reads_as_logged(tmp_path, workspace, name, form, functions):
    """Before: diagnose_run dropped a null from every row it read (the live guard kept it), so a log whose reward
    was null at every step, without per-function columns, read as a run that logs no reward: no finding at all,
    where the guard stops the same run as signal_lost."""
    lines = []
    for step in range(1, 7):
        line = {k: v for k, v in base(step, functions).items() if k != name}
        if FORMS[form] is not ...:
            line[name] = FORMS[form]
        lines.append(line)
    run = run_with(workspace, lines)
    want = expected_reading(name, form, functions)
    read = load_run(run).rows
    assert [reading(r, name) for r in read] == [want] * 6, read
    guard = [normalize_row(line, i) for i, line in enumerate(lines)]  # the live guard's reading of each line
    assert [reading(r, name) for r in guard] == [want] * 6, guard
    diagnosed = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    found = {f.code: f.severity for f in diagnosed.findings}
    lost = name == "reward" and form != "missing"
    assert (found.get("signal_lost") == "error") == lost, found


# ---------------------------------------------------------------- a non-finite metric in a Trainer's printed stdout
# m12 audit: a run known only by its stdout is read from the dicts the Trainer prints (metrics.rows_from_log).
# transformers 5's PrinterCallback/ProgressCallback print each float formatted (f"{v:.4g}": 'nan', quoted);
# transformers 4's, and a callback that does print(logs), print str(logs): a NaN bare, `nan`, which
# ast.literal_eval refuses, so exactly the NaN steps were dropped ("healthy: no problems in 5 logged steps").
# Each metric a rule judges non-finite -> the finding that must follow; steps 1-5 finite, 6-30 non-finite.
NONFINITE_FINDS = {"loss": "nan_loss", "grad_norm": "nan_loss", "kl": "kl_explosion", "reward": "signal_lost",
                   "rewards/format_reward/mean": "reward_returns_none"}
PRINTED_FORMS = {"nan": NAN, "inf": INF, "-inf": -INF}


def installed_printer(logs: dict) -> str:
    """What the installed transformers' PrinterCallback prints for `logs` (its on_log, stdout captured)."""
    import contextlib
    import io

    from transformers.trainer_callback import PrinterCallback, TrainerState

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        PrinterCallback().on_log(None, TrainerState(), None, logs=dict(logs))
    return out.getvalue()


PRINTERS = {"str(logs) (transformers 4, print(logs))": lambda logs: str(logs) + "\n",
            "the installed transformers' PrinterCallback": installed_printer}


def printed_run(root: Path, printer: str, name: str | None, value: float) -> Path:
    """A folder (no run of this project) whose train/logs/stdout.log holds 30 printed logs, `name` = `value` from
    step 6 on (None: every step healthy)."""
    run = root / "elsewhere"
    (run / "train" / "logs").mkdir(parents=True)
    lines = []
    for step in range(1, 31):
        logs = {k: v for k, v in base(step).items() if k != "step"}
        if name is not None and step > 5:
            logs[name] = value
        lines.append(PRINTERS[printer]({**logs, "epoch": step / 30}))
    (run / "train" / "logs" / "stdout.log").write_text("".join(lines))
    return run


def test_every_printed_non_finite_form_has_rows():
    assert {str(v) for v in PRINTED_FORMS.values()} == {str(sign * v) for v in PRINTED_NONFINITE.values()
                                                        for sign in (1, -1)}, PRINTED_FORMS


@pytest.mark.parametrize("form", list(PRINTED_FORMS))
@pytest.mark.parametrize("name", list(NONFINITE_FINDS))
@pytest.mark.parametrize("printer", list(PRINTERS))
def test_a_non_finite_metric_in_a_printed_stdout_log_is_read_and_found(tmp_path, workspace, printer, name, form):
    run = printed_run(tmp_path, printer, name, PRINTED_FORMS[form])
    assert f"'{name}': " in (run / "train" / "logs" / "stdout.log").read_text().splitlines()[-1]
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    assert (d.steps_logged, d.last_step) == (30, 30), (d.steps_logged, d.last_step, d.summary)
    found = {f.code: f.severity for f in d.findings}
    assert found.get(NONFINITE_FINDS[name]) == "error", found


@pytest.mark.parametrize("printer", list(PRINTERS))
def test_a_healthy_printed_stdout_log_has_none_of_the_non_finite_findings(tmp_path, workspace, printer):
    d = diagnose_run(DiagnoseRequest(source=str(printed_run(tmp_path, printer, None, 0.0)), validate_patches=False))
    assert (d.steps_logged, d.last_step) == (30, 30), d.summary
    assert not {f.code for f in d.findings} & set(NONFINITE_FINDS.values()), d.findings


# ---------------------------------------------------------------- the reward's trend x the findings that follow
# m12-diagnosis-flat-also-falling: rule_flat calls a reward flat when its fitted change is under two standard errors
# (and under the batch's reward std), up or down; a significant fall is reward_falling's (when it is sizeable) and
# never flat (its advice, doubling the learning rate, is wrong for a falling reward). Reward std 0.3 throughout;
# a deterministic wiggle of +-0.01 (steady) or +-0.25 (noisy) around each trend, t running 0 -> 1 over the run.
TRENDS = {  # name -> (reward at t, step i; flat from FLAT_MIN_POINTS logs; falling)
    "rising": (lambda t, i: 0.2 + 0.6 * t + 0.01 * (-1) ** i, False, False),
    "flat": (lambda t, i: 0.5 + 0.01 * (-1) ** i, True, False),
    "falling": (lambda t, i: 0.8 - 0.5 * t + 0.01 * (-1) ** i, False, True),
    # significant, but under half the batch's spread: too small for reward_falling, too steep to be flat
    "falling-slowly": (lambda t, i: 0.5 - 0.1 * t + 0.01 * (-1) ** i, False, False),
    "noisy": (lambda t, i: 0.5 + 0.25 * (-1) ** i, True, False),
    "noisy-rising": (lambda t, i: 0.3 + 0.4 * t + 0.25 * (-1) ** i, False, False),
    "noisy-falling": (lambda t, i: 0.9 - 0.8 * t + 0.25 * (-1) ** i, False, True),
}
TREND_LENGTHS = (FLAT_MIN_POINTS - 1, FLAT_MIN_POINTS, 30)


@pytest.mark.parametrize("n", TREND_LENGTHS)
@pytest.mark.parametrize("trend", list(TRENDS))
def test_the_rewards_trend_gives_the_findings_it_must_and_none_it_must_not(tmp_path, workspace, trend, n):
    reward, flat, falling = TRENDS[trend]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({**base(s, functions=False), "reward": reward((s - 1) / (n - 1), s)}) + "\n"
                            for s in range(1, n + 1)))
    found = {f.code for f in diagnose_run(DiagnoseRequest(source=str(path), validate_patches=False)).findings}
    want = {"reward_flat": flat and n >= FLAT_MIN_POINTS, "reward_falling": falling}
    assert {code: code in found for code in want} == want, (trend, n, found)


# ---------------------------------------------------------------- zero spread: a low success rate, or something else
# Walk 9: 1 prompt per step x 8 completions, a 0/1 reward paying ~4%, 2 of 3 logged groups without spread, 88% of
# completions cut: blamed on truncation ("more generations would not help") and chained to the learning rate.
# Rows: (success rate p, num_generations G, groups per log, logs, observed zero-spread share, kl by log or None)
# -> the cause named. Each log's reward is built from whole successes (a 0/1 reward: mean s/n, TRL's unbiased std).
LOW_RATE, OTHER, CUT, RATE = "low success rate", "other", "completions_truncated", "lr_out_of_range"
ZERO_SPREAD = [
    # the walk's run: 1 success in 24, 3 groups, 2 without spread: what p = 4% predicts at G = 8 (71%)
    (1 / 24, 8, 1, 3, 2 / 3, [0.0, 0.0176, 0.0445], LOW_RATE),
    (1 / 24, 8, 1, 3, 2 / 3, None, LOW_RATE),
    (0.05, 8, 8, 5, 0.7, None, LOW_RATE),  # 40 groups, 28 without spread: p = 5% predicts 66%
    (0.25, 4, 1, 3, 2 / 3, None, LOW_RATE),  # predicts 32%: 2 of 3 has 24% chance, 3 groups tell little
    (0.25, 4, 8, 5, 0.7, None, OTHER),  # the same share on 40 groups is far above 32%: not the rate
    (0.5, 8, 8, 5, 0.9, None, OTHER),  # p = 50% predicts 1%
    (0.0, 8, 1, 3, 1.0, None, CUT),  # nothing paid and too few ended to tell: the cut is the one cause left
    # the KL grew past 0.1 and 12 groups lost their spread after it: the rate's
    (0.1, 4, 2, 8, 0.75, [0.0, 0.01, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0], RATE),
    (0.1, 8, 1, 3, 2 / 3, [0.0, 3.0, 3.0], LOW_RATE),  # the KL grew, but 2 groups after it tell nothing
]


def zero_spread_rows(p: float, g: int, per_log: int, logs: int, share: float, kl: list | None) -> list[dict]:
    """`logs` logs of `per_log` groups of g completions, round(share x groups) of them without spread (all 0), the
    round(p x completions) successes spread over the others (at least 1 and at most g - 1 each), 88% cut."""
    groups = per_log * logs
    zero = round(share * groups)
    successes = [0] * groups
    spread = list(range(groups - zero))  # the first groups have spread, as a run whose spread goes
    left = round(p * groups * g)
    for i in spread:
        successes[i] = 1
    left -= len(spread)
    assert left >= 0, "each group with spread needs a success"
    for i in spread * g:
        if left and successes[i] < g - 1:
            successes[i] += 1
            left -= 1
    rows, n = [], per_log * g
    for log in range(logs):
        mine = successes[log * per_log:(log + 1) * per_log]
        mean = sum(mine) / n
        rows.append({"step": log + 1, "loss": 0.0, "grad_norm": 0.5, "learning_rate": 1e-6, "reward": mean,
                     "reward_std": math.sqrt(mean * (1 - mean) * n / (n - 1)),
                     "frac_reward_zero_std": sum(s in (0, g) for s in mine) / per_log,
                     "kl": kl[log] if kl else 0.0, "entropy": 0.8, "completions/mean_length": 15.0,
                     "completions/clipped_ratio": 0.875})
    return rows


@pytest.mark.parametrize("p, g, per_log, logs, share, kl, cause", ZERO_SPREAD)
def test_zero_spread_names_a_low_success_rate_only_where_it_predicts_the_share(tmp_path, workspace, p, g, per_log,
                                                                                 logs, share, kl, cause):
    config = {**CONFIG, "num_generations": g, "per_device_train_batch_size": g * per_log, "max_completion_length": 16,
              "learning_rate": 1e-3 if kl else 1e-6}
    run = run_with(workspace, zero_spread_rows(p, g, per_log, logs, share, kl))
    (run / "train" / "config.yaml").write_text(yaml.safe_dump(config))
    d = diagnose_run(DiagnoseRequest(source=str(run), validate_patches=False))
    found = next(f for f in d.findings if f.code == "no_reward_signal")
    text = found.explanation
    assert "would not help" not in text or cause == CUT, text
    if cause == LOW_RATE:
        assert found.caused_by is None and "a low success rate predicts" in text, (found.caused_by, text)
        assert f"rests on {per_log * logs} group(s)" in text and f"num_generations {2 * g}" in text, text
        assert "prompts per step" in text and "SFT warm start" in text, text
        assert found.patch["num_generations"] == 2 * g, found.patch
    else:
        assert "a low success rate predicts" not in text, text
        assert found.caused_by == (cause if cause == RATE else None), (found.caused_by, text)
        assert ("because their completions are cut" in text) == (cause == CUT), text


def test_diagnose_run_reads_a_run_by_its_short_name_as_every_run_command_does(workspace):
    """Walk 9: `diagnose-run letters` said "no such file or directory: letters" where every other command read the
    run runs/<date>-letters. The short name reads that run; a log file's path still reads as a log; a name two runs
    share is refused naming the field."""
    from conftest import run_cli, run_cli_json

    named = workspace / "runs" / "2026-12-06-letters"
    (named / "train").mkdir(parents=True)
    (named / "train" / "config.yaml").write_text(yaml.safe_dump({**CONFIG, "num_generations": 8}))
    write_signed_lines(named / "train" / "logs" / "progress.jsonl", zero_spread_rows(1 / 24, 8, 1, 3, 2 / 3, None))
    (named / "train" / "logs" / "stdout.log").write_text("{'loss': 0.0, 'reward': 0.125, 'epoch': 0.01}\n")
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    proc, data = run_cli_json("diagnose-run", "letters", "--no-validate", env=env, cwd=workspace)
    assert proc.returncode == 1 and data["source"] == str(named.resolve()), (proc.stderr, data)
    assert data["source_kind"] == "run_dir" and data["steps_logged"] == 3
    proc, data = run_cli_json("diagnose-run", str(named / "train" / "logs" / "stdout.log"), "--no-validate", env=env)
    assert data["source_kind"] == "log", (proc.stderr, data)
    (workspace / "runs" / "2026-12-07-letters").mkdir()
    proc = run_cli("diagnose-run", "letters", "--no-validate", env=env, cwd=workspace)
    assert proc.returncode == 2 and "source:" in proc.stderr and "2026-12-07-letters" in proc.stderr, proc.stderr
