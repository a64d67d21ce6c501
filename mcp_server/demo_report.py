"""What the demo (demo.py) writes and shows beside the phases it walks: its console (rich bars on a terminal,
plain lines otherwise), the training brief, the data card and validation report, the reward curve and the
summary's lines."""

from __future__ import annotations

from pathlib import Path

from mcp_server.diagnosis.progress_log import run_progress
from mcp_server.runs import Run
from mcp_server.workspace import atomic_save_figure, atomic_write_text


class Console:
    """rich: progress bars on a terminal, plain lines otherwise; on stderr with --json (stdout is the JSON)."""

    def __init__(self, to_stderr: bool):
        from rich.console import Console as RichConsole

        self.rich = RichConsole(stderr=to_stderr, highlight=False)

    def print(self, *args, **kwargs):
        self.rich.print(*args, soft_wrap=True, **kwargs)  # paths stay whole, whatever the width

    def phase(self, number: int | str, title: str):
        self.rich.rule(f"[bold]Phase {number}: {title}")

    def progress(self):
        """A rich bar on a terminal; elsewhere (`make demo > log`, a pipe) LineProgress: lines at a bounded rate
        while the work runs (issue 49: rich draws a bar off a terminal only when it ends, so the log said nothing
        for the 5 minutes of training)."""
        if not self.rich.is_terminal:
            return LineProgress(self.rich.file)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        return Progress(
            TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), console=self.rich, transient=False,
        )

    def reporter(self, bar, task):
        """A core's Report (done, total, message) onto a bar of progress(): its counts on a terminal's bar, and off
        a terminal its own lines too (DecodeProgress: prompts done, decode rate, time left)."""
        def report(done: float, total: float | None, message: str) -> None:
            bar.update(task, completed=done, total=total, message=message)
        return report


class _Task:
    def __init__(self, description: str, total: float | None, info: str):
        self.description, self.total, self.info, self.completed = description, total, info, 0.0


class LineProgress:
    """What Console.progress gives off a terminal: rich Progress's calls used here (add_task, update, tasks, a
    context) printed as reporting.ProgressLines lines, the first, the last and one every PIPE_EVERY_S, each with
    its elapsed time and the time left at the measured rate ("GRPO training: step 12/150, reward 1.20 [...]")."""

    def __init__(self, stream):
        from mcp_server.reporting import PIPE_EVERY_S, ProgressLines

        self.stream, self.every, self.lines_of = stream, PIPE_EVERY_S, ProgressLines
        self.tasks: list[_Task] = []
        self.lines: list = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, description: str, total: float | None = None, info: str = "") -> int:
        self.tasks.append(_Task(description, total, info))
        self.lines.append(self.lines_of(self.stream, self.every))
        self.update(len(self.tasks) - 1, first=True)  # at once: what starts, before its first count
        return len(self.tasks) - 1

    def update(self, task: int, completed: float | None = None, total: float | None = None, info: str | None = None,
               message: str | None = None, first: bool = False) -> None:
        t = self.tasks[task]
        state = (t.completed if completed is None else completed, t.total if total is None else total,
                 t.info if info is None else info)
        if not (first or message) and state == (t.completed, t.total, t.info):
            return  # nothing new (the bar set to its end once more): said already
        t.completed, t.total, t.info = state
        if message:  # a core's own line (its counts, rate, time left)
            self.lines[task](t.completed, t.total, f"{t.description}: {message}")
            return
        count = f"{t.completed:g}" + (f"/{t.total:g}" if t.total else "") if t.completed or t.total else "starting"
        what = "step " if "training" in t.description or "warm-start" in t.description else ""
        self.lines[task](t.completed, t.total, f"{t.description}: {what}{count}" + (f", {t.info}" if t.info else ""))




def plot_reward_curve(run_dir: Path, out: Path) -> Path | None:
    """PNG of reward (and its std band) per logged step from progress.jsonl (the lines the trainer signed)."""
    try:
        points = run_progress(Run(run_dir)).records
    except OSError:  # none yet, or not a file
        return None
    points = [p for p in points if isinstance(p.get("reward"), (int, float)) and isinstance(p.get("step"), int)]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p["step"] for p in points]
    reward = [p["reward"] for p in points]
    std = [p.get("reward_std") or 0.0 for p in points]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(steps, reward, marker="o", label="mean reward (format + correctness)")
    ax.fill_between(steps, [r - s for r, s in zip(reward, std)], [r + s for r, s in zip(reward, std)], alpha=0.2,
                    label="reward std")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward")
    ax.set_title("GRPO on the tiny arithmetic task")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    atomic_save_figure(fig, out)
    plt.close(fig)
    return out




