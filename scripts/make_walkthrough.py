"""Run docs/walkthrough.md's session for real and write (--write) or check its command and output blocks.

The walk runs every `llm-finetuning` command the doc shows, in order, in a temporary workspace, on the demo's quick
SFT warm start of the embedded tiny model (the untrained model earns no reward, so the inspection gate would send
it to SFT and nothing could launch). Each step's block in the doc sits between `<!-- walk:KEY -->` and
`<!-- /walk -->`: the command as typed, then an excerpt of what it printed.

What depends on the CPU's kernels, the clock or the machine (rewards, rates, counts of sampled outcomes, times,
pids, paths, versions, hashes) is replaced by a placeholder in the excerpt, so the blocks hold on every CPU; the
lines shown are the ones every run prints. tests/test_walkthrough.py reruns the walk and fails when the tools'
output drifts from the doc.

    .venv/bin/python scripts/make_walkthrough.py           # run the walk, print the differences (exit 1 if any)
    .venv/bin/python scripts/make_walkthrough.py --write   # run the walk, rewrite the doc's blocks
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "walkthrough.md"
RUN_NAME = "walk"
# The demo's quick walk settings (mcp_server.demo_models.QUICK): sums of two numbers 0..5, a 27-row training split
# and 9 held-out goldens, and the same SFT warm start `llm-finetuning demo --quick` trains in its phase 1.
MAX_NEW_TOKENS = 28
# Two GRPO steps of one prompt x 8 completions each: the walk checks the plumbing, not the learning.
TRAINING = ["max_steps=2", f"max_completion_length={MAX_NEW_TOKENS}", "per_device_train_batch_size=8",
            "gradient_accumulation_steps=1", "gradient_checkpointing=false"]


@dataclass
class Step:
    key: str
    argv: list[str]  # after `llm-finetuning`; RUN stands for the run directory
    keep: list[str]  # regexes: the output lines shown (every run prints them)
    exit_codes: tuple[int, ...] = (0,)
    luck: tuple[str, ...] = ()  # regexes: lines whose every number is the CPU's (whole numbers too)


STEPS = [
    Step("baseline", ["evaluate-model", "./warm-start", "--goldens", "goldens.jsonl", "--max-new-tokens",
                      str(MAX_NEW_TOKENS)], [r"^\S.* passed = ", r"^  baseline: "], luck=(r" passed = ",)),
    Step("emit", ["emit-config", "--model", "./warm-start", "--dataset", "data.jsonl", "--gpu", "cpu",
                  "--run-name", RUN_NAME, *[a for o in TRAINING for a in ("--override", o)]],
         [r"^Emitted", r"^  (run dir|config|script|run with):", r"^VALID", r"^  no findings"]),
    Step("sample", ["sample-completions", "RUN"], [r"^Sampled", r"^  (model|samples|next):"]),
    Step("inspect", ["inspect-rewards", "RUN"],
         [r"^Reviewed", r"^  base success rate", r"^  (format_reward|correctness_reward|total) ", r"^  next:"],
         luck=(r"^  (format_reward|correctness_reward|total) ",)),
    Step("verdict", ["record-inspection-verdict", "RUN", "--verdict", "pass", "--reviewer", "A. Person",
                     "--agree-rest"], [r"^Recorded"]),
    Step("gate", ["check-inspection-gate", "RUN"], [r"^GATE"]),
    Step("environment", ["check-environment", "--run", "RUN"], [r"^READY", r"^  WARN .*CUDA", r"^  report:"]),
    Step("launch", ["launch-training", "RUN"], [r"^started", r"^  (command|log):"]),
    Step("watch", ["training-status", "RUN"],
         [r"^\S+ (is|was|succeeded|failed|timed|stopped)\b", r"^  latest:", r"^  speed:"],
         luck=(r"^  latest:", r"^  speed:")),
    Step("diagnose", ["diagnose-run", "RUN"], [r"^  source:"], (0, 1)),
    Step("promote", ["promote-checkpoint", "RUN"], [r"^(PROMOTE|REJECT)", r"^  (goldens|drift|report):"], (0, 1),
         luck=(r"^  goldens:", r"^  drift:")),
    Step("export", ["export-model", "RUN", "--allow-unpromoted"],
         [r"^Exported", r"^  (files|model card|smoke test)"]),
]
TERMINAL = {"succeeded", "failed", "stopped", "crashed"}
# The emitted config's values shown (each with the reason above it): none depends on the machine, so an emitter
# change to one of them fails the walk's test as the examples' test does.
CONFIG_KEYS = ("num_generations", "learning_rate", "beta", "max_steps")


# ---------------------------------------------------------------- the workspace
def prepare(workspace: Path) -> None:
    """data.jsonl, goldens.jsonl and warm-start/ as the demo's quick walk makes them."""
    from mcp_server.demo_models import QUICK
    from mcp_server.evaluation.evaluate import evaluate_rows
    from mcp_server.evaluation.tiny_suite import tiny_split
    from mcp_server.tiny import ensure_tiny_model, write_jsonl
    from mcp_server.training.sft_warm_start import WarmStartSettings, sft_warm_start

    train_rows, held_rows = tiny_split(QUICK.max_operand)
    write_jsonl([{"prompt": r["prompt"], "answer": r["answer"]} for r in train_rows], workspace / "data.jsonl")
    write_jsonl([{k: r[k] for k in ("prompt", "question", "answer")} for r in held_rows],
                workspace / "goldens.jsonl")
    check_rows = train_rows[:100]  # as the demo: checked on training prompts, the goldens unseen

    def success_rate(model, tokenizer) -> float:
        items = evaluate_rows(None, check_rows, [{"name": "correctness_reward"}], QUICK.eval_max_new_tokens,
                              loaded=(model, tokenizer))
        return sum(i.passed for i in items) / len(items)

    settings = WarmStartSettings(max_steps=QUICK.sft_max_steps, check_every=QUICK.sft_check_every,
                                 target=QUICK.sft_target, learning_rate=QUICK.sft_learning_rate,
                                 batch_size=QUICK.sft_batch_size)
    sft_warm_start(ensure_tiny_model(), train_rows, workspace / "warm-start", settings, success_rate,
                   lambda done, total, message: None)


# ---------------------------------------------------------------- running and redacting
# What each command runs under, beside the caller's environment: the walk's workspace, offline, and no GPU (the same
# walk on a GPU box: the tiny model's CPU run).
def cli_env(workspace: Path) -> dict[str, str]:
    return {"LLM_FINETUNING_WORKSPACE": str(workspace), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}


def _cli(workspace: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """One `llm-finetuning` process per command, as a person types them (the doc's blocks are written so)."""
    env = {**os.environ, **cli_env(workspace),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "mcp_server.cli", *argv], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=900)


def _wait_for_training(workspace: Path, run: str, timeout_s: float = 900) -> None:
    """Poll the run's state until it ends, as a person would rerun training-status: through training_status, the
    core behind that command, in this process (a CLI process per poll took the CPU the run trains on; the doc's
    `watch` block is the command's own output, run once the run has ended)."""
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    saved = os.environ.get("LLM_FINETUNING_WORKSPACE")
    os.environ["LLM_FINETUNING_WORKSPACE"] = str(workspace)
    try:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if training_status(StatusRequest(run=str(workspace / run), log_lines=0)).state in TERMINAL:
                return
            time.sleep(2)
    finally:
        if saved is None:
            os.environ.pop("LLM_FINETUNING_WORKSPACE", None)
        else:
            os.environ["LLM_FINETUNING_WORKSPACE"] = saved
    raise TimeoutError(f"training in {workspace / run} did not end within {timeout_s:.0f} s")


NUMBER = re.compile(r"(?<![\w.])(?:(?<=[=\s(])[-+])?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?(%|s\b)?(?![\w.])")
KEPT = {"95%"}  # the intervals' confidence level, set by the tools


def redact(text: str, workspace: Path, run: str) -> str:
    """Placeholders for what the machine, the clock or the CPU's kernels decide."""
    if run:
        text = text.replace(str(workspace / run), "RUN")
    text = text.replace(str(workspace), ".")
    if run:
        text = text.replace(run, "RUN").replace(Path(run).name, "RUN")
    text = re.sub(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:\d{2}|Z)?", "<time>", text)
    text = re.sub(r"\bpid \d+", "pid <pid>", text)
    text = re.sub(r"\b[0-9a-f]{12,64}\b", "<sha256>", text)
    text = re.sub(r"(?<!\S)/\S*/python[\d.]*(?=\s|$)", "<python>", text)  # the training interpreter
    text = re.sub(r"\((TRL|torch|transformers) [^)\s]+\)", r"(\1 <version>)", text)
    # the planner's first-step figure: this CPU's readings, load, units (memory.estimate), said whole elsewhere
    text = re.sub(r"; first step expected [^\n]*", "; first step expected <the planner's figure for this CPU>", text)
    return text


def redact_numbers(line: str, luck: bool) -> str:
    """Whole numbers the walk sets (prompt counts, group sizes, steps) stay; decimals, percentages and seconds
    (rewards, rates, intervals, speeds) become N, and on a luck line every number does."""
    def one(match: re.Match) -> str:
        token = match.group(0)
        if token in KEPT or (token.replace(",", "").isdigit() and not luck):  # a sign: the CPU's too
            return token
        return "N" + (match.group(1) or "")
    return NUMBER.sub(one, line)