def training_brief(baseline, sft, sft_steps: int | None, inspection: dict) -> str:
    """`sft_steps` None: the shipped warm start (mcp_server/demo_warm_start.py), not trained by this run."""
    how = ("the shipped warm start, built once by scripts/build_tiny_warm_start.py with TRL SFTTrainer on the\n"
           "  training split's reference solutions and pinned by its weights' sha256" if sft_steps is None else
           f"{sft_steps} steps of TRL SFTTrainer on the\n  training split's reference solutions")
    return f"""# Training brief: demo

- Goal: the tiny model answers sums of two numbers reliably in the <reasoning>/<answer> format.
- Baseline: {baseline.pass_rate:.0%} on {baseline.n} held-out goldens
  (95% CI {baseline.ci_low:.0%}-{baseline.ci_high:.0%}).
- Off-ramps: prompting and retrieval cannot teach a randomly initialised model arithmetic; a bigger model is
  outside the demo's scope (offline, CPU).
- Method: GRPO/RLVR (a programmatic check of success exists). The base success rate is zero, so GRPO would
  see zero reward everywhere: an SFT warm-start first ({how}),
  reaching {sft.pass_rate:.0%} (95% CI {sft.ci_low:.0%}-{sft.ci_high:.0%}).
  GRPO then starts from the warm-start, which is the baseline the checkpoint must beat.
- Rewards: format_reward (1.0) + correctness_reward (2.0 when the answer is exact).
- Inspection: base success rate of the warm-start on sampled prompts {inspection["base_success_rate"]:.0%};
  GRPO can learn: {inspection["grpo_can_learn"]}. The verdict was recorded by the demo, not by a person.
- Model: the embedded tiny Qwen2 (~100k parameters); hardware: CPU.
"""




def write_data_files(run_dir: Path, data: Path, train_rows: list[dict], held_rows: list[dict]) -> tuple[Path, Path]:
    golden_questions = {r["question"] for r in held_rows}
    overlap = sum(r["question"] in golden_questions for r in train_rows)
    missing = sum(not r.get("answer") for r in train_rows)
    card = atomic_write_text(Run(run_dir).data_card, f"""# Data card: demo

- Source: generated by mcp_server.tiny (split_task), deterministic; licence: same as this project.
- Size: {len(train_rows)} training prompts; goldens: {len(held_rows)} held-out problems (eval/goldens-demo.jsonl).
- Format: prompt-only chat messages (`prompt`) plus the gold answer (`answer`), read by correctness_reward.
- Filtering: none needed; the split is disjoint by problem.
""")
    report = atomic_write_text(Run(run_dir).validation_report, f"""# Validation report: demo

- Rows: {len(train_rows)} ({data})
- Empty prompts: 0; over-long prompts: 0
- Rows missing the `answer` column (read by correctness_reward): {missing}
- Overlap with the goldens (exact question match): {overlap}
""")
    return card, report


def print_summary(console: Console, summary) -> None:
    """The summary's lines (a demo.DemoSummary), the figures first, the verdict and where everything is last."""
    run_dir = Path(summary.run_dir)

    def pct(value):
        return "-" if value is None else f"{value:.0%}"

    console.rich.rule("[bold]Summary")
    if summary.model != "tiny":  # a real model's figures say which weights they are (smollm2.QUANTISED_NOTE)
        from mcp_server.smollm2 import QUANTISED_NOTE

        console.print(f"  model          {QUANTISED_NOTE}")
    console.print(f"  base model     {pct(summary.baseline_pass_rate)}")
    console.print(f"  after SFT      {pct(summary.sft_pass_rate)}" + (
        f"  (95% CI {pct(summary.sft_ci[0])}-{pct(summary.sft_ci[1])})" if summary.sft_ci else ""))
    console.print(f"  after GRPO     {pct(summary.grpo_pass_rate)}" + (
        f"  (95% CI {pct(summary.grpo_ci[0])}-{pct(summary.grpo_ci[1])})" if summary.grpo_ci else ""))
    if summary.improvement_ci:
        console.print(f"  improvement    {summary.improvement_points:+.0f} points (95% CI "
                      f"{summary.improvement_ci[0]:+.0f} to "
                      f"{summary.improvement_ci[1]:+.0f}, paired over the same goldens)"
                      + (f"; above the {'warm-start' if summary.sft_pass_rate is not None else 'base model'}'s own "
                         "interval too" if summary.above_sft_interval else ""))
    console.print(f"  verdict        {summary.verdict or '-'}")
    if summary.kernel_note:
        console.print(f"  on other CPUs  {summary.kernel_note}")
    console.print(f"  time           {summary.seconds:.0f} s")
    if summary.plot_path:
        console.print(f"  reward curve   {summary.plot_path}")
    console.print(f"  everything     {run_dir}  (summary: {Run(run_dir).demo_summary})")
    for problem in summary.problems:
        console.print(f"  [red]problem:[/] {problem}")
    console.print("[bold green]OK[/]" if summary.ok else "[bold red]NOT OK[/]")