def excerpt(step: Step, output: str) -> list[str]:
    """The lines the doc shows, numbers redacted."""
    return [redact_numbers(line.rstrip(), any(re.search(p, line) for p in step.luck))
            for line in output.splitlines() if any(re.search(p, line) for p in step.keep)]


def config_excerpt(config: str) -> list[str]:
    """CONFIG_KEYS' lines of the emitted config.yaml, each with the comment lines above it."""
    lines, shown = config.splitlines(), []
    for i, line in enumerate(lines):
        if line.split(":")[0] in CONFIG_KEYS:
            start = i
            while start > 0 and lines[start - 1].startswith("#") and not lines[start - 1].startswith("# ---"):
                start -= 1
            shown += lines[start:i + 1]
    return shown


def shown_command(step: Step) -> str:
    words = []
    for word in step.argv:
        words.append(f'"{word}"' if " " in word else word)
    line = "llm-finetuning " + " ".join(words)
    if len(line) <= 110:
        return line
    out, current = [], "llm-finetuning"
    for word in words:  # wrap long commands with backslashes, breaking before flags
        if word.startswith("--") and len(current) > 40:
            out.append(current + " \\")
            current = "   "
        current += " " + word
    return "\n".join([*out, current])


def walk(cli: Callable[[Path, list[str]], subprocess.CompletedProcess] = _cli) -> dict[str, str]:
    """Run the whole session; the rendered block of each step, by key (and the data's first row). `cli` runs one
    command in the workspace (a process each by default; tests/test_walkthrough.py calls the CLI's main in its own
    process: the same parser, core and output, without a Python start-up and the library imports per command)."""
    blocks: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="walkthrough-") as tmp:
        workspace = Path(tmp).resolve()
        prepare(workspace)
        first_row = (workspace / "data.jsonl").read_text(encoding="utf-8").splitlines()[0]
        blocks["data"] = f"```json\n{first_row}\n```"
        run = ""
        for step in STEPS:
            if step.key == "watch":
                _wait_for_training(workspace, run)
            argv = [run if word == "RUN" else word for word in step.argv]
            done = cli(workspace, argv)
            if done.returncode not in step.exit_codes:
                raise RuntimeError(f"`llm-finetuning {' '.join(argv)}` exited {done.returncode}:\n"
                                   f"{done.stdout}\n{done.stderr[-3000:]}")
            if step.key == "emit":
                run = next(p.relative_to(workspace).as_posix() for p in (workspace / "runs").iterdir())
                config = (workspace / run / "train" / "config.yaml").read_text(encoding="utf-8")
                blocks["config"] = "```yaml\n" + "\n".join(config_excerpt(config)) + "\n```"
            lines = excerpt(step, redact(done.stdout, workspace, run))
            if not lines:
                raise RuntimeError(f"`{step.key}` printed none of the lines the doc shows:\n{done.stdout}")
            blocks[step.key] = (f"```bash\n{shown_command(step)}\n```\n\n```text\n" + "\n".join(lines)
                                + "\n```")
    return blocks


# ---------------------------------------------------------------- the doc
REGION = re.compile(r"(<!-- walk:([a-z]+) -->\n)(.*?)\n?(<!-- /walk -->)", re.S)


def doc_blocks(text: str) -> dict[str, str]:
    return {m.group(2): m.group(3) for m in REGION.finditer(text)}


def differences(now: dict[str, str], text: str) -> list[str]:
    """Unified-diff lines between the doc's blocks and the walk's, per step; missing or extra steps named."""
    shown = doc_blocks(text)
    diff = [f"step '{key}' missing from {DOC.name}" for key in now if key not in shown]
    diff += [f"step '{key}' in {DOC.name} is no step of the walk" for key in shown if key not in now]
    for key in now:
        if key in shown and shown[key] != now[key]:
            diff += list(difflib.unified_diff(shown[key].splitlines(), now[key].splitlines(),
                                              f"{DOC.name} ({key})", f"the walk now ({key})", lineterm=""))
    return diff


def rewrite(now: dict[str, str], text: str) -> str:
    return REGION.sub(lambda m: m.group(1) + now.get(m.group(2), m.group(3)) + "\n" + m.group(4), text)


def main(argv: list[str]) -> int:
    now = walk()
    text = DOC.read_text(encoding="utf-8")
    if "--write" in argv:
        missing = [key for key in now if key not in doc_blocks(text)]
        if missing:
            print(f"{DOC} has no region for {missing}: add `<!-- walk:KEY -->` ... `<!-- /walk -->`")
            return 1
        DOC.write_text(rewrite(now, text), encoding="utf-8")
        print(f"wrote {len(now)} blocks into {DOC}")
        return 0
    diff = differences(now, text)
    print("\n".join(diff) if diff else f"{DOC} holds: every block is what the walk prints now")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
