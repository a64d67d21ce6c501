"""The mutation lane (issue 48): realistic bugs applied one at a time to a copy of the package, each judged by the
tests that run its mutated line. Prints the caught share per area and every survivor with what a user would see.

    python bench/mutate.py                 # every mutation (`make mutate`)
    python bench/mutate.py --area gate     # one area; --only ID[,ID] for single mutations
    python bench/mutate.py --check         # only check that every mutation still applies (no tests run)
    python bench/mutate.py --jobs 2        # two copies of the tree, mutations shared between them
    python bench/mutate.py --by-area       # judge by the hand-kept test files of each area instead (below)

Each mutation is an exact text substitution in one file of the package: a bug a refactor could plausibly introduce
(an off-by-one at a boundary, a field dropped from a pin, a comparison swapped, a check that returns early, a
default flipped), with what a user sees when it lands (`effect`). They were written from the product code alone,
without reading the tests, so the lane is a blind audit of what the tests pin down.

Which tests judge a mutation is derived, not kept by hand: the fast suite (`-m "not slow"`, what `make check` runs)
runs once on the unmutated copy under coverage.py, each test's setup, call and teardown recorded under its node id
(bench/mutate_contexts.py); that data file is the map from a module's line to the tests that run it, kept in the
system's temporary directory under the tree's content hash (a second run of an unchanged tree reuses it). A
mutation is judged by the tests that ran its mutated line(s) (the whole statement they are part of); where its area
has only slow judges (the sandbox's start bubblewrap, in processes coverage does not follow) its area's files run
too. A line that runs only at import (a module constant, a class field: no test's context) is judged by every test
that runs any line of its module (what reads the constant is there); where none does, and for a slow-only area's
line no fast test runs, by the area's hand-kept files (AREAS, MODULE_TESTS). A line of a fast area that no fast test
runs, not even at import, is reported unjudged: no test can catch it (a finding, not a pass). `--by-area` judges
every mutation by the area's files, as the lane did before the map.

A mutation whose text is no longer found exactly once (the code moved) fails the lane before any test runs (exit
2): update or drop it, never let it silently skip. The unmutated tests run first (the coverage run; a slow-only
area's files; with `--by-area`, each area's files); a test that fails there and would judge a chosen mutation
cannot judge it (exit 2). A mutation is caught when its tests fail (or time out); it survives when they pass. A
mutation that removes node ids among its judges (rows a test generates from the tuple it mutates: pytest exit 4,
"not found") is judged by the whole files of the missing node ids instead, so it gets a verdict. A pytest that
gives no verdict (killed by a signal) is an error to rerun, neither: not caught, and the summary line says how
many errors (and how many were kills) the share counts as not caught. A kill is no catch even where the unmutated
tests passed: the OOM killer answers the machine's load as well as the mutation, so a row that could read without
end under a mutation bounds itself (test_run_files' address-space limit). Exit 0 whatever the caught share: the
share is the result.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Area:
    name: str
    title: str
    tests: tuple[str, ...]  # test files (relative to the repository root) that cover the area
    marker: str = "not slow"  # pytest -m expression: the fast tests, unless the area has only slow ones


@dataclass(frozen=True)
class Mutation:
    id: str
    area: str
    path: str  # relative to the repository root
    old: str  # exact text, found exactly once in `path`
    new: str
    effect: str  # what a user sees when this lands


# The test files that cover each area: the mapping the lane runs (a mutation is judged by its area's files).
AREAS: dict[str, Area] = {a.name: a for a in (
    Area("recipe", "recipe rules", ("tests/test_recipe_rules.py", "tests/test_recipe_run_rules.py",
                                    "tests/test_rule_registry.py")),
    Area("memory", "memory planner", ("tests/test_memory_planner.py", "tests/test_memory_exact.py",
                                      "tests/test_memory_params.py", "tests/test_memory_search.py")),
    Area("promotion", "promotion and evaluation", ("tests/test_evaluation.py",)),
    Area("diagnosis", "diagnosis", ("tests/test_diagnose.py", "tests/test_diagnose_cases.py",
                                    "tests/test_diagnosis_logs.py", "tests/test_bad_input.py",
                                    "tests/test_diagnosis_input_tables.py", "tests/test_diagnosis_patches.py")),
    Area("runs", "runs and launchers", ("tests/test_launchers.py", "tests/test_run_keeping.py",
                                        "tests/test_run_safety.py", "tests/test_run_doors.py",
                                        "tests/test_run_states.py", "tests/test_run_forgery.py",
                                        "tests/test_run_tampering.py", "tests/test_launch_evidence.py")),
    Area("gate", "inspection gate and pins", ("tests/test_inspection_gate.py", "tests/test_gate_point_of_use.py",
                                              "tests/test_inspection.py", "tests/test_config_view.py",
                                              "tests/test_gate_table.py", "tests/test_loaded_weights.py",
                                              "tests/test_loaded_is_what_was_checked.py")),
    # Every sandbox test starts bubblewrap (marked slow): the lane runs them, they are this area's only judges.
    Area("sandbox", "sandbox and harness", ("tests/test_sandbox.py", "tests/test_sandbox_escapes.py",
                                            "tests/test_reward_hacks.py", "tests/test_rewards_declared.py",
                                            "tests/test_sandbox_table.py", "tests/test_sandbox_scoring.py",
                                            "tests/test_sandbox_host_state.py", "tests/test_reward_factory_params.py",
                                            "tests/test_sandbox_endings.py"),
         marker=""),
    # The tools' doors (m14): the request models' limits, the CLI's flags, the read-only mode, the JSON-RPC wire. The
    # wire runs only in a server process (coverage does not follow it): its judges are slow, the area's files run.
    Area("doors", "tool doors and inputs", ("tests/test_input_limits.py", "tests/test_cli_switches.py",
                                            "tests/test_tool_registry.py", "tests/test_server_inputs.py",
                                            "tests/test_bad_input.py"),
         marker=""),
)}

# The test files that cover each mutated module, where they are fewer than its area's (the lane's time is the
# survivors' test time): a module not named here is judged by its area's files.
MODULE_TESTS: dict[str, tuple[str, ...]] = {
    "mcp_server/recipe/rules.py": ("tests/test_recipe_rules.py", "tests/test_rule_registry.py"),
    "mcp_server/recipe/run_rules.py": ("tests/test_recipe_run_rules.py", "tests/test_rule_registry.py"),
    "mcp_server/memory/planner.py": ("tests/test_memory_planner.py", "tests/test_memory_search.py",
                                     "tests/test_memory_exact.py"),
    "mcp_server/diagnosis/metrics.py": ("tests/test_diagnosis_logs.py", "tests/test_diagnose.py",
                                        "tests/test_diagnose_cases.py", "tests/test_bad_input.py",
                                        "tests/test_diagnosis_input_tables.py"),
    "mcp_server/diagnosis/context.py": ("tests/test_diagnosis_logs.py", "tests/test_diagnose.py",
                                        "tests/test_diagnose_cases.py", "tests/test_diagnosis_input_tables.py"),
    "mcp_server/diagnosis/signal.py": ("tests/test_diagnosis_logs.py", "tests/test_diagnose.py",
                                       "tests/test_diagnose_cases.py"),
    # the m10 tables (issue 48): the stop's window and outcome, the entropy patch rule, as generated rows
    "mcp_server/training/stopping.py": ("tests/test_run_states.py", "tests/test_run_forgery.py"),
    "mcp_server/training/resume_patch.py": ("tests/test_run_states.py", "tests/test_resume_patch.py",
                                            "tests/test_resume_patch_acts.py", "tests/test_run_forgery.py"),
    "mcp_server/diagnosis/environment.py": ("tests/test_diagnosis_logs.py", "tests/test_diagnose.py",
                                            "tests/test_diagnose_cases.py",  # its signature tables: import-time
                                            "tests/test_diagnosis_patches.py"),
    "mcp_server/rewards/sandbox.py": ("tests/test_sandbox_scoring.py", "tests/test_sandbox.py",
                                      "tests/test_sandbox_escapes.py", "tests/test_sandbox_table.py"),
    "mcp_server/rewards/harness.py": ("tests/test_sandbox_scoring.py", "tests/test_sandbox.py",
                                      "tests/test_sandbox_escapes.py", "tests/test_reward_hacks.py",
                                      "tests/test_rewards_declared.py", "tests/test_sandbox_table.py",
                                      "tests/test_sandbox_endings.py"),
    "mcp_server/worker_apart.py": ("tests/test_worker_apart.py",),
    "mcp_server/inspection/replay.py": ("tests/test_replay.py",),  # the trainer's replay of the review (round 13)
    "mcp_server/rewards/harness_tests.py": ("tests/test_sandbox_scoring.py", "tests/test_sandbox.py",
                                           "tests/test_sandbox_escapes.py", "tests/test_reward_hacks.py",
                                           "tests/test_rewards_declared.py", "tests/test_sandbox_table.py",
                                           "tests/test_sandbox_endings.py"),
    # the files a reward reads (m10): the sandbox area's files never run them, these tables do (in process)
    **dict.fromkeys(("mcp_server/rewards/reads.py", "mcp_server/rewards/read_frames.py",
                     "mcp_server/rewards/native_reads.py"),
                    ("tests/test_reward_reads.py", "tests/test_reward_reads_every_audit_event.py",
                     "tests/test_reward_reads_native.py")),
    "mcp_server/inspection/loaded_config.py": ("tests/test_loaded_is_what_was_checked.py",
                                               "tests/test_loaded_weights.py"),
    # the m14 tables (issue 48): each door's contract as generated rows
    "mcp_server/inputs.py": ("tests/test_input_limits.py", "tests/test_bad_input.py"),
    "mcp_server/cli_flags.py": ("tests/test_cli_switches.py",),
    "mcp_server/toolspec.py": ("tests/test_tool_registry.py",),
    "mcp_server/jsonrpc.py": ("tests/test_server_inputs.py",),
}

M = Mutation
MUTATIONS: tuple[Mutation, ...] = (
    # ------------------------------------------------------------------ recipe rules
    M("recipe-min-generations", "recipe", "mcp_server/recipe/rules.py",
      "    if g < MIN_GENERATIONS:\n", "    if g <= MIN_GENERATIONS:\n",
      "num_generations=2 (TRL's minimum, a valid group) is refused as an error"),
    M("recipe-lr-far-below", "recipe", "mcp_server/recipe/rules.py",
      "far = lr >= high * LR_FAR_FACTOR or lr <= low / LR_FAR_FACTOR", "far = lr >= high * LR_FAR_FACTOR",
      "a learning rate 100x below the range is only a warning: a run that cannot learn passes validation"),
    M("recipe-on-policy-iterations", "recipe", "mcp_server/recipe/run_rules.py",
      "return ga % (spg * iterations) == 0", "return ga % spg == 0",
      "num_iterations > 1 (reused samples, off-policy) is read as on-policy: clip_on_policy says the clip does "
      "nothing when it acts"),
    M("recipe-dataset-one-chunk", "recipe", "mcp_server/recipe/run_rules.py",
      "    if prompts >= chunk:\n        return []", "    if prompts > chunk:\n        return []",
      "a data set of exactly one generation batch of prompts (trains one step per epoch) is refused as 0 steps"),
    M("recipe-vllm-context", "recipe", "mcp_server/recipe/run_rules.py",
      "isinstance(vllm_len, int) and length >= vllm_len:", "isinstance(vllm_len, int) and length > vllm_len:",
      "max_completion_length equal to vllm_max_model_length (no room for the prompt) passes validation"),
    # ------------------------------------------------------------------ memory planner
    M("memory-lora-reference-copy", "memory", "mcp_server/memory/components.py",
      "    if settings.beta != 0 and not settings.peft:\n        reference_bytes",
      "    if settings.beta != 0:\n        reference_bytes",
      "a LoRA run with beta > 0 is planned with a full reference copy it never loads: too big, levers it does not "
      "need"),
    M("memory-adam-one-state", "memory", "mcp_server/memory/components.py",
      "per_param, note = 2.0 * state_bytes, f\"AdamW", "per_param, note = 1.0 * state_bytes, f\"AdamW",
      "AdamW's optimizer state is planned at half its size: a full fine-tune that OOMs is planned to fit"),
    M("memory-fsdp-not-sharded", "memory", "mcp_server/memory/components.py",
      "fully_sharded=settings.zero_stage == 3 or settings.fsdp,", "fully_sharded=settings.zero_stage == 3,",
      "FSDP runs are planned with whole weights on every GPU: the plan refuses layouts that fit"),
    M("memory-fits-ignores-problems", "memory", "mcp_server/memory/planner.py",
      "fits=breakdown.peak <= capacity and not breakdown.problems,", "fits=breakdown.peak <= capacity,",
      "a layout the planner names as impossible (server mode with no GPU left to train) says fits: true"),
    M("memory-tight-fraction-of-peak", "memory", "mcp_server/memory/planner.py",
      "return \"tight\" if capacity - peak < TIGHT_FRACTION * capacity else \"fits\"",
      "return \"tight\" if capacity - peak <= 0 else \"fits\"",
      "a plan with 2% headroom says fits, not tight"),
    # ------------------------------------------------------------------ promotion and evaluation
    M("promote-beats-at-zero", "promotion", "mcp_server/evaluation/promote.py",
      "beats = ci_low > request.min_improvement_points", "beats = ci_low >= request.min_improvement_points",
      "a checkpoint identical to its base (interval 0 to 0) is PROMOTEd"),
    M("promote-hard-fail-boundary", "promotion", "mcp_server/evaluation/drift_rule.py",
      "return \"rerun\" if drop <= HARD_FAIL_POINTS + 1e-9 else \"hard_fail\"",
      "return \"rerun\" if drop < HARD_FAIL_POINTS else \"hard_fail\"",
      "a drift drop of exactly 5 points (2 of the 40-item suite) is a hard fail instead of a rerun"),
    M("promote-mcnemar-tail", "promotion", "mcp_server/evaluation/paired.py",
      "for k in range(max(gained, lost), d + 1))", "for k in range(max(gained, lost) + 1, d + 1))",
      "the exact p-value drops the observed count: 4 gained / 0 lost reads p = 0 and is called better"),
    M("promote-pass-any-grader", "promotion", "mcp_server/evaluation/evaluate.py",
      "return bool(scores) and all(v > 0 for v in scores.values())",
      "return bool(scores) and any(v > 0 for v in scores.values())",
      "a golden answered in the right format but wrong counts as passed: pass rates inflate"),
    M("promote-partial-baseline", "promotion", "mcp_server/evaluation/evaluate.py",
      "    elif request.limit:\n        result.baseline_note = \"a partial evaluation (limit) never becomes a "
      "baseline\"\n", "",
      "evaluate_model --limit 5 writes the base model's baseline from 5 goldens, frozen for every later promotion"),
    # ------------------------------------------------------------------ diagnosis
    M("diagnosis-null-reward-mean", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "value is None and (name.startswith(\"rewards/\") and name.endswith(\"/mean\")",
      "value is None and (name.startswith(\"rewards/\") and name.endswith(\"/std\")",
      "a reward that returned None for every sample (TRL logs null) is read as not logged: no finding"),
    M("diagnosis-unsorted-steps", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    return [rows[s] for s in sorted(rows)]\n", "    return list(rows.values())\n",
      "rows logged out of order (a resumed run's re-logged steps) are read in file order: trends and first/last "
      "evidence are wrong"),
    M("diagnosis-truncated-last-line", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "broken = read.bad[:-1] if read.last_line_bad and (read.records or read.unsigned) else read.bad",
      "broken = read.bad",
      "diagnose_run on a live run whose last progress line is half-written refuses the whole log"),
    M("diagnosis-zero-grad-level", "diagnosis", "mcp_server/diagnosis/context.py",
      "            if value > 0:\n                history.append(value)", "            history.append(value)",
      "zero grad_norm logs (TRL writes 0 for a batch with no advantage) become the running level: a spike after "
      "them is missed"),
    M("diagnosis-signal-lost-first-row", "diagnosis", "mcp_server/diagnosis/signal.py",
      '    rows = [r for r in ctx.run.rows if r["step"] != first]\n', "    rows = ctx.run.rows\n",
      "the first log (before any update, grad_norm 0) counts towards signal_lost: a 2-log healthy start is "
      "stopped by the guard"),
    # ------------------------------------------------------------------ runs and launchers
    M("runs-server-gpus-exact", "runs", "mcp_server/training/launchers/machine.py",
      "if target.server_mode and processes + vllm_gpus > target.num_gpus:",
      "if target.server_mode and processes + vllm_gpus >= target.num_gpus:",
      "a server-mode launch that uses exactly the run's GPUs is refused"),
    M("runs-lora-strategy", "runs", "mcp_server/training/launchers/machine.py",
      "    if cpu or run_request.finetune in (\"lora\", \"qlora\"):\n        return \"ddp\"",
      "    if cpu:\n        return \"ddp\"",
      "a multi-GPU LoRA run launches under DeepSpeed ZeRO-2 instead of plain DDP"),
    M("runs-checkpoint-order", "runs", "mcp_server/training/runrecord.py",
      "    return [path for _, path in sorted(found)]", "    return sorted(path for _, path in found)",
      "checkpoint-10 sorts before checkpoint-9: resume_training resumes from an older checkpoint"),
    M("runs-half-checkpoint", "runs", "mcp_server/training/runrecord.py",
      "    problems = checkpoint_problems(run, path)\n    if problems:\n        return problems\n",
      "",
      "a checkpoint whose save was cut short (no digest: the weights half-written) is the latest: resume fails "
      "or loads weights the run never finished writing"),
    M("runs-guard-checkpoint", "runs", "mcp_server/training/resume_patch.py",
      "if int(p.name.split(\"-\")[-1]) < stopped[\"step\"]]", "if int(p.name.split(\"-\")[-1]) <= stopped[\"step\"]]",
      "after a guard stop, resume starts from the checkpoint saved at the failing step (it holds the failure)"),
    M("runs-crash-after-save", "runs", "mcp_server/training/launchers/local/process_state.py",
      "    if exit_code not in (None, 0):\n        return \"failed\", note",
      "    if exit_code is not None and exit_code < 0:\n        return \"failed\", note",
      "a trainer that saved, then exited 1 reads succeeded"),
    M("runs-promotion-not-launched", "runs", "mcp_server/runs.py",
      "        found += [self.promotion.name] if self.promotion.exists() else []\n", "",
      "a run whose only trace is promotion.json is re-emitted over (its promotion is orphaned)"),
    M("runs-inside-link", "runs", "mcp_server/workspace.py",
      "    return real, not real.is_relative_to(home)\n", "    return real, False\n",
      "a run folder that is a link to elsewhere is written through: files land outside the workspace"),
    # ------------------------------------------------------------------ inspection gate and pins
    # (since _tree lists hidden files too, the old `_tree(path)` was no change: this skips them as `datasets` does)
    M("gate-data-dir-hidden", "gate", "mcp_server/inspection/pins.py",
      "        files = sorted(p for p in path.rglob(\"*\") if p.is_file())\n",
      "        files = [p for p in _tree(path) if not any(q.startswith(\".\") for q in p.relative_to(path).parts)]\n",
      "a hidden file in a data directory (read by `datasets`) changes after the verdict without closing the gate"),
    M("gate-data-files-mapping", "gate", "mcp_server/inspection/pins.py",
      "    if isinstance(files, dict):\n        return [f for value in files.values() for f in _data_files(value)]\n"
      "    if isinstance(files, (list, tuple)):\n", "    if isinstance(files, (list, tuple, dict)):\n",
      "data_files given as a mapping of splits is pinned by its split names: the data changes, the gate stays "
      "open"),
    M("gate-reward-config-dropped", "gate", "mcp_server/inspection/pins.py",
      "        \"reward_config\": {k: config.get(k) for k in REWARD_CONFIG_KEYS},\n", "",
      "reward_weights edited after the verdict: the gate stays open"),
    M("gate-added-part", "gate", "mcp_server/inspection/pins.py",
      "        if before == after:\n            continue", "        if before == after or before is None:\n"
      "            continue",
      "a pinned part that was absent at the verdict (train.py, samples.meta.json, an agentic spec) and appears "
      "later passes the gate"),
    M("gate-pass-half-disagree", "gate", "mcp_server/inspection/gate.py",
      "    if disagree and disagree >= agree:", "    if disagree and disagree > agree:",
      "a pass that disagrees with half the scores is accepted as a pass"),
    M("gate-base-success-zero", "gate", "mcp_server/inspection/gate.py",
      "if verdict.route == \"sft_first\" or not verdict.base_success_rate:", "if verdict.route == \"sft_first\":",
      "a verdict on samples that never succeeded (base success 0) opens the gate: GRPO trains on no signal"),
    M("gate-pass-subset", "gate", "mcp_server/inspection/gate.py",
      "if self.verdict == \"pass\" and set(ids) != set(self.reviewed_ids):",
      "if self.verdict == \"pass\" and not set(ids) <= set(self.reviewed_ids):",
      "a hand-written pass that judges only some reviewed samples opens the gate"),
    # (the switch is in-process since the fifth round: the bug is reading it from the environment again)
    M("gate-sampling-switch-inherited", "gate", "mcp_server/inspection/trained.py",
      "def sampling_now() -> bool:\n    return _SAMPLING[0]\n",
      "def sampling_now() -> bool:\n    return _SAMPLING[0] or os.environ.get(\"LLM_FINETUNING_SAMPLING\") == \"1\"\n",
      "LLM_FINETUNING_SAMPLING=1 in the launching shell turns off the trainer's point-of-use checks"),
    # ------------------------------------------------------------------ sandbox and harness
    M("sandbox-flood-passes", "sandbox", "mcp_server/rewards/sandbox.py",
      "passed = not (timed_out or flooded or over) and proc.returncode == 0",
      "passed = not (timed_out or over) and proc.returncode == 0",
      "a solution that floods the output past its cap can still pass"),
    M("sandbox-output-per-chunk", "sandbox", "mcp_server/rewards/sandbox.py",
      "            size += len(chunk)\n", "            size = len(chunk)\n",
      "output is counted per 64 KiB read, not in total: a flood in small writes is never stopped"),
    M("sandbox-no-cpu-budget", "sandbox", "mcp_server/rewards/sandbox.py",
      "\"cpu_s\": min(limits.cpu_s, limits.timeout_s) if limits.cpu_s else 0,", "\"cpu_s\": 0,",
      "a busy loop holds a core until the wall-clock timeout instead of its CPU budget"),
    M("harness-xpass", "sandbox", "mcp_server/rewards/harness_tests.py",
      "        if result.unexpectedSuccesses:\n            raise", "        if False:\n            raise",
      "an expectedFailure test that passes (unexpected success) scores as a pass"),
    M("harness-skips-count", "sandbox", "mcp_server/rewards/harness.py",
      "            if call_one(stage, test) is not SKIPPED:\n                count += 1",
      "            call_one(stage, test)\n            count += 1",
      "tests that all skip count as run: a solution tested by nothing passes"),
    M("harness-swallowed-failure", "sandbox", "mcp_server/rewards/harness.py",
      "    if channel.broken:  # a test swallowed the failure; the run still fails\n        return False, "
      "channel.broken, count\n", "",
      "a test that catches the solution's crash (except BaseException) passes the run"),
    M("harness-async-generator", "sandbox", "mcp_server/rewards/harness_tests.py",
      "NEVER_RAN = (types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)",
      "NEVER_RAN = (types.CoroutineType, types.GeneratorType)",
      "an `async def` test with a `yield` (its body never runs) scores as a pass"),
    # ------------------------------------------------------------------ m3: a second blind audit (issue 48)
    # Written from the product code alone by someone who wrote neither the tests nor the mutations above.
    # gate
    M("m3-gate-jsonl-sheet-unchecked", "gate", "mcp_server/inspection/gate.py",
      'for path, key in ((run.review_md, "review_md_sha256"), (run.review_jsonl, "review_jsonl_sha256")):',
      'for path, key in ((run.review_md, "review_md_sha256"),):',
      "inspection/review.jsonl edited by hand after inspect_rewards (the per-sample sheet a reviewer reads) still "
      "backs a verdict, and the gate stays open"),
    M("m3-gate-weights-any-order", "gate", "mcp_server/inspection/gate.py",
      "isinstance(configured, list) and [float(w) if isinstance(w, (int, float)) else w\n"
      "                                                                 for w in configured] == reviewed):",
      "isinstance(configured, list) and sorted([float(w) if isinstance(w, (int, float)) else w\n"
      "                                                                 for w in configured]) == sorted(reviewed)):",
      "train/config.yaml's reward_weights [2.0, 1.0] against rewards.json's [1.0, 2.0] (the weights swapped between "
      "the rewards) read as the same: TRL trains with weights the review never scored and the gate opens"),
    M("m3-gate-hub-revision-unpinned", "gate", "mcp_server/inspection/pins.py",
      'pin = {"model": ref, "revision": revision or "main", "commit": snapshot.name if snapshot else None}',
      'pin = {"model": ref, "commit": snapshot.name if snapshot else None}',
      "model_revision changed in train/config.yaml after the verdict (a hub model not in the local cache) keeps "
      "the gate open: training loads another revision than the one reviewed"),
    M("m3-gate-data-dir-top-level", "gate", "mcp_server/inspection/pins.py",
      '        files = sorted(p for p in path.rglob("*") if p.is_file())',
      '        files = sorted(p for p in path.glob("*") if p.is_file())',
      "a file in a subfolder of a local data directory (data/train/part-0.jsonl) edited after the verdict keeps the "
      "gate open: training reads data nobody reviewed"),
    M("m3-gate-script-sha-warns", "gate", "mcp_server/training/trainer/verified_script.py",
      "        _refuse(f\"{argv[0]} is not the train/train.py the inspection verdict reviewed (changed after \"\n",
      "        print(f\"{argv[0]} is not the train/train.py the inspection verdict reviewed (changed after \"\n",
      "a train/train.py swapped between the gate and the interpreter's start prints the refusal but runs anyway: "
      "unreviewed code trains"),
    # sandbox
    M("m3-sandbox-network-shared", "sandbox", "mcp_server/rewards/sandbox_command.py",
      '        "--unshare-all",\n',
      '        "--unshare-pid",\n        "--unshare-ipc",\n        "--unshare-uts",\n',
      "model-written code keeps the host's network: it can open sockets, reach the host's services or fetch the "
      "expected answers"),
    M("m3-sandbox-proc-files-visible", "sandbox", "mcp_server/rewards/sandbox_command.py",
      "            found.append((path, True))\n        elif os.path.exists(path):\n"
      "            found.append((path, False))\n",
      "            found.append((path, True))\n",
      "/proc/meminfo, /proc/loadavg, /proc/stat and the other top-level /proc files show the host's state to "
      "model-written code (only /proc folders are masked)"),
    M("m3-sandbox-root-kept", "sandbox", "mcp_server/rewards/sandbox_command.py",
      'return {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}',
      'return {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() != 0 else {}',
      "a server running as root runs model-written code as root (RLIMIT_NPROC does not bind root: a fork bomb is "
      "unbounded); a non-root server cannot start a sandbox at all"),
    M("m3-harness-contains-truthy", "sandbox", "mcp_server/rewards/harness.py",
      'return self._ask("contains", value=_CHANNEL.data(item)) is True',
      'return bool(self._ask("contains", value=_CHANNEL.data(item)))',
      "a solution object whose __contains__ returns one of its own objects (always true in the tester) passes "
      "every `assert x in result` test"),
    M("m3-harness-gone-unchecked", "sandbox", "mcp_server/rewards/harness.py",
      "gone = channel.gone() if passed else None",
      "gone = None",
      "a solution whose process dies after its last answer (a thread that burns its CPU budget, an exit from a "
      "thread) still scores a pass"),
    # runs
    M("m3-runs-success-other-launch", "runs", "mcp_server/training/runrecord.py",
      'if s.get("final") and (wanted is None or\n'
      '                                                                         s.get("launch_id") == wanted)]',
      'if s.get("final")]',
      "a relaunch that never saved reads succeeded on an earlier launch's final save (a hand-written outcome.json "
      "is borne out by another launch's evidence)"),
    M("m3-runs-no-step-after-begin", "runs", "mcp_server/training/runrecord.py",
      "if logged is None or (isinstance(started, int) and logged <= started):",
      "if logged is None or (isinstance(started, int) and logged < started):",
      "a resumed launch whose last logged step is the step it began at (it trained no step) reads succeeded"),
    M("m3-runs-stop-wait-uncapped", "runs", "mcp_server/training/stopping.py",
      "return min(max(wait, STOP_WAIT_S[0]), STOP_WAIT_S[1]), step",
      "return max(wait, STOP_WAIT_S[0]), step",
      "stop_training on a run whose logs show hour-long steps (or a step_time of 1e9) waits that long instead of at "
      "most 900 s"),
    M("m3-runs-pid-zero", "runs", "mcp_server/training/runrecord.py",
      "pid: int | None = Field(default=None, gt=0, lt=2**31)",
      "pid: int | None = Field(default=None, ge=0, lt=2**31)",
      "a run.json with pid 0 is read as a launch record: a signal to pid 0 reaches the server's own process group"),
    M("m3-runs-dangling-run-json", "runs", "mcp_server/training/runrecord.py",
      "    if not path.exists() and not path.is_symlink():  # a link to nothing",
      "    if not path.exists():  # a link to nothing",
      "a run.json that is a link to nothing reads as no launch record (not launched) instead of an error naming "
      "the file"),
    # diagnosis
    M("m3-diagnosis-resume-not-dropped", "diagnosis", "mcp_server/diagnosis/metrics.py",
      'rows = rows_from_records(records, path, restarts=kind == "progress_jsonl")',
      'rows = rows_from_records(records, path, restarts=kind == "jsonl")',
      "a run resumed from its checkpoint after a NaN keeps the discarded attempt's NaN steps in its progress log's "
      "reading: diagnose_run reports nan_loss on a healthy resumed run"),
    M("m3-diagnosis-old-reward-names", "diagnosis", "mcp_server/diagnosis/metrics.py",
      'if name.startswith("rewards/") and name.count("/") == 1:',
      'if name.startswith("rewards/") and name.count("/") == 2:',
      "a log of TRL < 0.17 (rewards/<func> without /mean) reads no per-reward series: the per-reward findings (a "
      "reward stuck at one value, a reward that returns None) are missed"),
    M("m3-diagnosis-first-checkpoint", "diagnosis", "mcp_server/diagnosis/metrics.py",
      'return max(states, key=lambda p: int(p.parent.name.split("-")[-1])) if states else None',
      'return min(states, key=lambda p: int(p.parent.name.split("-")[-1])) if states else None',
      "diagnosing a TRL output_dir reads its first checkpoint's trainer_state.json: only the early steps, a later "
      "divergence is missed"),
    M("m3-diagnosis-log-tail-dropped", "diagnosis", "mcp_server/diagnosis/metrics.py",
      'data = head + b"\\n[... log cut ...]\\n" + handle.read()',
      'data = head + b"\\n[... log cut ...]\\n"',
      "a stdout log over 8 MiB is read by its first MiB alone: a CUDA OOM or traceback at its end is not found"),
    M("m3-diagnosis-progress-no-run", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "home = next((run for run in map(Run, path.parents) if run.config.is_file()), None)",
      "home = next((run for run in map(Run, [path.parent]) if run.config.is_file()), None)",
      "diagnose_run given a run's train/logs/progress.jsonl reads it without the run's config, request and log: "
      "the config rules and the log's environment findings are missing"),
    # ------------------------------------------------------------------ m4: a third blind audit (issue 48)
    # Written from the product code alone (gate and pins, the trainer's point-of-use checks, the sandbox and
    # harness, the run states, diagnosis's inputs) by someone who wrote neither the tests nor the mutations above.
    # gate
    M("m4-gate-reviewed-ids-unmatched", "gate", "mcp_server/inspection/gate.py",
      '        "reviewed_ids": review.get("reviewed_ids"),\n', "",
      "a verdict.json edited to list only the samples it judged (reviewed_ids [0, 1] of a 20-sample review, both "
      "agreed) is taken as a verdict on the review: the gate opens on a pass that read 2 of 20 samples"),
    M("m4-gate-note-four-words", "gate", "mcp_server/inspection/gate.py",
      "    if disagree and len(note.split()) < MIN_PASS_NOTE_WORDS:",
      "    if disagree and len(note.split()) <= MIN_PASS_NOTE_WORDS:",
      "a pass with a disagreement and a four-word note ('the format is fine') is refused as having no note; "
      "a verdict recorded that way before reads as not a verdict and the gate closes"),
    M("m4-gate-hub-files-unpinned", "gate", "mcp_server/inspection/pins.py",
      '    pin["files_sha256"] = files_digest(snapshot, _tree(snapshot)) if snapshot else None\n',
      '    pin["files_sha256"] = None\n',
      "a hub model's cached snapshot whose weights are overwritten in place after the verdict (same commit folder) "
      "keeps launch_training's gate open: the reviewed model is pinned by name and commit only"),
    M("m4-trainer-samples-not-rows", "gate", "mcp_server/inspection/trained.py",
      "        differs += _samples_not_in(dataset, verdict, spec.agentic is not None, samples)\n", "",
      "a verdict on samples that are not rows of the data that trains (hand-written samples.jsonl whose prompts "
      "or columns the data does not hold, hashed into a verdict) passes the trainer's point-of-use check"),
    M("m4-trainer-verdict-removed-trains", "gate", "mcp_server/inspection/trained.py",
      "    if passed and (data is None or hashlib.sha256(data).hexdigest() != passed):",
      "    if passed and data is not None and hashlib.sha256(data).hexdigest() != passed:",
      "inspection/verdict.json deleted between launch_training's gate and the trainer's start: the trainer says "
      "'no inspection verdict pins what this run trains on' and trains on unchecked data instead of refusing"),
    # sandbox
    M("m4-sandbox-flood-at-cap", "sandbox", "mcp_server/rewards/sandbox.py",
      "            if size > max_output_bytes:\n", "            if size >= max_output_bytes:\n",
      "a solution whose output is exactly max_output_bytes (64 KiB, within the cap) is killed as a flood and scores "
      "0"),
    M("m4-sandbox-flood-left-running", "sandbox", "mcp_server/rewards/sandbox.py",
      "    killing = box.timed_out or box.flooded or box.over_cpu is not None\n",
      "    killing = box.timed_out or box.over_cpu is not None\n",
      "a solution that floods its output is not killed at the cap: it blocks on the full pipe until the wall-clock "
      "timeout (10 s of a sandbox slot per flood) and its error says 'timed out' instead of 'output over'"),
    M("m4-harness-stopiteration-passes", "sandbox", "mcp_server/rewards/harness.py",
      '    if names and names[0] in ("StopIteration", "StopAsyncIteration"):\n',
      '    if False:\n',
      "a solution that raises StopIteration ends the iteration of the test that calls it (`assert all(map(f, "
      "cases))` stops at the first case and passes): a wrong solution scores a pass"),
    M("m4-harness-builtin-shadowed", "sandbox", "mcp_server/rewards/harness_tests.py",
      "        if hasattr(builtins, name):\n            continue\n", "",
      "a solution that defines its own `len`, `sorted` or `isinstance` replaces the tests' builtin: `assert "
      "len(result) == 3` calls the solution's len, and a wrong solution passes"),
    M("m4-sandbox-root-writable", "sandbox", "mcp_server/rewards/sandbox_command.py",
      '        "--remount-ro", "/",\n', "",
      "the sandbox's root (a tmpfs with no size cap) stays writable: model-written code writes files at /, outside "
      "/tmp's cap, and fills host memory 16 MB a file"),
    # x5 (issue 48, killm4a): edges of the gate and the sandbox, each killed by a contract-table row
    M("x5-trainer-sample-index-negative", "gate", "mcp_server/inspection/trained.py",
      "0 <= index < len(dataset)", "index < len(dataset)",
      "a reviewed sample with row_index -1 is checked against the data's last row: a sample whose index is no row "
      "passes the trainer's check"),
    M("x5-trainer-pin-keys-expected-only", "gate", "mcp_server/inspection/trained.py",
      "for key in dict.fromkeys([*expected, *now])", "for key in expected",
      "a part of what trains that the verdict's 'trained' pin lacks (a verdict that pins less) is never compared"),
    M("x5-trainer-patch-first-wins", "gate", "mcp_server/inspection/trained.py",
      "    for update in verdict.get(\"pin_updates\") or []:",
      "    for update in (verdict.get(\"pin_updates\") or [])[::-1]:",
      "after two resumes that patched one setting, the trainer compares with the first patch, not the last: the "
      "resumed run is refused (or an older setting trains)"),
    M("x5-trainer-resume-output-itself", "gate", "mcp_server/inspection/trained.py",
      "(where == output or not where.is_relative_to(output))", "(not where.is_relative_to(output))",
      "resume_from_checkpoint set to output_dir itself (no checkpoint of this run) passes the trainer's check"),
    M("x5-gate-differs-route", "gate", "mcp_server/inspection/gate.py",
      '"route": result.get("route"), "base_success_rate"', '"base_success_rate"',
      "a hand-written verdict whose route is not the review's (review_again over sft_first) opens the gate"),
    M("x5-gate-counts-disagree-unchecked", "gate", "mcp_server/inspection/gate.py",
      "        if (agree, len(ids) - agree) != (self.agree, self.disagree):", "        if agree != self.agree:",
      "a verdict record whose disagree count is not its per-sample verdicts reads as a verdict"),
    M("x5-pins-changes-old-keys-only", "gate", "mcp_server/inspection/pins.py",
      "    for key in dict.fromkeys([*old, *new]):\n        before, after = old.get(key), new.get(key)",
      "    for key in old:\n        before, after = old.get(key), new.get(key)",
      "a pinned part that appeared after the verdict (an agentic environment, a prompt column) is not named as "
      "changed"),
    M("x5-pins-train-files-sidecar-anywhere", "gate", "mcp_server/inspection/pins.py",
      "        if len(parts) == 1 and parts[0] in TRAIN_FILES_UNPINNED:",
      "        if parts[-1] in TRAIN_FILES_UNPINNED:",
      "train/sub/config.yaml (importable by train.py, pinned by no other pin) is left out of the pins: edited after "
      "the verdict, the gate stays open"),
    M("x5-sandbox-stderr-not-counted", "sandbox", "mcp_server/rewards/sandbox.py",
      "stdout=subprocess.PIPE, stderr=subprocess.STDOUT,", "stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,",
      "a solution that floods stderr is never stopped by the output cap, and its traceback is not in the output"),
    M("x5-sandbox-output-head", "sandbox", "mcp_server/rewards/sandbox.py",
      "output=output[-4000:]", "output=output[:4000]",
      "a run's kept output is its first 4000 characters: the failing test's traceback is cut off"),
    M("x5-harness-init-class-collected", "sandbox", "mcp_server/rewards/harness.py",
      'isinstance(obj, type) and "__init__" not in obj.__dict__:', 'isinstance(obj, type):',
      "a Test class with __init__ (pytest skips it) is instantiated: a right solution fails on the tests' helper "
      "class"),
    M("x5-harness-where-first-frame", "sandbox", "mcp_server/rewards/harness.py",
      'at = f" (test line {lines[-1]})" if lines else ""', 'at = f" (test line {lines[0]})" if lines else ""',
      "a failure in a helper the test calls is reported at the test's call, not at the assert that failed"),
    # runs
    M("m4-runs-log-tail-zero-lines", "runs", "mcp_server/training/runstate.py",
      "    if lines <= 0 or not (path.exists() or path.is_symlink()):",
      "    if lines < 0 or not (path.exists() or path.is_symlink()):",
      "training_status with log_lines 0 (no log wanted) returns every line of the log's last 256 KiB"),
    M("m4-runs-damaged-run-json-silent", "runs", "mcp_server/training/runrecord.py",
      "    if damaged is not None and derived.record is None:\n        raise damaged\n", "",
      "a run.json damaged by hand (not JSON, a pid of -5) with no live process is read as no launch record: "
      "training_status and list_runs name no damaged file and derive a state from the other files alone"),
    M("m4-runs-elapsed-ended-grows", "runs", "mcp_server/training/status.py",
      "    elif derived.alive:\n        elapsed = time.time() - started\n    else:\n"
      "        end = _seconds((derived.outcome or {}).get(\"time\")) or _seconds(latest.get(\"time\")) or started\n"
      "        elapsed = max(end - started, 0.0)\n",
      "    else:\n        elapsed = time.time() - started\n",
      "training_status of a run that ended yesterday after 20 minutes says elapsed_s of a day and more, growing on "
      "every call"),
    M("m4-runs-stop-wait-window-start", "runs", "mcp_server/training/stopping.py",
      '    last = _positive(lines[-1].get("time")) if lines else None\n',
      '    last = _positive(lines[0].get("time")) if lines else None\n',
      "stop_training's default wait counts from the oldest of the last 20 logged steps: on a run whose steps take "
      "5 minutes it waits 2-4 minutes, not until the current step ends, and says the run is still stopping"),
    M("m4-runs-last-progress-first-line", "runs", "mcp_server/training/runrecord.py",
      "    return highest_step(kept)\n", "    return kept[0] if kept else None\n",
      "the 'last' progress line is the first one in the log's last 64 KiB: list_runs shows an old step, the "
      "success check reads an old last-logged step, stop_training names the wrong step it waits for"),
    # diagnosis
    M("m4-diagnosis-infinity-not-sampled", "diagnosis", "mcp_server/diagnosis/progress_log.py",
      '        for marker in (b"NaN", b"Infinity"):\n', '        for marker in (b"NaN",):\n',
      "a progress log over 8 MiB (hours of steps) with an Infinity loss or grad_norm between the sampled lines "
      "is diagnosed without it: the divergence is missed"),
    M("m4-diagnosis-stepless-from-zero", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "math.isfinite(step) else index + 1\n", "math.isfinite(step) else index\n",
      "an export with no step column (or a stdout log's printed dicts) reads its first row as step 0: every "
      "finding's evidence names a step one lower than the row it counts"),
    M("m4-diagnosis-given-config-overridden", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    if config is None and home is not None and home.config.is_file():\n",
      "    if home is not None and home.config.is_file():\n",
      "diagnose_run on a run directory with config=<another config> (the one meant to be judged) silently judges "
      "the run's own train/config.yaml instead"),
    M("m4-diagnosis-checkpoints-unsearched", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    for base in (run.dir, run.checkpoints):\n", "    for base in (run.dir,):\n",
      "diagnose_run on a run directory whose only metrics are its checkpoints' trainer_state.json under "
      "checkpoints/ (the progress log lost) says it holds no metrics"),
    M("m4-diagnosis-run-name-unresolved", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    for candidate in (raw, workspace_root() / raw, runs_root() / raw):\n",
      "    for candidate in (raw, workspace_root() / raw):\n",
      "diagnose_run given a run by its name (2026-01-02-my-run, as list_runs prints it) says no such file or "
      "directory"),
    # x5: the m4 audit's rows in the run states and diagnosis's inputs (killm4b)
    M('x5-runs-log-tail-first-lines', 'runs', 'mcp_server/training/runstate.py',
      '    return [line for line in out if line.strip()][-lines:]',
      '    return [line for line in out if line.strip()][:lines]',
      "training_status's log_tail shows the log's first lines (the launch line), not its last: a crash at the end "
      "is not shown"),
    M('x5-runs-log-tail-blank-lines-kept', 'runs', 'mcp_server/training/runstate.py',
      '    return [line for line in out if line.strip()][-lines:]',
      '    return out[-lines:]',
      "training_status's log_tail fills with blank lines: a log ending in blank lines shows nothing"),
    M('x5-runs-failed-tail-not-widened', 'runs', 'mcp_server/training/status.py',
      'request.log_lines if state not in ("failed",) else max(request.log_lines, 20)',
      'request.log_lines',
      "a failed run's status shows only the log_lines asked (1): the traceback that explains the failure is cut"),
    M('x5-runs-elapsed-outcome-ignored', 'runs', 'mcp_server/training/status.py',
      '        end = _seconds((derived.outcome or {}).get("time")) or _seconds(latest.get("time")) or started\n',
      '        end = _seconds(latest.get("time")) or started\n',
      "an ended run's elapsed_s stops at its last logged step, not at its outcome (the final save's minutes are lost)"),
    M('x5-runs-elapsed-no-end-none', 'runs', 'mcp_server/training/status.py',
      '_seconds(latest.get("time")) or started\n',
      '_seconds(latest.get("time")) or time.time()\n',
      'an ended run that logged no step and no outcome time reads elapsed_s growing from its start on every call'),
    M('x5-runs-last-step-keep-ignored', 'runs', 'mcp_server/training/runrecord.py',
      '        if isinstance(line, dict) and keep(line):',
      '        if isinstance(line, dict):',
      "a succeeded run whose progress log ends with a line holding no step crashes training_status (KeyError 'step')"),
    M('x5-runs-max-steps-config-first', 'runs', 'mcp_server/training/status.py',
      '    if _count(begin.get("max_steps")):\n        return begin["max_steps"]\n',
      '',
      "a run that began with max_steps 6 (train-begin.json) shows the config's 4: step 5/4, a wrong ETA"),
    M('x5-runs-max-steps-zero-kept', 'runs', 'mcp_server/training/status.py',
      '    if _count(begin.get("max_steps")):\n',
      '    if _count(begin.get("max_steps")) is not None:\n',
      "train-begin.json's max_steps 0 is shown as max_steps 0 instead of the config's"),
    M('x5-runs-speed-window-ten', 'runs', 'mcp_server/training/status.py',
      'for l in lines[-STEP_TIMES:]',
      'for l in lines[-STEP_TIMES - 1:]',
      'steps_per_s reads 10 step times, not 9: an old slow step (a save, a resume) still sets the rate'),
    M('x5-runs-speed-mean', 'runs', 'mcp_server/training/status.py',
      '        middle = len(times) // 2\n        return 1.0 / (times[middle] if len(times) % 2 else '
      '(times[middle - 1] + times[middle]) / 2)',
      '        return len(times) / sum(times)',
      'steps_per_s is the mean step time: one slow step (a save) skews the rate and the ETA'),
    M('x5-runs-speed-even-upper', 'runs', 'mcp_server/training/status.py',
      '(times[middle - 1] + times[middle]) / 2)',
      'times[middle])',
      "steps_per_s of an even count of step times is the upper middle, not the middle two's mean"),
    M('x5-runs-speed-zero-times', 'runs', 'mcp_server/training/status.py',
      'if t and t > 0)',
      'if t is not None)',
      'a logged step_time of 0 is read as a step time: steps_per_s divides by zero or reads a rate of infinity'),
    M('x5-runs-speed-since-ignored', 'runs', 'mcp_server/training/status.py',
      '              and (since is None or l["time"] >= since)]',
      '              ]',
      'without step times, steps_per_s counts the pause before a resume as training time'),
    M('x5-runs-stop-wait-no-begin', 'runs', 'mcp_server/training/stopping.py',
      '    if last is None:\n        last = _positive((read_json_if_present(run.train_begin) or {}).get("time"))\n',
      '',
      "stop_training before a step logs a time waits the least 120 s even when training's start says the step takes "
      "5 minutes"),
    M('x5-runs-stop-wait-half-step', 'runs', 'mcp_server/training/stopping.py',
      '+ 0.5 * expected + SAVE_MARGIN_S',
      '+ SAVE_MARGIN_S',
      "stop_training's default wait has no room for a slower step: a step slower than the longest logged one is left "
      "stopping"),
    M('x5-runs-state-not-written-back', 'runs', 'mcp_server/training/runrecord.py',
      '        try:\n            write_run_json(run, record)\n',
      '        try:\n            pass\n',
      "run.json keeps 'starting' after the run failed: a plain reader of run.json never sees the end"),
    M('x5-runs-exit-code-not-recorded', 'runs', 'mcp_server/training/runrecord.py',
      '        if derived.exit_code is not None:\n            record["exit_code"] = derived.exit_code\n',
      '',
      "run.json never records an ended launch's exit code"),
    M('x5-runs-final-save-short-passes', 'runs', 'mcp_server/training/runrecord.py',
      '    if isinstance(planned, int) and (not isinstance(step, int) or step < planned):',
      '    if isinstance(planned, int) and not isinstance(step, int):',
      'a run whose final save is at step 3 of the 4 it began with reads succeeded'),
    M('x5-runs-checkpoint-name-not-a-step', 'runs', 'mcp_server/training/runrecord.py',
      '        if suffix.isdigit() and complete_checkpoint(run, path):',
      '        if complete_checkpoint(run, path):',
      "a recorded checkpoint-best folder crashes training_status and stop_training (int('best'))"),
    M('x5-runs-deepspeed-not-complete', 'runs', 'mcp_server/training/runrecord.py',
      '    if any(p.name.startswith("global_step") or "pytorch_model_fsdp" in p.name\n',
      '    if any("pytorch_model_fsdp" in p.name\n',
      'a DeepSpeed checkpoint (weights in global_step*/) is never complete: resume refuses it'),
    M('x5-runs-failed-message-no-exit', 'runs', 'mcp_server/training/status.py',
      '        code = f"exit code {derived.exit_code}" if derived.exit_code is not None else',
      '        code = "exit code ?" if derived.exit_code is not None else',
      "a failed run's message never names its exit code"),
    M('x5-runs-lost-record-stopped-marker', 'runs', 'mcp_server/training/launchers/local/process_state.py',
      '    elif _marker(run, run.stopped) is not None:\n        state = "stopped"\n',
      '',
      'a stopped run whose run.json was removed (no outcome yet) reads failed or unknown, not stopped'),
    M('x5-runs-lost-record-exit-ignored', 'runs', 'mcp_server/training/launchers/local/process_state.py',
      '    elif exit_code not in (None, 0):\n        state = "failed"\n',
      '',
      'a run that exited 1 and whose run.json was removed reads unknown, not failed'),
    M('x5-runs-lost-record-success-unchecked', 'runs', 'mcp_server/training/launchers/local/process_state.py',
      '        state, note = _borne_out(run, None, state, exit_code, note)\n',
      '',
      "a hand-written outcome.json 'succeeded' on a run whose run.json was removed reads succeeded though it never "
      "trained"),
    M('x5-diagnosis-nan-not-sampled', 'diagnosis', 'mcp_server/diagnosis/progress_log.py',
      '        for marker in (b"NaN", b"Infinity"):\n',
      '        for marker in (b"Infinity",):\n',
      'a NaN loss between the sampled lines of a progress log over 8 MiB is missed'),
    M('x5-diagnosis-sampled-lines-uncounted', 'diagnosis', 'mcp_server/diagnosis/metrics.py',
      '    return read.records, read.lines - read.unsigned if read.sampled else None, unsigned_note(read)',
      '    return read.records, None, unsigned_note(read)',
      "a long progress log's steps_logged is the sample's size, not its lines"),
    M('x5-diagnosis-sample-tail-dropped', 'diagnosis', 'mcp_server/diagnosis/progress_log.py',
      '    for offset, raw in found[-tail:]:\n',
      '    for offset, raw in found[:tail]:\n',
      "a long progress log's latest lines are not all read: last_step is older than the run's"),
    M('x5-diagnosis-log-given-overridden', 'diagnosis', 'mcp_server/diagnosis/metrics.py',
      '    if log_path is None and home is not None and home.stdout.is_file():',
      '    if home is not None and home.stdout.is_file():',
      "diagnose_run(run_dir, log_path=other) reads the run's own stdout.log, not the log given"),
    M('x5-diagnosis-checkpoint-by-name', 'diagnosis', 'mcp_server/diagnosis/metrics.py',
      '    return max(states, key=lambda p: int(p.parent.name.split("-")[-1])) if states else None',
      '    return max(states, key=lambda p: p.parent.name) if states else None',
      'a TRL output_dir with checkpoint-9 and checkpoint-10 is read from checkpoint-9 (text order)'),
    M('x5-diagnosis-state-before-progress', 'diagnosis', 'mcp_server/diagnosis/metrics.py',
      '    candidates = [run.progress, run.dir / "progress.jsonl", run.dir / "trainer_state.json"]',
      '    candidates = [run.dir / "trainer_state.json", run.progress, run.dir / "progress.jsonl"]',
      "a run directory with a trainer_state.json beside its progress log is read from the state file (one save's "
      "steps)"),
    M('x5-diagnosis-summary-rows-kept', 'diagnosis', 'mcp_server/diagnosis/metrics.py',
      '    if any(k in raw for k in SUMMARY_KEYS):\n        return None\n',
      '',
      "the train summary row (train_runtime) counts as a logged step: last_step past the run's"),
    M('x5-diagnosis-eval-rows-kept', 'diagnosis', 'mcp_server/diagnosis/metrics.py',
      '        if name.startswith(("eval_", "eval/", "test/")):\n            continue\n',
      '',
      'evaluation rows count as logged training steps'),
    M('x5-diagnosis-restarts-everywhere', 'diagnosis', 'mcp_server/diagnosis/metrics.py',
      'restarts=kind == "progress_jsonl")',
      'restarts=True)',
      'an export with steps out of order loses its later steps, as if each lower step were a resume'),
    M('x5-diagnosis-restarts-nowhere', 'diagnosis', 'mcp_server/diagnosis/metrics.py',
      'restarts=kind == "progress_jsonl")',
      'restarts=False)',
      "a resumed run's progress log keeps the earlier attempt's discarded steps (its NaNs are findings)"),
    M('x5-diagnosis-restart-keeps-step', 'diagnosis', 'mcp_server/diagnosis/metrics.py',
      'rows = {s: r for s, r in rows.items() if s < row["step"]}',
      'rows = {s: r for s, r in rows.items() if s <= row["step"]}',
      "a resume keeps the earlier attempt's values at the step it resumed from"),
    M('x5-diagnosis-duplicate-first-wins', 'diagnosis', 'mcp_server/diagnosis/metrics.py',
      '{**row, **earlier, **{k: v for k, v in row.items() if v is not None}}',  # re-anchored (kill11b)
      '{**row, **{k: v for k, v in row.items() if v is not None}, **earlier}',
      'a step logged twice keeps its first values: a NaN re-logged finite is still a finding'),
    M('x5-diagnosis-empty-run-healthy', 'diagnosis', 'mcp_server/diagnosis/metrics.py',
      'load_metrics(metrics_path, allow_empty=(path.is_dir() or home is not None) and has_log)',
      'load_metrics(metrics_path, allow_empty=True)',
      'a run with an empty progress log and no stdout reads as healthy (no metrics)'),
    M('x5-diagnosis-last-step-first-row', 'diagnosis', 'mcp_server/diagnosis/diagnose.py',
      '    last_step = run.rows[-1]["step"] if run.rows else None',
      '    last_step = run.rows[0]["step"] if run.rows else None',
      "diagnose_run's last_step is the first logged step"),
    M('x5-diagnosis-steps-logged-sample', 'diagnosis', 'mcp_server/diagnosis/diagnose.py',
      '    logged = run.lines_logged or len(run.rows)',
      '    logged = len(run.rows)',
      "a long progress log's steps_logged is the sample's row count"),
    # ------------------------------------------------------------------ m5: a fourth blind audit (issue 48)
    # Written from the product code alone (gate and pins, the trainer's point-of-use checks, the sandbox and
    # harness, the run states, diagnosis's inputs) by someone who wrote neither the tests nor the mutations above.
    # gate
    M("m5-gate-verdict-counts-unchecked", "gate", "mcp_server/inspection/gate.py",
      "        if (agree, len(ids) - agree) != (self.agree, self.disagree):\n"
      "            return \"its agree/disagree counts do not match its per-sample verdicts\"\n", "",
      "a verdict.json edited to say agree 20, disagree 0 while its per-sample verdicts disagree with 15 samples is "
      "judged by the edited counts: the gate opens on a pass the reviewer's own verdicts refute"),
    M("m5-gate-data-dir-ignored", "gate", "mcp_server/inspection/pins.py",
      "    return folder / data_dir if data_dir else folder\n", "    return folder\n",
      "a `datasets` entry {path: json, data_dir: data, data_files: train.jsonl} is pinned as the name train.jsonl "
      "(run/train.jsonl does not exist), not by data/train.jsonl's content: the data edited after the verdict keeps "
      "the gate open"),
    M("m5-gate-python-hash-by-inode", "gate", "mcp_server/inspection/pins.py",
      "digest = _file_sha256(real, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)",
      "digest = _file_sha256(real, stat.st_ino)",
      "a training interpreter wrapper (LLM_FINETUNING_PYTHON) edited in place after the verdict (same inode) "
      "keeps its cached sha256 in the server's process: the gate stays open and launch.sh runs the edited wrapper"),
    M("m5-trainer-resume-anywhere-in-run", "gate", "mcp_server/inspection/trained.py",
      "(where == output or not where.is_relative_to(output)):",
      "(where == output or not where.is_relative_to(run.dir.resolve())):",
      "resume_from_checkpoint pointing at a checkpoint copied anywhere inside the run directory but outside its "
      "output_dir (inspection/checkpoint-5, data/checkpoint-3) passes the trainer's check: weights nobody "
      "reviewed train"),
    M("m5-trainer-refilter-index-unmapped", "gate", "mcp_server/inspection/row_probes.py",
      "        index = kept.index(index)\n", "",
      "after resume_training's re-filter (the verdict's data_updates keep some rows), each reviewed sample is "
      "compared with the row at its old index in the filtered data: the trainer refuses a re-filtered run as "
      "'samples ... are not rows of the data that trains'"),
    # sandbox
    M("m5-harness-solution-tests-collected", "sandbox", "mcp_server/rewards/harness.py",
      "        if type(obj) is Remote:\n            continue\n", "",
      "a solution that defines a function named test_* has it collected and run as a test: with HumanEval-style "
      "tests (def check(candidate), an entry point) that count skips check(candidate), and a wrong solution passes "
      "untested"),
    M("m5-harness-stop-reply-to-call", "sandbox", "mcp_server/rewards/harness.py",
      "            if message.get(\"op\") != \"next\":  # only the end of an iteration the tests asked for\n"
      "                self.broken = \"the solution process sent an answer that is not a reply\"\n"
      "                raise SolutionGone(self.broken)\n", "",
      "a solution that writes its own {\"stop\": true} reply to a call on its reply pipe raises StopIteration in "
      "the test: `assert all(map(f, cases))` ends at the first case and a wrong solution passes"),
    M("m5-harness-exception-first-name-only", "sandbox", "mcp_server/rewards/harness.py",
      "    for name in names:\n        cls = getattr(builtins, name, None)\n",
      "    for name in names[:1]:\n        cls = getattr(builtins, name, None)\n",
      "a correct solution that raises its own subclass of ValueError (class BadInput(ValueError)) reaches the tests "
      "as SolutionError: `pytest.raises(ValueError)` / `except ValueError` tests fail and the solution scores 0"),
    M("m5-sandbox-shm-uncapped", "sandbox", "mcp_server/rewards/sandbox_command.py",
      "\"--dev\", \"/dev\", \"--size\", str(shm_bytes), \"--tmpfs\", \"/dev/shm\",",
      "\"--dev\", \"/dev\", \"--tmpfs\", \"/dev/shm\",",
      "the sandbox's /dev/shm is a tmpfs of the default size (half the host's memory), not max_file_mb: "
      "model-written code fills host memory with shared-memory files the resident-memory watch does not count"),
    M("m5-harness-watch-reaped-children-free", "sandbox", "mcp_server/rewards/harness_watch.py",
      "cpu += sum(int(f) for f in fields[11:15]) / self.tick  # utime, stime, cutime, cstime",
      "cpu += sum(int(f) for f in fields[11:13]) / self.tick  # utime, stime",
      "a solution that burns CPU in forked children and waits for each (their time moves to its cutime) is not "
      "counted against its CPU budget by the harness: where the sandbox has no cgroup, eight 0.3 s children pass "
      "on a 0.5 s budget; with one, only the host's slower cgroup check stops it (later, 'as the kernel counts "
      "them')"),
    # runs
    M("m5-runs-exit-code-other-launch", "runs", "mcp_server/training/runrecord.py",
      "    return None if wanted is not None and value.get(\"launch_id\") != wanted else value\n",
      "    return value\n",
      "a relaunched run reads the earlier launch's signed exit.json and train-begin.json as its own: a relaunch "
      "killed before launch.sh wrote its exit code reads with the old launch's exit code (failed or succeeded)"),
    M("m5-runs-final-save-at-max-steps-short", "runs", "mcp_server/training/runrecord.py",
      "(not isinstance(step, int) or step < planned):", "(not isinstance(step, int) or step <= planned):",
      "a run whose final save is at exactly the max_steps it began with is said to be short of them: every run "
      "that trained to its end reads failed, not succeeded"),
    M("m5-runs-speed-first-steps", "runs", "mcp_server/training/status.py",
      "for l in lines[-STEP_TIMES:]) if t and t > 0)", "for l in lines[:STEP_TIMES]) if t and t > 0)",
      "training_status's steps/s and ETA come from the run's first 9 step times (warm-up, short early "
      "completions), not its latest: a run whose steps slowed from 20 s to 300 s shows an ETA 15x too short"),
    # (replaces m5-runs-max-steps-config-only, which x5-runs-max-steps-config-first, merged from main meanwhile,
    # duplicates exactly)
    M("m5-runs-run-json-lax-types", "runs", "mcp_server/training/runrecord.py",
      "        checked = RunRecord.model_validate(data, strict=True)\n",
      "        checked = RunRecord.model_validate(data)\n",
      "a run.json edited by hand to {\"pid\": true} or {\"pid\": \"1234\"} is read as a launch record (pid 1, pid 1234)"
      " "
      "instead of a damaged file named in the error: the pid a stop or a state reading acts on is whatever the "
      "coercion made of it"),
    M("m5-runs-restored-record-unwritten", "runs", "mcp_server/training/runrecord.py",
      "if record is not None and (record.get(\"state\") != derived.state or record.get(\"reconstructed\")):",
      "if record is not None and record.get(\"state\") != derived.state:",
      "a run.json lost while its run is live is read from the process on every call but never written back: the "
      "file stays missing, restored_from_process is never recorded"),
    # diagnosis
    M("m5-diagnosis-progress-length-unaliased", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    \"completion_mean_length\": \"completions/mean_length\",\n", "",
      "a progress.jsonl's completion_mean_length is not read as TRL's completions/mean_length: diagnose_run on our "
      "own runs misses every completion-length finding (lengths collapsing or running to the cap)"),
    M("m5-diagnosis-trackio-step-unread", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "STEP_KEYS = (\"step\", \"global_step\", \"train/global_step\", \"Step\", \"_step\", \"trainer/global_step\")",
      "STEP_KEYS = (\"step\", \"global_step\", \"Step\", \"_step\", \"trainer/global_step\")",
      "a Trackio export (steps in train/global_step, logged every 10 steps) reads its rows as steps 1, 2, 3...: "
      "every finding names a step ten times too low, and train/global_step is read as a metric"),
    M("m5-diagnosis-sampled-partial-lines", "diagnosis", "mcp_server/diagnosis/progress_log.py",
      "        if i and not handle.readline(PROGRESS_SAMPLE_READ).endswith(b\"\\n\"):\n"
      "            continue  # no line end near: a NUL run or an overlong line, read no further\n", "",
      "a progress log over 8 MiB is sampled from the middle of its lines: each cut line is not JSON, and "
      "diagnose_run refuses the log ('the line at byte N is not a JSON object')"),
    M("m5-diagnosis-progress-cache-stale", "diagnosis", "mcp_server/diagnosis/progress_log.py",
      "key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, exact, sample, tail)",
      "key = (str(path.resolve()), exact, sample, tail)",
      "a live run's progress log read again by the same server returns its first reading: diagnose_run and "
      "training_status never see the steps logged since (a NaN that appears later is missed)"),
    M("m5-diagnosis-run-log-unread", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    if log_path is None and home is not None and home.stdout.is_file():\n        log_path = home.stdout\n",
      "",
      "diagnose_run on a run directory never reads train/logs/stdout.log: a CUDA OOM or import error is not "
      "found, and a run that crashed before its first step says it holds no metrics and no log"),
    # ------------------------------------------------------------------ sixth audit (m6-): written from the product
    # code alone by someone who did not write the tests (issue 48's "Done when"), 5 per area
    M("m6-gate-review-md-unchecked", "gate", "mcp_server/inspection/gate.py",
      '    for path, key in ((run.review_md, "review_md_sha256"), (run.review_jsonl, "review_jsonl_sha256")):',
      '    for path, key in ((run.review_jsonl, "review_jsonl_sha256"),):',
      "inspection/review.md (the sheet the person reads and signs) edited by hand after inspect_rewards still backs "
      "record_inspection_verdict, and the gate stays open: the verdict vouches for a sheet inspect_rewards never "
      "wrote"),
    M("m6-gate-config-moved-since-sampling", "gate", "mcp_server/inspection/gate.py",
      '    moved = changes(meta.get("config_pins") or {}, config_pins(run))\n',
      '    moved = changes(meta.get("config_pins") or {}, meta.get("config_pins") or config_pins(run))\n',
      "train/config.yaml edited between sample_completions and record_inspection_verdict (another temperature, "
      "model or data set) is not noticed: the pass is recorded pinning the new config and the gate opens on "
      "samples drawn with the old one"),
    M("m6-gate-model-subfolder-unpinned", "gate", "mcp_server/inspection/pins.py",
      '    return sorted(p for p in path.rglob("*") if p.is_file())',
      '    return sorted(p for p in path.glob("*") if p.is_file())',
      "a file in a subfolder of a local model directory (a `subfolder` the weights load from, a tokenizer/ or "
      "custom-code folder) edited after the verdict keeps the gate open, and the trainer's model pin misses it "
      "too: unreviewed weights train"),
    M("m6-gate-verdict-reward-hash-unmatched", "gate", "mcp_server/inspection/gate.py",
      '    if verdict.pins.get("reward_code") != result.get("reward_code_sha256"):\n'
      '        return "its reward-code hash is not the reviewed reward\'s"\n',
      "",
      "a verdict.json edited by hand to pin the hash of a reward edited after the review (its other fields the "
      "review's) opens the gate: the reward that trains is not the one the reviewer scored"),
    M("m6-trainer-cli-overrides-script-args-only", "gate", "mcp_server/inspection/trained.py",
      "    for got, base in zip(parsed, alone[:3]):",
      "    for got, base in zip(parsed, alone[:1]):",
      "a pinned GRPO or model setting passed on the trainer's command line after --config (train.py --config "
      "train/config.yaml --epsilon_high 5.0, --model_revision other) passes the point-of-use check: training "
      "runs with a setting the verdict never reviewed"),
    M("m6-sandbox-proc-sys-unmasked", "sandbox", "mcp_server/rewards/sandbox_command.py",
      "    return tuple(found) + tuple((p, os.path.isdir(p)) for p in PROC_SYS_MASKED if os.path.exists(p))",
      "    return tuple(found)",
      "/proc/sys/fs and /proc/sys/kernel/random stay visible in the sandbox: model-written code reads the host's "
      "open-file and inode counters (file-nr, inode-nr) and its boot id, the host's state and identity"),
    M("m6-sandbox-fsize-kib", "sandbox", "mcp_server/rewards/sandbox.py",
      '"fsize": limits.max_file_mb * 1024 * 1024,',
      '"fsize": limits.max_file_mb * 1024,',
      "the largest file a solution may write is max_file_mb KiB, not MiB: a correct solution that writes a 100 KB "
      "file to /tmp fails with 'OSError: [Errno 27] File too large' and scores 0"),
    M("m6-harness-first-arg-changes-dropped", "sandbox", "mcp_server/rewards/harness.py",
      "local = args[i] if type(i) is int and 0 <= i < len(args) else None",
      "local = args[i] if type(i) is int and 0 < i < len(args) else None",
      "a correct solution that changes its first argument in place (sorts, appends to or fills the list or dict "
      "it is given, as the task asks) leaves the test's object unchanged: `f(xs); assert xs == [...]` fails and "
      "it scores 0"),
    M("m6-harness-big-int-limit", "sandbox", "mcp_server/rewards/harness.py",
      '    if hasattr(sys, "set_int_max_str_digits"):  # big ints cross as JSON numbers (e.g. factorial(2000))\n'
      '        sys.set_int_max_str_digits(0)\n',
      "",
      "a correct solution that returns an integer of over 4300 digits (factorial(2000), a big Fibonacci number) "
      "cannot send it to the tester (Python's int-to-str limit): the run fails and it scores 0"),
    M("m6-sandbox-key-folder-inside-bind", "sandbox", "mcp_server/rewards/sandbox_command.py",
      "    if folder == path or folder.startswith(path.rstrip(os.sep) + os.sep):",
      "    if folder == path:",
      "an interpreter installation whose lib folder holds the evidence key's folder (LLM_FINETUNING_STATE_DIR "
      "inside it) is bound into the sandbox: model-written code reads the key and can sign forged run records"),
    M("m6-runs-final-save-files-unchecked", "runs", "mcp_server/training/runrecord.py",
      '    problems = checkpoint_problems(run, run.resolve(final["save"]), final=True)\n',
      "    problems: list[str] = []\n",
      "a run whose final save's files were removed or cut short after the trainer recorded them (the model in "
      "output_dir deleted or truncated) reads succeeded: promote_checkpoint and resume find no loadable model"),
    M("m6-runs-stop-result-first-checkpoint", "runs", "mcp_server/training/stopping.py",
      "checkpoint=str(done[-1]) if done else None, waited_s=waited",
      "checkpoint=str(done[0]) if done else None, waited_s=waited",
      "stop_training's result names the run's first checkpoint (checkpoint-2) as the one the stop left, not the one "
      "it saved at the stop (checkpoint-8): a user resuming or promoting from it loses the steps between"),
    M("m6-runs-stop-step-time-latest", "runs", "mcp_server/training/stopping.py",
      "    return max(times) if times else None",
      "    return times[-1] if times else None",
      "stop_training's default wait reads the latest step's time, not the longest recent one: after one fast step "
      "among 5-minute steps it waits the least 120 s, the run is left 'stopping', and the result says its steps "
      "take up to the fast step's time"),
    M("m6-runs-fsdp-checkpoint-incomplete", "runs", "mcp_server/training/runrecord.py",
      '    if any(p.name.startswith("global_step") or "pytorch_model_fsdp" in p.name\n',
      '    if any(p.name.startswith("global_step")\n',
      "an FSDP checkpoint (its sharded weights in pytorch_model_fsdp_0/) is never complete: training_status lists "
      "no checkpoint and resume_training refuses (or resumes from an older, non-FSDP one)"),
    M("m6-runs-log-tail-bar-first-redraw", "runs", "mcp_server/training/runstate.py",
      '.rstrip("\\r").rsplit("\\r", 1)[-1].rstrip()',
      '.rstrip("\\r").split("\\r", 1)[0].rstrip()',
      "training_status's log_tail shows a progress bar's first redraw (or nothing, where the bar starts with a "
      "carriage return), not its latest: the bar reads 0% or vanishes while training advances"),
    M("m6-diagnosis-log-dict-mid-line", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "        if start < 0 or not line.rstrip().endswith(\"}\"):",
      "        if start != 0 or not line.rstrip().endswith(\"}\"):",
      "a stdout log whose printed metric dicts follow a prefix on their line (torchrun's '[rank0]: ', srun's "
      "'0: ', leading spaces) reads no metrics: diagnose_run on that log finds no NaN loss, no reward trend"),
    M("m6-diagnosis-sidecars-of-run", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    config_file = config_path or (home.config if home else None)",
      "    config_file = (home.config if home else None) or config_path",
      "diagnose_run on a run directory with config=<another config> reads the run's own request.json and "
      "rewards.json, not those beside the config given: the reward and request findings judge another recipe "
      "than the config it was asked about"),
    M("m6-diagnosis-trailing-nuls-binary", "diagnosis", "mcp_server/diagnosis/metrics.py",
      '        if b"\\0" in handle.read(8192).rstrip(b"\\0"):',
      '        if b"\\0" in handle.read(8192):',
      "a short progress.jsonl ending in NUL bytes (a sparse hole left by a crash or a preallocating filesystem) "
      "is refused as 'a binary file': diagnose_run reads nothing of a run that logged fine"),
    M("m6-diagnosis-float32-overflow-finite", "diagnosis", "mcp_server/diagnosis/values.py",
      "        return value if not math.isfinite(value) or abs(value) <= FLOAT32_MAX else "
      "math.copysign(math.inf, value)",
      "        return value",
      "a logged loss or grad_norm of 1e39 (past float32's range: TRL's tensors overflowed) is read as a finite "
      "number: the divergence finding is missed and the rules' sums and fits run on it"),
    M("m6-diagnosis-old-summary-read", "diagnosis", "mcp_server/diagnosis/environment.py",
      "        if run.train_summary.stat().st_mtime < run.train_begin.stat().st_mtime:\n"
      "            return None  # the summary of an earlier launch: this one (a resume) has not ended yet\n",
      "",
      "a run stopped (saved at its step) and resumed is read, while it trains, with its earlier launch's "
      "train-summary.json: that summary's step is the step the resume began at, so diagnose_run and "
      "training_status's health flags say no_steps_trained (an error) on a run that is training"),
    # the k6 audit (issue 48): the run doors' and diagnosis inputs' edges no test pinned (tests/test_run_states.py,
    # tests/test_diagnosis_logs.py: the rows named by each id)
    M("k6-runs-step-zero-unread", "runs", "mcp_server/training/status.py",
      "not isinstance(value, bool) and value >= 0 else None",
      "not isinstance(value, bool) and value > 0 else None",
      "a progress line at step 0 reads as no step: training_status says 'no step logged yet' and list_runs "
      "shows no step for a run that logged step 0"),
    M("k6-runs-eta-any-state", "runs", "mcp_server/training/status.py",
      "if (state == \"running\" and speed and",
      "if (speed and",
      "a stopped or failed run with step times logged shows an ETA, as if it were still training"),
    M("k6-runs-health-failed-no-lines", "runs", "mcp_server/training/status.py",
      "if lines or state in (\"failed\",) else",
      "if lines else",
      "a run that died of a CUDA OOM before its first step shows no health flag ('no metrics logged yet'): "
      "training_status hides the failure's cause"),
    M("k6-runs-failed-exit-zero", "runs", "mcp_server/training/status.py",
      "f\"exit code {derived.exit_code}\" if derived.exit_code is not None else",
      "f\"exit code {derived.exit_code}\" if derived.exit_code else",
      "a failed run whose launch exited 0 (success not borne out) says 'no exit code recorded (killed?)'"),
    M("k6-runs-sync-exit-zero", "runs", "mcp_server/training/runrecord.py",
      "        if derived.exit_code is not None:\n            record[\"exit_code\"]",
      "        if derived.exit_code:\n            record[\"exit_code\"]",
      "run.json never records an exit code of 0: a plain reader of run.json cannot tell a clean exit from a"
      " kill"),
    M("k6-runs-moved-run-is-copy", "runs", "mcp_server/training/launchers/local/process_state.py",
      "origin != here and origin.exists():",
      "origin != here:",
      "a run folder moved or renamed (run.json's cwd no longer exists) is read as a copy of another run: "
      "its launch record is ignored and its state read as if never launched by it"),
    M("k6-runs-fsdp-not-complete", "runs", "mcp_server/training/runrecord.py",
      " or \"pytorch_model_fsdp\" in p.name\n",
      "\n",
      "an FSDP checkpoint (weights in pytorch_model_fsdp_0/) is never complete: resume_training refuses it "
      "or resumes from an older one"),
    M("k6-runs-adapter-folder-not-complete", "runs", "mcp_server/training/runrecord.py",
      "\n           or any((p / name).is_file() for name in WEIGHT_FILES) for p in folders):",
      " for p in folders):",
      "a PEFT checkpoint whose adapter is in a named folder (default/adapter_model.safetensors) is never "
      "complete: resume skips it"),
    M("k6-runs-no-trainer-state-complete", "runs", "mcp_server/training/runrecord.py",
      "    if not (path / \"trainer_state.json\").is_file():\n        return [\"no trainer_state.json (the save did "
      "not finish)\"]\n",
      "",
      "a recorded checkpoint with weights but no trainer_state.json is the latest: resume_training loads a "
      "folder the Trainer cannot resume from"),
    M("k6-runs-any-save-final", "runs", "mcp_server/training/runrecord.py",
      "if s.get(\"final\") and (wanted is None or",
      "if (wanted is None or",
      "a run with outcome.json 'succeeded' and a checkpoint at max_steps but no final save of the model "
      "reads succeeded: promote finds no model"),
    M("k6-runs-stop-wait-overdue-negative", "runs", "mcp_server/training/stopping.py",
      "max(last + expected - now, 0.0)",
      "(last + expected - now)",
      "stop_training on a run whose step is overdue waits only the least 120 s, not half a step and the "
      "save from now: a slow step is left stopping"),
    M("k6-runs-stop-result-first-checkpoint", "runs", "mcp_server/training/stopping.py",
      "checkpoint=str(done[-1]) if done else None, waited_s=waited",
      "checkpoint=str(done[0]) if done else None, waited_s=waited",
      "stop_training's result names the first checkpoint, not the latest, as what a resume starts from"),
    M("k6-runs-damaged-live-raises", "runs", "mcp_server/training/runrecord.py",
      "if damaged is not None and derived.record is None:",
      "if damaged is not None:",
      "run.json damaged while the run is live: training_status and stop_training fail naming the file "
      "instead of reading the live launcher (the run cannot be stopped)"),
    M("k6-runs-guard-stop-any-state", "runs", "mcp_server/training/status.py",
      "if guard_stop and state == \"stopped\":",
      "if guard_stop:",
      "a run the guard stopped that then failed (the stop's save crashed) says 'stopped by the guard' in "
      "its failed status"),
    M("k6-runs-begin-unsigned", "runs", "mcp_server/training/runrecord.py",
      "begin = signed_record(run, run.train_begin, record)",
      "begin = read_json_if_present(run.train_begin)",
      "a train-begin.json written by hand (no signature) bears out a forged success: a run that never began"
      " training reads succeeded"),
    M("k6-runs-marker-unsigned", "runs", "mcp_server/training/launchers/local/process_state.py",
      "    if value is not None and not valid_run(run, path, value):\n        return None\n",
      "",
      "a stopped.json written by hand turns a crashed run 'stopped': resume_training continues a run that "
      "failed"),
    M("k6-diagnosis-wandb-run-name-dash", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "        key = key.rsplit(\" - \", 1)[1]\n",
      "        key = key.split(\" - \", 1)[1]\n",
      "a W&B panel export of a run whose name holds ' - ' twice reads no TRL metric: every finding is "
      "missed"),
    M("k6-diagnosis-null-total-reward-unread", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "\n                              or name in (\"reward\", \"reward_std\") and logs_rewards):",
      "):",
      "TRL's null total reward (every reward function returned None) is read as not logged: the run's lost "
      "reward is missed"),
    M("k6-diagnosis-relogged-null-overwrites", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "rows[row[\"step\"]] = {**row, **earlier, **{k: v for k, v in row.items() if v is not None}}",
      "rows[row[\"step\"]] = {**earlier, **row}",  # re-anchored (kill11b): the merge keeps a logged null
      "a step logged again without a metric (null) loses the value first logged: trends and findings miss "
      "it"),
    M("k6-diagnosis-workspace-path-unresolved", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "for candidate in (raw, workspace_root() / raw, runs_root() / raw):",
      "for candidate in (raw, runs_root() / raw):",
      "diagnose_run('runs/<name>') from another directory says no such file: paths relative to the "
      "workspace are not found"),
    M("k6-diagnosis-checkpoint-best-crash", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "states = [p for p in folder.glob(\"checkpoint-*/trainer_state.json\") if "
      "p.parent.name.split(\"-\")[-1].isdigit()]",
      "states = list(folder.glob(\"checkpoint-*/trainer_state.json\"))",
      "a TRL output_dir with checkpoint-best/ beside checkpoint-N crashes diagnose_run (int('best'))"),
    M("k6-diagnosis-bare-progress-unfound", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "candidates = [run.progress, run.dir / \"progress.jsonl\", run.dir / \"trainer_state.json\"]",
      "candidates = [run.progress, run.dir / \"trainer_state.json\"]",
      "a folder with progress.jsonl at its top (logs copied out) says it holds no metrics"),
    M("k6-diagnosis-kl-beta-above-ref", "diagnosis", "mcp_server/diagnosis/context.py",
      "if not beta or beta <= 0 or beta >= KL_REF_BETA:",
      "if not beta or beta <= 0:",
      "at beta above 0.04 the KL bounds are raised with beta: a KL of 2 nats/token at beta 0.1 is no "
      "finding"),
    M("k6-diagnosis-kl-floor-dropped", "diagnosis", "mcp_server/diagnosis/context.py",
      "warn = max(KL_WARN * beta / KL_REF_BETA, KL_WARN_FLOOR)",
      "warn = KL_WARN * beta / KL_REF_BETA",
      "at a tiny beta (0.001) the KL bounds fall under their floor: a KL of 0.05 is a kl_explosion warning"),
    M("k6-diagnosis-broken-middle-line-skipped", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "broken = read.bad[:-1] if read.last_line_bad and (read.records or read.unsigned) else read.bad",
      "broken = read.bad[:-1] if (read.records or read.unsigned) else read.bad",
      "a metrics log with a damaged line in its middle is read without it, silently, instead of refused "
      "naming the line"),
    M("k6-diagnosis-sparse-log-binary", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "if b\"\\0\" in handle.read(8192).rstrip(b\"\\0\"):",
      "if b\"\\0\" in handle.read(8192):",
      "a progress log ending in a sparse hole (NUL bytes) is refused as a binary file"),
    M("k6-diagnosis-stdout-only-no-rows", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    elif metrics_path is None and log_text:\n        rows = rows_from_log(log_text)\n",
      "",
      "a run known only by its stdout.log (no progress log) is diagnosed with no metrics: its printed "
      "losses and grad norms are never read"),
    M("k6-diagnosis-log-dict-unchecked", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "        if isinstance(record, dict) and any(k in record for k in (\"loss\", \"reward\", \"grad_norm\", "
      "\"learning_rate\")):",
      "        if isinstance(record, dict):",
      "every dict printed in a stdout log (a config, a plan) is read as a logged step: steps_logged and the"
      " findings count rows that are no logs"),
    M("k6-diagnosis-old-reward-nested", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "if name.startswith(\"rewards/\") and name.count(\"/\") == 1:",
      "if name.startswith(\"rewards/\") and not name.endswith(\"/mean\"):",
      "a TRL >= 0.17 log's rewards/<func>/std is read as a reward of its own (rewards/<func>/std/mean): "
      "per-reward findings judge a spread as a reward"),
    M("k6-diagnosis-ends-fraction-zero", "diagnosis", "mcp_server/diagnosis/context.py",
      "k = max(1, int(len(values) * fraction))",
      "k = int(len(values) * fraction) or len(values)",
      "a trend over fewer logs than the fraction's share (3 logs at a quarter) compares the mean with "
      "itself: an entropy collapse 0.8 -> 0.02 in three logs is no finding, and the guard never stops it"),
    # ------------------------------------------------------------------ k6: the gate and sandbox audit (issue 48)
    M("k6-gate-verdict-on-stale-samples", "gate", "mcp_server/inspection/gate.py",
      "    if hashlib.sha256(data).hexdigest() != result[\"samples_sha256\"]:\n        raise UserInputError(\"run\", "
      "\"samples.jsonl changed since the review",
      "    if False:\n        raise UserInputError(\"run\", \"samples.jsonl changed since the review",
      "samples.jsonl edited after inspect_rewards (a completion rewritten) still takes a verdict: "
      "record_inspection_verdict signs a review that does not describe the samples it pins"),
    M("k6-gate-verdict-sheet-removed", "gate", "mcp_server/inspection/gate.py",
      "        if not path.is_file() or sha256_file(path) != review.get(key):",
      "        if path.is_file() and sha256_file(path) != review.get(key):",
      "inspection/review.md or review.jsonl deleted after inspect_rewards (nobody could have read it) still"
      " backs a recorded pass"),
    M("k6-gate-verdict-on-stale-reward", "gate", "mcp_server/inspection/gate.py",
      "    if reward_code_sha256(result[\"rewards\"]) != result[\"reward_code_sha256\"]:",
      "    if False:",
      "a reward module edited after inspect_rewards still takes a verdict: the pass vouches for scores the "
      "edited code never produced"),
    M("k6-gate-samples-differ-ignored", "gate", "mcp_server/inspection/gate.py",
      "    if differs:\n        raise UserInputError(\n            \"run\", \"these samples cannot back",
      "    if False:\n        raise UserInputError(\n            \"run\", \"these samples cannot back",
      "samples drawn with another model, data or sampling settings than train/config.yaml "
      "(samples.meta.json differs_from_config) back a recorded pass"),
    M("k6-pins-hub-revision-ignored", "gate", "mcp_server/inspection/pins.py",
      "pin = {\"model\": ref, \"revision\": revision or \"main\", \"commit\"",
      "pin = {\"model\": ref, \"revision\": \"main\", \"commit\"",
      "a hub model not in the local cache is pinned as revision 'main' whatever model_revision says: "
      "model_revision changed from v1 to v2 after the verdict keeps the gate open"),
    M("k6-pins-hub-data-files-ignored", "gate", "mcp_server/inspection/pins.py",
      "    return {\"source\": str(source), \"config\": config_name, \"split\": split, **{k: v for k, v in "
      "more.items() if v}}",
      "    return {\"source\": str(source), \"config\": config_name, \"split\": split}",
      "a hub `datasets` entry's data_files (train-a.jsonl -> train-b.jsonl) changed after the verdict keeps"
      " the gate open: training reads files nobody reviewed"),
    M("k6-pins-hub-dataset-config-ignored", "gate", "mcp_server/inspection/pins.py",
      "                                         config.get(\"dataset_config\")), \"source\", run)]",
      "                                         None), \"source\", run)]",
      "dataset_config of a hub dataset_name (the subset read: easy -> hard) changed after the verdict keeps"
      " the gate open"),
    M("k6-pins-model-top-level-only", "gate", "mcp_server/inspection/pins.py",
      "    return sorted(p for p in path.rglob(\"*\") if p.is_file())",
      "    return sorted(p for p in path.glob(\"*\") if p.is_file())",
      "a model folder's subfolder weights (sub/model.safetensors, read with model_init_kwargs' subfolder) "
      "edited after the verdict keep the gate open"),
    M("k6-harness-private-names-shared", "sandbox", "mcp_server/rewards/harness_tests.py",
      "        if not name.isidentifier() or name.startswith(\"_\"):",
      "        if not name.isidentifier() or name.startswith(\"__\"):",
      "a solution's _private names reach the tests' scope and `import solution` (not what `from solution "
      "import *` gives): tests can read helpers the solution meant to hide"),
    M("k6-harness-exit-crosses-as-itself", "sandbox", "mcp_server/rewards/harness.py",
      "if isinstance(cls, type) and issubclass(cls, Exception) and cls is not Exception:",
      "if isinstance(cls, type) and issubclass(cls, BaseException):",
      "a solution that raises SystemExit or KeyboardInterrupt has it re-raised as itself in the tester, "
      "past every `except Exception` in the tests, instead of as SolutionError"),
    M("k6-harness-solution-check-called", "sandbox", "mcp_server/rewards/harness_tests.py",
      "if not entry_point or type(check) is not types.FunctionType or check.__globals__ is not scope:",
      "if not entry_point or not callable(check):",
      "a solution that defines its own `check(candidate)` has it called with the entry point when the tests"
      " run nothing: a wrong solution scores a pass instead of 'no tests ran'"),
    M("k6-harness-unittest-error-passes", "sandbox", "mcp_server/rewards/harness_tests.py",
      "    problems = result.errors + result.failures",
      "    problems = result.failures",
      "a unittest.TestCase test that errors (the solution raised) scores as a pass: only assertion failures"
      " count"),
    M("k6-harness-skip-without-unittest", "sandbox", "mcp_server/rewards/harness_tests.py",
      "    return skip is not None and isinstance(exc, skip)",
      "    return skip is None or isinstance(exc, skip)",
      "where the tests never import unittest, every failing test is read as skipped: a wrong solution "
      "beside one passing test scores a pass"),
    M("k6-trainer-verdict-unbound", "gate", "mcp_server/inspection/trained.py",
      "    passed = os.environ.get(VERDICT_SHA_ENV, \"\").strip() if bound else \"\"",
      "    passed = \"\"",
      "inspection/verdict.json replaced or removed after launch_training's gate is believed by the trainer:"
      " a verdict forged after the gate decides what trains"),
    M("k6-gate-reward-copy-edited", "gate", "mcp_server/inspection/trained.py",
      "            if not (run.reward_code / relative).is_file() or (run.reward_code / "
      "relative).read_bytes() != data] + \\",
      "            if not (run.reward_code / relative).is_file()] + \\",
      "inspection/reward_code/ (the reviewed copy the trainer imports) edited after the verdict keeps the "
      "gate open"),
    M("k6-gate-meta-without-config-pins", "gate", "mcp_server/inspection/gate.py",
      "if differs is None or \"config_pins\" not in meta:",
      "if differs is None:",
      "samples.meta.json without config_pins (written by an older version, or edited) backs a recorded "
      "pass: nothing compares the samples' config with train/config.yaml"),
    M("k6-gate-config-moved-since-samples", "gate", "mcp_server/inspection/gate.py",
      "    if moved:\n        raise UserInputError(\"run\", \"train/config.yaml changed since the samples",
      "    if False:\n        raise UserInputError(\"run\", \"train/config.yaml changed since the samples",
      "train/config.yaml edited after sampling (temperature 0.3 added) still takes a pass: the verdict "
      "vouches for settings the samples were not drawn with"),
    M("k6-gate-trained-record-optional", "gate", "mcp_server/inspection/gate.py",
      "if run.script.is_file() and not isinstance(meta.get(\"trained\"), dict):",
      "if run.script.is_file() and meta.get(\"trained\") is None and False:",
      "a run with train/train.py whose samples.meta.json says nothing of what its loader read backs a "
      "recorded pass: the trainer's point-of-use check then has no pin to compare"),
    M("k6-gate-verdict-reward-pin-unchecked", "gate", "mcp_server/inspection/gate.py",
      "    if verdict.pins.get(\"reward_code\") != result.get(\"reward_code_sha256\"):",
      "    if verdict.pins.get(\"reward_code\") is None:",
      "a verdict.json re-pinned by hand to reward specs edited after the review (every other pin matching) "
      "opens the gate: scores nobody read are vouched for"),
    M("k6-gate-verdict-base-rate-unchecked", "gate", "mcp_server/inspection/gate.py",
      "\"route\": result.get(\"route\"), \"base_success_rate\": result.get(\"base_success_rate\"),",
      "\"route\": result.get(\"route\"),",
      "a verdict.json whose base_success_rate is edited (0.9 where the review measured 0.25) still reads as"
      " a verdict on that review"),
    M("k6-trainer-refilter-without-kept-rows", "gate", "mcp_server/inspection/row_probes.py",
      "            return None  # a record that says no rows",
      "            continue  # a record that says no rows",
      "a re-filter record in verdict.json without kept_rows is read as keeping every row: the trainer "
      "compares the reviewed samples at their old indices instead of refusing"),
    M("k6-sandbox-batch-all-memory", "sandbox", "mcp_server/rewards/sandbox.py",
      "    return max(1, available_kb // 2 // per_sandbox_kb)", "    return max(1, available_kb // per_sandbox_kb)",
      "run_many keeps as many sandboxes alive as fit in all of the machine's available memory, not half: a batch of "
      "memory-hungry completions can take the host's last memory (the trainer beside it is OOM-killed)"),
    M("k6-sandbox-batch-files-uncounted", "sandbox", "mcp_server/rewards/sandbox.py",
      "    per_sandbox_kb = (limits.memory_mb + 5 * limits.max_file_mb) * 1024",
      "    per_sandbox_kb = limits.memory_mb * 1024",
      "run_many sizes a batch by each sandbox's process memory alone, not its /tmp and /dev/shm (5x max_file_mb of "
      "tmpfs): with small memory_mb and large max_file_mb, 20x more sandboxes run at once than fit"),
    M("k6-trainer-dynamic-sampling-added", "gate", "mcp_server/inspection/trained.py",
      "    if isinstance(pinned_files, dict) and _sampling_file_pin(run, spec) != "
      "pinned_files.get(DYNAMIC_SAMPLING_FILE):",
      "    if isinstance(pinned_files, dict) and DYNAMIC_SAMPLING_FILE in pinned_files and "
      "_sampling_file_pin(run, spec) != pinned_files.get(DYNAMIC_SAMPLING_FILE):",
      "train/dynamic_sampling.json added after a verdict whose train/ pin had none is never compared by the"
      " trainer: dynamic sampling nobody reviewed changes which batches train"),
    M("k6-gate-launch-read-ignored", "gate", "mcp_server/inspection/gate.py",
      "return verdict if isinstance(verdict, GateResult) else _verdict_holds(run, verdict, spec, here)",
      "return verdict if isinstance(verdict, GateResult) else _verdict_holds(run, verdict, None, here)",
      "launch_training's gate judges train/config.yaml read again, not the config the launch read and trains "
      "with: when the two differ (the file edited between the reads), the gate passes the reviewed file while the "
      "launch trains the other"),
    M("k6-gate-forged-weights-unchecked", "gate", "mcp_server/inspection/gate.py",
      "run, _read_or_none(review_file) or {}) or weights_differ(run, spec)",
      "run, _read_or_none(review_file) or {})",
      "a verdict.json re-pinned by hand to train/config.yaml's reward_weights [1.0, 3.0] (rewards.json, which the "
      "review scored with, weighs each 1.0) opens the gate: TRL trains with weights nobody reviewed"),
    M("k6-gate-reward-copy-extra-entry", "gate", "mcp_server/inspection/gate.py",
      "    unkept = unkept_reward_code(run, rewards)\n", "    unkept = []\n",
      "a module dropped into inspection/reward_code/ after the verdict (the reviewed copy the trainer puts first on "
      "sys.path) keeps the gate open: reviewed code can import it, or it shadows what was reviewed"),
    M("k6-gate-verdict-after-launch", "gate", "mcp_server/inspection/gate.py",
      "    run = resolve_run(request.run)\n    refuse_if_launched(run)\n",
      "    run = resolve_run(request.run)\n",
      "record_inspection_verdict rewrites the verdict and inspection/reward_code/ of a run that was "
      "launched (run.json, logs, checkpoints): the record of what that launch trained with is replaced"),
    M("k6-trainer-agentic-unchecked", "gate", "mcp_server/inspection/trained.py",
      "    if spec.agentic is not None and _canonical(agentic_pin(run, spec.agentic, config)) != \\",
      "    if False and _canonical(agentic_pin(run, spec.agentic, config)) != \\",
      "the trainer never compares the agentic environment and tools (train/agentic.json, their source) with"
      " the verdict's pin: an environment edited after the gate trains"),
    M("k6-trainer-no-evidence-key", "gate", "mcp_server/training/trainer/verified_script.py",
      "    try:  # every record the trainer writes is signed with it (evidence.py): without it, none would "
      "count\n        evidence_key()",
      "    try:  # every record the trainer writes is signed with it (evidence.py): without it, none would "
      "count\n        pass",
      "verified_script starts train.py without the run-evidence key: every record the trainer writes is "
      "unsigned and reads as unrecorded (the run's state, its saves, its stop)"),
    # ------------------------------------------------------------------ round 7 (issue 48: a blind audit of the
    # gate, the sandbox, the run states and diagnosis's inputs, written from the product code alone). First run
    # (default judging, 2026-12-06): 10/20 caught (gate 3/5, sandbox 5/5, runs 0/5, diagnosis 2/5); two unjudged
    # (write_exit runs only in launch.sh's process; resume_patch's pin move only in slow tests); m7-runs-log-tail-pipe
    # an error (its /dev/zero row reads without end and is OOM-killed; its FIFO row fails); m7-gate-preload-space-
    # unsplit survives only because its import-time line falls back to AREAS["gate"], which lacks
    # tests/test_gate_loader.py (that file catches it). Round 7's runs kills (kill7runs, each row checked with the
    # mutation applied): file-unbound by test_run_forgery's signed-file x copied-onto table and its stop-request row;
    # key-path-unresolved by its state-folder forms table (link, link to link x inside, the workspace itself);
    # exit-launch-unbound by every run-state row that ends a launch (support.write_exit now calls evidence.write_exit);
    # resume-patch-adopts-edit by test_resume_patch's patch x hand-edit table; log-tail-pipe by test_run_files' device
    # row (its address space bounded: MemoryError, not the OOM killer); preload-space-unsplit by the tests that run
    # loader_env.py (an import-only line's judges). Lane, --only those six (2026-12-06): 6/6 caught, all by line.
    # gate: the pinned launch environment, the training interpreter's pin, the trainer's start checks
    M("m7-gate-accelerate-unpinned", "gate", "mcp_server/inspection/loader_env.py",
      "    return name.startswith((LOADER_PREFIX, *TRAINING_PREFIXES)) or name in LOADER_NAMES",
      "    return name.startswith(LOADER_PREFIX) or name in LOADER_NAMES",
      "ACCELERATE_* and FSDP_* are left out of the verdict's loader_env pin and the launch gate's comparison: "
      "ACCELERATE_MIXED_PRECISION=bf16 set after a verdict recorded without it passes launch_training's gate (a bf16 "
      "run against a verdict that reviewed bf16: false)"),
    M("m7-gate-loader-workspace-itself", "gate", "mcp_server/inspection/loader_env.py",
      "if any(where == root or where.startswith(root.rstrip(os.sep) + os.sep) for root in roots):",
      "if any(where.startswith(root.rstrip(os.sep) + os.sep) for root in roots):",
      "LD_LIBRARY_PATH (or LD_PRELOAD, GCONV_PATH) naming the workspace folder itself is not refused outright: a "
      "stand-in libpython dropped at the workspace's top loads before the trainer's checks whenever the verdict was "
      "recorded from that shell"),
    M("m7-gate-preload-space-unsplit", "gate", "mcp_server/inspection/loader_env.py",
      '"LD_PRELOAD": ": "', '"LD_PRELOAD": ":"',
      "LD_PRELOAD='/usr/lib/x86_64-linux-gnu/libm.so.6 <workspace>/evil.so' (ld.so splits on spaces too) is read as "
      "one entry outside the workspace: a library inside the workspace is preloaded into the trainer without the "
      "outright refusal"),
    M("m7-trainer-usercustomize-unchecked", "gate", "mcp_server/training/trainer/verified_script.py",
      '    for name in ("sitecustomize", "usercustomize"):',
      '    for name in ("sitecustomize",):',
      "a usercustomize.py on the trainer's path (PYTHONPATH set by a shell hook, or the user's site-packages) runs "
      "at the interpreter's start before any check and the trainer trains anyway: only sitecustomize is refused"),
    M("m7-pins-python-path-resolved", "gate", "mcp_server/inspection/pins.py",
      '    return {"path": os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute)),',
      '    return {"path": real,',
      "the training interpreter is pinned as the base interpreter its venv's python links to: LLM_FINETUNING_PYTHON "
      "switched to another venv of the same base Python (other packages: another trl or transformers) after the "
      "verdict keeps launch_training's gate open, and the verdict names the wrong interpreter"),
    # sandbox: the seccomp filter, the rlimits, the namespaces' view of the host
    M("m7-sandbox-memfd-allowed", "sandbox", "mcp_server/rewards/seccomp.py",
      '"memfd_create": 319, "memfd_secret": 447,', '"memfd_secret": 447,',
      "os.memfd_create works inside the sandbox: model-written code holds memory in an anonymous file no process's "
      "resident set shows (harness_watch.py does not count it; where there is no cgroup nothing caps it)"),
    M("m7-sandbox-nproc-tester-uncounted", "sandbox", "mcp_server/rewards/sandbox.py",
      '"nproc": limits.max_processes + 2,', '"nproc": limits.max_processes,',
      "the tester and its watch thread count against the solution's RLIMIT_NPROC: a correct solution that starts "
      "6 or 7 threads or processes (within the default Limits.max_processes of 8) fails with 'can't start new "
      "thread'"),
    M("m7-sandbox-hostname-host", "sandbox", "mcp_server/rewards/sandbox_command.py",
      '"--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--hostname", "sandbox",',
      '"--setenv", "PYTHONDONTWRITEBYTECODE", "1",',
      "model-written code reads the host's name (socket.gethostname(), /proc/sys/kernel/hostname): the sandbox's "
      "UTS namespace keeps the copy of the host's hostname instead of 'sandbox'"),
    M("m7-sandbox-monotonic-host", "sandbox", "mcp_server/rewards/sandbox_command.py",
      '"--boottime", str(-boot),\n            "--monotonic", str(-mono)]',
      '"--boottime", str(-boot)]',
      "time.monotonic() inside the sandbox reads the host's clock (how long the host has been up), not one that "
      "starts near 0: the time namespace offsets the boot clock only"),
    M("m7-harness-nofile-unlimited", "sandbox", "mcp_server/rewards/harness_wire.py",
      '("RLIMIT_FSIZE", limits["fsize"]), ("RLIMIT_NOFILE", limits["nofile"]), ("RLIMIT_CORE", 0)',
      '("RLIMIT_FSIZE", limits["fsize"]), ("RLIMIT_CORE", 0)',
      "Limits.max_open_files is never applied: model-written code opens as many files, pipes and sockets as the "
      "host's limit allows (a descriptor flood the sandbox says it caps at 64)"),
    M("s3-sandbox-dev-nodes-boot-dated", "sandbox", "mcp_server/rewards/sandbox_command.py",
      "cp -R --preserve=mode {' '.join(DEV_NODES)} /dev/",
      "cp -a {' '.join(DEV_NODES)} /dev/",
      "the sandbox's own device nodes keep the host's dates: a stat of /dev/null inside gives the host's boot "
      "time, so its uptime (issue 48, S3)"),
    M("s3-sandbox-proc-sys-vm-visible", "sandbox", "mcp_server/rewards/sandbox_command.py",
      'PROC_SYS_MASKED = ("/proc/sys/fs", "/proc/sys/kernel/random", "/proc/sys/vm", "/proc/sys/kernel/pty",',
      'PROC_SYS_MASKED = ("/proc/sys/fs", "/proc/sys/kernel/random", "/proc/sys/kernel/pty",',
      "model-written code reads /proc/sys/vm: min_free_kbytes and the memory reserves the kernel sized from the "
      "host's RAM at boot (issue 48, S3)"),
    # runs: the keyed records, the launcher's exit record, the resume's pins, the log tail
    M("m7-evidence-file-unbound", "runs", "mcp_server/evidence.py",
      '    payload = _canonical({"scope": where, "file": file, "record": body})',
      '    payload = _canonical({"scope": where, "record": body})',
      "a signed record copied to another evidence file of the same run (a checkpoint's digest into another "
      "checkpoint, train/logs/exit.json's {exit_code: 0} over another record of that shape) reads as recorded there: "
      "the signature no longer binds the file it was written for"),
    M("m7-evidence-key-path-unresolved", "runs", "mcp_server/evidence.py",
      "        real, home = path.resolve(), workspace_root()",
      "        real, home = path, workspace_root()",
      "LLM_FINETUNING_STATE_DIR naming a link (outside the workspace) to a folder inside it is accepted: the "
      "evidence key is made and kept inside the workspace, where anything that writes it can read the key and forge "
      "a run's records"),
    M("m7-evidence-exit-launch-unbound", "runs", "mcp_server/evidence.py",
      '    if os.environ.get(LAUNCH_ID_ENV):\n        record["launch_id"] = os.environ[LAUNCH_ID_ENV]\n', "",
      "train/logs/exit.json is signed without the launch id it was started with: the launcher's exit record reads "
      "as no launch's (a run whose training command failed is not read as failed by its exit code), or an earlier "
      "launch's exit record counts for a resumed one"),
    M("m7-resume-patch-adopts-edit", "runs", "mcp_server/training/resume_patch.py",
      " and after[k] != before.get(k) and pins.get(k) == before.get(k)]",
      " and after[k] != before.get(k)]",
      "after a guard stop, resume_training's patch re-pins whatever train/config.yaml already differed in from the "
      "verdict: a temperature (or any sampling setting) edited by hand after the review is adopted into the verdict "
      "along with the patch's own field, and the gate no longer refuses it"),
    M("m7-runs-log-tail-pipe", "runs", "mcp_server/training/runstate.py",
      "        with open_regular(path, limit=None) as handle:  # its tail only\n"
      "            handle.seek(0, os.SEEK_END)",
      '        with open(path, "rb") as handle:  # its tail only\n            handle.seek(0, os.SEEK_END)',
      "train/logs/stdout.log replaced by a named pipe (or a device) hangs training_status: the log tail opens it "
      "for reading and blocks, instead of saying it is not a regular file"),
    # diagnosis: what it reads (numbers in a log, the row filter, the run's stdout, the inspection's lengths)
    M("m7-diagnosis-text-beyond-float32", "diagnosis", "mcp_server/diagnosis/values.py",
      "            value = float(text)\n", "            return float(text)\n",
      "a logged number written as text beyond float32's range ('1e39' in a CSV export, where every value is text) "
      "reads as a finite number, not an infinity: an overflowed loss or grad_norm is not diagnosed as non-finite"),
    M("m7-diagnosis-empty-progress-no-log", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    has_log = log is not None or (home is not None and home.stdout.is_file())",
      "    has_log = log is not None",
      "diagnose_run on a run that crashed before its first step (empty train/logs/progress.jsonl, a CUDA OOM in "
      "stdout.log) refuses with 'holds no logged training step' instead of reading the run's stdout log and naming "
      "the OOM"),
    M("m7-diagnosis-bool-metric-accepted", "diagnosis", "mcp_server/diagnosis/values.py",
      "    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):",
      "    if value is None or isinstance(value, (int, float)):",
      "a metric logged as true/false ({\"loss\": true}) is read as missing at that step instead of refused as a "
      "bool: diagnose_run reports on a log whose values are not numbers without saying so"),
    M("m7-diagnosis-base-cut-any-share", "diagnosis", "mcp_server/diagnosis/context.py",
      "        return base is not None and base[0] >= BASE_CUT",
      "        return base is not None",
      "every run with an inspection (samples.meta.json lengths, even 0% cut) is told its truncation predates "
      "training: completions_never_terminate says the base samples were already cut and blames the limit, when "
      "training broke the model's stopping"),
    M("m7-diagnosis-epoch-only-row", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    if not any(v is not None for k, v in row.items() if k != \"epoch\"):",
      "    if not any(v is not None for k, v in row.items()):",
      "an evaluation logged at a step of its own (eval_* and epoch only, in trainer_state.json's log_history) reads "
      "as a logged training step: the run's last step and steps logged count it, with no metric in it"),
    # ------------------------------------------------------------------ round 10 (issue 48): what loaded, not what
    # was checked (loaded_weights, loaded_config; judged by tests/test_loaded_is_what_was_checked.py)
    M("r10-tokenizer-from-the-folder", "gate", "mcp_server/training/trainer/script_support.py",
      "        processing_class=verified_processing_class(training_args),\n",
      "        processing_class=None,\n",
      "GRPOTrainer loads the tokenizer from the model folder by path: a chat template renamed in after the weights "
      "loaded and put back after the tokenizer read it trains unreviewed"),
    M("r10-loaded-config-unchecked", "gate", "mcp_server/inspection/loaded_weights.py",
      "        return held_load(held, lambda private: loaded_config_problems(models, private, loads),\n"
      "                         prefix=\"llm-finetuning-loaded-\") + problems\n",
      "        return problems\n",
      "the config as loaded is not compared with the verified file: another epsilon, architecture class or end "
      "token swapped in during the load trains with the reviewed tensors"),
    M("r10-saved-weights-hash-unchecked", "gate", "mcp_server/inspection/loaded_weights.py",
      "        if sha != saved.get(relative):\n",
      "        if sha is None:\n",
      "a checkpoint's weight file is not held to the ledger's sha256 after the load: a file swapped after the "
      "resume's check, and kept, resumes the run from weights it never wrote"),
    M("r10-export-load-unchecked", "gate", "mcp_server/evaluation/checked_load.py",
      "        problems = [problem] if problem else saved_weight_problems(model, ckpt, files)\n",
      "        problems = [problem] if problem else []\n",
      "an export's or a promotion's load is not compared with the checkpoint it hashed: a weight file swapped in "
      "during the load is judged, or exported, under the hash of the file put back"),
    # ------------------------------------------------------------------ round 9 (issue 48, G2): the weights in
    # memory against the verified files' bytes (inspection/loaded_weights.py; judged by tests/test_loaded_weights.py)
    M("r9-loaded-weights-mapping-kept", "gate", "mcp_server/inspection/loaded_weights.py",
      "    for model in models:\n        own_memory(model)\n",
      "    for model in models:\n        pass\n",
      "the loaded CPU weights stay views of the weight file's mapping: the file rewritten in place after the check "
      "changes the weights that train (a frozen LoRA base, the reference model, for good)"),
    M("r9-loaded-weights-shape-only", "gate", "mcp_server/inspection/loaded_weights.py",
      "    if torch.equal(raw(file_tensor.to(value.dtype)), raw(value)):\n",
      "    if tuple(value.shape) == tuple(file_tensor.shape):\n",
      "each loaded tensor is compared with the file's by shape only: a weight file swapped in during the load and "
      "put back (the round's racer) trains its marked layernorm"),
    M("r9-loaded-weights-pin-unchecked", "gate", "mcp_server/inspection/loaded_weights.py",
      "    if digest != files_sha256:\n",
      "    if files_sha256 is None:\n",
      "the files read for the comparison are not checked against the verified pin: a weight file swapped in after "
      "the check's hash, and kept, compares equal to what loaded and trains unreviewed"),
    # ------------------------------------------------------------------ round 8 (issue 48: a blind audit of the
    # gate, the sandbox, the run states and diagnosis's inputs, written from the product code alone by someone who
    # did not write the tests; 5 per area, none on a line an earlier mutation mutates; the effects of 16 of the 20
    # probed on a scratch copy before they were added). First run (default judging, 2026-12-06, after merging main
    # at 10:10): 9/20 caught (gate 3/5, sandbox 4/5, runs 0/5, diagnosis 2/5); m8-pins-glob-star-only could not be
    # judged by default (two tests that fail unmutated on main run its line: test_difficulty_filter's 'launched'
    # case, test_harnesses' drift check) and survives --by-area; two unjudged (stop_training's timeout and a live
    # run's starting/running: no fast test runs them); no pytest error. Second run (default judging, 2026-12-06,
    # branch kill8, the 11 not caught by then): 11/11 caught, 10 by the tests that run the line, 1 (the wire) by the
    # sandbox's files, none unjudged (coverage map 1455 s at load 15, judged in 2109 s in all), by tables generated
    # from each comparison's boundaries (docs/development.md, the mutation lane), not a row per mutant.
    # gate: the recorded verdict's re-check, the gate's samples, the data pin's globs, the loader's folders, the
    # trainer's package origins
    M("m8-gate-record-pass-args-swapped", "gate", "mcp_server/inspection/gate.py",
      '        if self.verdict == "pass" and pass_problem(self.agree, self.disagree, self.note):\n'
      '            return pass_problem(self.agree, self.disagree, self.note)',
      '        if self.verdict == "pass" and pass_problem(self.disagree, self.agree, self.note):\n'
      '            return pass_problem(self.disagree, self.agree, self.note)',
      "the gate re-checks a recorded pass with agree and disagree swapped: a pass recorded by "
      "record_inspection_verdict with 6 agree and 2 disagree (and a note) reads 'not a verdict: a pass that disagrees "
      "with 6 of the 8 scores is a fail' and the gate stays closed, while a hand-written verdict.json with 2 agree "
      "and 6 disagree opens it"),
    M("m8-gate-samples-exist-only", "gate", "mcp_server/inspection/gate.py",
      "    if sha256_file(run.samples) != verdict.samples_sha256:",
      "    if not run.samples.is_file():",
      "inspection/samples.jsonl replaced after the verdict (other completions than the ones the person read) keeps "
      "the gate open: nothing else compares the samples themselves with the verdict's samples_sha256 (the review "
      "still holds the old hash, and no pin covers samples.jsonl)"),
    M("m8-pins-glob-star-only", "gate", "mcp_server/inspection/pins.py",
      "    if any(c in pattern for c in GLOB_CHARS):",
      '    if "*" in pattern:',
      "a data_files pattern with ? or [...] but no * ('data/shard-?.jsonl') is pinned as a hub name, not by the "
      "files it matches: a shard edited or added after the verdict keeps the gate open, and the trainer trains on "
      "data nobody reviewed"),
    M("m8-gate-loader-entry-unresolved", "gate", "mcp_server/inspection/loader_env.py",
      "            where = os.path.realpath(os.path.join(cwd, entry))",
      "            where = os.path.abspath(os.path.join(cwd, entry))",
      "LD_LIBRARY_PATH (or LD_PRELOAD, LD_AUDIT, GCONV_PATH) naming a link outside the workspace that leads into it "
      "(/tmp/libs -> <workspace>/evil) is not refused outright: the links are not resolved, so a folder of libraries "
      "the workspace holds loads into the trainer whenever the verdict was recorded from that shell"),
    M("m8-trainer-allowed-root-unterminated", "gate", "mcp_server/training/trainer/verified_script.py",
      "    return [os.path.realpath(p).rstrip(os.sep) + os.sep for p in recorded] or sorted(_installation_roots())",
      "    return [os.path.realpath(p).rstrip(os.sep) for p in recorded] or sorted(_installation_roots())",
      "the recorded site-packages is compared as a bare prefix: a shadow trl (or torch, transformers) in a sibling "
      "folder such as .../site-packages-shadow/ put first on the path passes the trainer's origin check "
      "(foreign_libraries, foreign_modules) and scores and trains what it likes"),
    # sandbox: the values that cross, the memory sum, /tmp's size, the CPU budget's words, the v1 cgroup's clock
    M("m8-harness-wire-negative-infinity", "sandbox", "mcp_server/rewards/harness_wire.py",
      '    if tag == "float" and value in ("nan", "inf", "-inf"):',
      '    if tag == "float" and value in ("nan", "inf"):',
      "a correct solution that returns float('-inf') (a max over nothing, a log of 0) fails: 'the solution answered "
      "with something that is not data (not data: float)', and its completion scores 0"),
    M("m8-harness-watch-rss-pages", "sandbox", "mcp_server/rewards/harness_watch.py",
      "            rss += int(fields[21]) * self.page",
      "            rss += int(fields[21])",
      "the sandbox's memory sum counts pages as bytes (4096x too little): forked children that together hold 3x "
      "memory_mb (each under its own RLIMIT_AS) are never stopped by the tester; where there is no cgroup the "
      "solution passes, where there is one only the kernel's larger group limit stops it"),
    M("m8-sandbox-tmp-one-file", "sandbox", "mcp_server/rewards/sandbox_command.py",
      "    tmp_bytes = max(1, max_file_mb) * 4 * 1024 * 1024",
      "    tmp_bytes = max(1, max_file_mb) * 1024 * 1024",
      "the sandbox's /tmp holds max_file_mb (16 MB) in all, not 4x: a correct solution that writes two 10 MB files "
      "to /tmp fails with 'OSError: [Errno 28] No space left on device'"),
    M("m8-harness-cpu-signal-xcpu", "sandbox", "mcp_server/rewards/harness.py",
      "if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGPROF:",
      "if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:",
      "a solution that used up its CPU budget (a busy loop dies of its ITIMER_PROF's SIGPROF) is reported as 'the "
      "solution process was killed by signal 27', not 'used its 0.5 s of CPU time': the reward's error no longer "
      "says why"),
    M("m8-sandbox-cgroup-v1-cpu-microseconds", "sandbox", "mcp_server/rewards/sandbox_cgroup.py",
      '            return int(_read(self._file("cpuacct", "cpuacct.usage"))) / 1e9',
      '            return int(_read(self._file("cpuacct", "cpuacct.usage"))) / 1e6',
      "on a cgroup v1 host the group's CPU time (cpuacct.usage, nanoseconds) is read as microseconds, 1000x too "
      "much: every sandbox that computes for a few milliseconds is killed as 'used its 0.5 s of CPU time' and "
      "correct solutions score 0"),
    # runs: the log tail's window, the stop's error line, the patched resume's checkpoint, a stop with no wait,
    # a live run's train-begin marker
    M("m8-runs-log-tail-window-bytes", "runs", "mcp_server/training/runstate.py",
      "            handle.seek(max(0, handle.tell() - 256 * 1024))",
      "            handle.seek(max(0, handle.tell() - 256))",
      "training_status's log_tail reads only the log's last 256 bytes, not 256 KiB: asked for 20 lines it shows "
      "4 or 5 (the first one cut mid-line), and a failed run's traceback is mostly missing"),
    M("m8-runs-stop-error-first-line", "runs", "mcp_server/training/runrecord.py",
      "    return found[-1][:300] if found else None",
      "    return found[0][:300] if found else None",
      "a stop whose save failed names the first exception line in the log's last 64 KiB (an earlier, handled "
      "error), not the last one that ended the run: stop_training's and training_status's error points at the "
      "wrong cause"),
    M("m8-runs-guard-resume-first-checkpoint", "runs", "mcp_server/training/resume_patch.py",
      "    return (before[-1] if before else None), why",
      "    return (before[0] if before else None), why",
      "after a guard stop, resume_training with a patch resumes from the run's first checkpoint, not the last one "
      "before the stop: every step trained since that first save is thrown away"),
    M("m8-runs-stop-timeout-zero-default", "runs", "mcp_server/training/status.py",
      "    wait = request.timeout_s if request.timeout_s is not None else wait",
      "    wait = request.timeout_s or wait",
      "stop_training with timeout_s 0 (kill at once, or just ask and return) waits the default 2-15 minutes for "
      "the step end instead: a kill asked for now arrives minutes later"),
    M("m8-runs-begin-unsigned-running", "runs", "mcp_server/training/launchers/local/process_state.py",
      "        begun = _marker(run, run.train_begin, record) is not None",
      "        begun = run.train_begin.is_file()",
      "a live run whose train/logs/train-begin.json is not its trainer's of this launch (written by hand, copied, "
      "another launch's) reads 'running' while it is still starting (loading the model): the signature is not "
      "checked on this one branch"),
    # diagnosis: rules that read the log and the run's own records, the learning rate from the metrics, the
    # zero-spread trend, a bare stdout log by its suffix
    M("m8-diagnosis-no-steps-boundary", "diagnosis", "mcp_server/diagnosis/environment.py",
      "    if end > start:\n        return []",
      "    if end >= start:\n        return []",
      "a run that ended at the step it began (train-summary.json at step 0: a data set smaller than one generation "
      "batch) gets no no_steps_trained finding: diagnose_run says nothing of why it never trained"),
    M("m8-diagnosis-vllm-traceback-any-mention", "diagnosis", "mcp_server/diagnosis/environment.py",
      '    return any("/vllm/" in line or "vllm." in line and "File" in line for line in lines)',
      '    return any("vllm" in line for line in lines)',
      "a training CUDA OOM in a run that uses vLLM (any of the 80 lines before it mentions vllm: an INFO line, the "
      "launch's settings) is diagnosed as vllm_out_of_memory: its patch moves vllm_gpu_memory_utilization instead "
      "of the training memory levers"),
    M("m8-diagnosis-logged-lr-first", "diagnosis", "mcp_server/diagnosis/context.py",
      "            step, peak = max(logged, key=lambda p: p[1])",
      "            step, peak = logged[0]",
      "without a config, the learning rate is the first logged one (the warmup's start, near 0), not the peak: a "
      "run at 1e-3 is told its rate is below GRPO's range (raise it) instead of above it"),
    M("m8-diagnosis-zero-std-late-early", "diagnosis", "mcp_server/diagnosis/signal.py",
      "        late = ends([v for _, v in frac], 0.5)[1]",
      "        late = ends([v for _, v in frac], 0.5)[0]",
      "a run whose groups lost their reward spread late (frac_reward_zero_std 0.2 early, 0.95 in its second half) "
      "gets no no_reward_signal warning: the 'late' share is the first half's"),
    M("m8-diagnosis-log-suffix-only-log", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    elif path.suffix.lower() in LOG_SUFFIXES:",
      '    elif path.suffix.lower() == ".log":',
      "diagnose_run given a SLURM job's slurm-1234.out (or a .txt or .err stdout log) refuses it as an unsupported "
      "metrics file type instead of reading it as a log: the CUDA OOM in it is not found"),
    # m9 (a blind audit of the gate, the sandbox, the run states and diagnosis's inputs, written from the product
    # code alone): gate: the verdict's agree-with-rest, the gate's way on, review.json's own hash, a relative
    # ACCELERATE_* file, the trainer's package origins
    M("m9-gate-agree-rest-overwrites", "gate", "mcp_server/inspection/gate.py",
      '            given.setdefault(sid, {"id": sid, "agree": True, "note": "agreed with the rest"})',
      '            given[sid] = {"id": sid, "agree": True, "note": "agreed with the rest"}',
      "record_inspection_verdict with agree_with_rest (CLI --agree-rest) overwrites the samples the person listed: "
      "their disagreements become agreements, so a pass that disagreed with 3 of 20 samples is recorded as 20 agree, "
      "0 disagree, needs no note, and verdict.json no longer says where the reader disagreed"),
    M("m9-gate-how-shell-part-alone", "gate", "mcp_server/inspection/gate.py",
      "        how = shell[moved_keys[0]]() if len(moved_keys) == 1 and moved_keys[0] in shell else how",
      "        how = shell[moved_keys[0]]() if moved_keys[0] in shell else how",
      "a gate closed because the training interpreter changed together with something pinned after it (the loader "
      "environment, a file the reward reads) tells only how to put LLM_FINETUNING_PYTHON back: its how_to_clear "
      "leaves out the other change (re-inspect, or restore the loader's variables), and following it leaves the gate "
      "closed"),
    M("m9-gate-review-json-edit-unchecked", "gate", "mcp_server/inspection/gate.py",
      "    if not review_file.is_file() or sha256_file(review_file) != verdict.review_sha256:",
      "    if not review_file.is_file():",
      "inspection/review.json edited after the verdict (its review_md_sha256 re-pointed at a review.md rewritten by "
      "hand, its other fields as reviewed) keeps the gate open: the verdict's review_sha256 is never compared, so the "
      "sheet the gate vouches for is not the one the person read and signed"),
    M("m9-gate-loader-file-server-cwd", "gate", "mcp_server/inspection/loader_env.py",
      "        pin[name + FILE_PIN] = file_digest(pin[name], cwd or os.getcwd())",
      "        pin[name + FILE_PIN] = file_digest(pin[name], os.getcwd())",
      "a relative ACCELERATE_DEEPSPEED_CONFIG_FILE=ds.json (the run directory's, where the trainer starts) is pinned "
      "as the file of the server's own working directory (usually none): the run's ds.json edited after the verdict "
      "keeps the gate open, and the trainer's own check (against the run's file) refuses every launch of it"),
    M("m9-trainer-library-link-unresolved", "gate", "mcp_server/training/trainer/verified_script.py",
      "            if not any(real.startswith(root) for root in roots):",
      "            if not any(where.startswith(root) for root in roots):",
      "the trainer judges where trl, torch or transformers would be imported from by the path as found, not where "
      "its links lead: a package folder in the recorded site-packages that links into the workspace passes, and a "
      "venv reached through a symlinked folder (a workspace under a linked home) is refused as foreign: 'refusing to "
      "train'"),
    # sandbox: the rlimits' hard half, a dict argument's removed keys, stdlib names in the tests' scope, a sandbox
    # lost mid-batch, /tmp's size
    M("m9-harness-rlimit-soft-only", "sandbox", "mcp_server/rewards/harness_wire.py",
      "        resource.setrlimit(getattr(resource, name), (value, value))",
      "        resource.setrlimit(getattr(resource, name), (value, resource.getrlimit(getattr(resource, name))[1]))",
      "the sandbox's rlimits are set as soft limits under the host's hard ones: model-written code raises its own "
      "(resource.setrlimit(RLIMIT_AS / RLIMIT_NPROC / RLIMIT_FSIZE / RLIMIT_NOFILE, (hard, hard))) and then maps "
      "memory, starts processes, writes files and opens descriptors past max_file_mb, max_processes and "
      "max_open_files"),
    M("m9-harness-dict-arg-not-cleared", "sandbox", "mcp_server/rewards/harness.py",
      "                    if type(local) in (dict, set):\n"
      "                        local.clear()\n"
      "                        local.update(new)",
      "                    if type(local) in (dict, set):\n"
      "                        local.update(new)",
      "a correct solution that removes entries from the dict or set it is given (d.pop(k), s.discard(x), as the "
      "task asks) leaves them in the test's copy: `assert d == {...}` fails and the right solution scores 0"),
    M("m9-harness-stdlib-name-shadowed", "sandbox", "mcp_server/rewards/harness_tests.py",
      "                except ImportError:\n"
      "                    pass\n"
      "            continue\n"
      "        scope[name] = value",
      "                except ImportError:\n"
      "                    pass\n"
      "        scope[name] = value",
      "a solution that defines its own `math`, `re` or `json` (a class with isclose/fullmatch/loads that return what "
      "it likes) replaces the standard module in the tests' scope: `assert math.isclose(f(2), 1.414)` asks the "
      "solution's object, and a wrong solution passes"),
    M("m9-sandbox-unavailable-swallowed", "sandbox", "mcp_server/rewards/sandbox.py",
      "    except SandboxUnavailable:\n"
      "        raise\n"
      "    except Exception as exc:  # e.g. out of file descriptors: this job fails, the batch goes on",
      "    except Exception as exc:  # e.g. out of file descriptors: this job fails, the batch goes on",
      "a sandbox that cannot start after the batch's check (bwrap removed or broken mid-batch, an interpreter whose "
      "libraries cannot be bound) scores every completion 0 ('SandboxUnavailable: ...' as each one's error) instead "
      "of saying that model-written code cannot run here: training goes on with a reward that pays nothing"),
    M("m9-sandbox-tmp-uncapped", "sandbox", "mcp_server/rewards/sandbox_command.py",
      '        "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--chdir", "/tmp",',
      '        "--tmpfs", "/tmp", "--chdir", "/tmp",',
      "the sandbox's /tmp is a tmpfs of the default size (half the host's memory), not 4x max_file_mb: model-written "
      "code writes file after file (each under RLIMIT_FSIZE) until the host's memory is gone"),
    # runs: the stop's lost steps, a run reached through a link, the config-changed refusal, a patch's pins, the
    # step list_runs shows
    M("m9-runs-stop-oldest-checkpoint", "runs", "mcp_server/training/stopping.py",
      "    latest = Path(done[-1]).name if done else None",
      "    latest = Path(done[0]).name if done else None",
      "stop_training's result names the run's oldest checkpoint as the latest: a stop with kill says 'the steps since "
      "checkpoint-10 are lost' when checkpoint-40 is saved, and a run left stopping says kill loses the steps since "
      "checkpoint-10"),
    M("m9-evidence-lines-scope-unresolved", "runs", "mcp_server/evidence.py",
      "    where, file = str(Path(os.path.abspath(run.dir)).resolve()), run_file(run, path)",
      "    where, file = str(Path(os.path.abspath(run.dir))), run_file(run, path)",
      "a run reached through a symlinked folder (a workspace under a linked home, macOS's /var -> /private/var) has "
      "every progress line read as unsigned: training_status shows no step and 'N progress lines unsigned or "
      "altered', diagnose_run says the run holds no logged training step, the stop wait reads no step time"),
    M("m9-runs-config-refusal-added-field", "runs", "mcp_server/training/resume_patch.py",
      "    changed = ({k: (launched.get(k), config.get(k)) for k in dict.fromkeys([*launched, *config])",
      "    changed = ({k: (launched.get(k), config.get(k)) for k in launched",
      "resume_training's config_hash refusal does not name a field added to train/config.yaml after the launch "
      "(temperature: 0.3 where the launched config had none): with only that change it says 'its values are the "
      "launched ones (comments or layout differ)', and with others it leaves it out of the values to put back"),
    M("m9-runs-patch-moves-pins-unstopped", "runs", "mcp_server/training/resume_patch.py",
      "    before = config_pins(run) if isinstance(verdict, dict) and stop is not None else None",
      "    before = config_pins(run) if isinstance(verdict, dict) else None",
      "resume_training's patch on a run the guard never stopped moves the inspection verdict's pins too: a patch of "
      "a pinned setting (temperature, max_completion_length) is written into verdict.json's pins, so the gate opens "
      "and the run resumes sampling with settings nobody reviewed"),
    M("m9-runs-list-step-unsigned", "runs", "mcp_server/training/runstate.py",
      "    return last_progress_line(run, lambda line: valid_run(run, run.progress, line)\n",
      "    return last_progress_line(run, lambda line: True\n",
      "list_runs shows the step of the progress log's last line whether the trainer signed it or not: a line "
      "appended by hand ({\"step\": 999}) reads as the run's step, and stop_training waits for 'step 1000'"),
    # diagnosis: no evidence key, the dropped lines' note, log line numbers, a NUL run before a line, a long log's
    # tail
    M("m9-diagnosis-no-key-trusts-all", "diagnosis", "mcp_server/diagnosis/progress_log.py",
      "    except UserInputError:  # no key here: no line is known to be the trainer's\n"
      "        kept = []",
      "    except UserInputError:  # no key here: no line is known to be the trainer's\n"
      "        kept = list(read.records)",
      "where the evidence key cannot be read (removed, LLM_FINETUNING_STATE_DIR unset or pointing elsewhere), every "
      "line of a run's progress log is read as the trainer's: a hand-edited line's reward 99 and kl 777 show in "
      "training_status and diagnose_run raises kl_explosion with patches, with no note that nothing was verified"),
    M("m9-diagnosis-unread-note-dropped", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "        unread=unread,\n",
      "",
      "diagnose_run on a run whose progress log holds unsigned or altered lines (dropped from the reading) no longer "
      "says so: its summary reads 'healthy: no problems in N logged steps' without 'M progress lines unsigned or "
      "altered: not used'"),
    M("m9-diagnosis-log-line-off-by-one", "diagnosis", "mcp_server/diagnosis/context.py",
      "    return [(i + 1, line.strip()) for i, line in enumerate(lines) if pattern.search(line)]",
      "    return [(i, line.strip()) for i, line in enumerate(lines) if pattern.search(line)]",
      "every log finding's evidence names the line before the one it quotes ('line 41: torch.OutOfMemoryError' for "
      "line 42 of stdout.log; 'line 0' for the first), and the vLLM-traceback check stops one line short of the OOM"),
    M("m9-diagnosis-nul-prefix-kept", "diagnosis", "mcp_server/diagnosis/progress_log.py",
      "        if not (raw := raw.strip(BLANK)):  # a NUL run before a line (appended after a hole) is no part of it",
      "        if not (raw := raw.strip()):  # a NUL run before a line (appended after a hole) is no part of it",
      "a progress line written after a sparse hole (NUL bytes left by a crash on a preallocating filesystem, then a "
      "resume appending) is read with the NULs as part of it: not JSON, so diagnose_run refuses the whole log "
      "naming that line, and training_status drops the resumed launch's first step"),
    M("m9-diagnosis-log-tail-short", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "            handle.seek(size - (4 << 20))",
      "            handle.seek(size - (1 << 20))",
      "a stdout log over 8 MiB is read by its first MiB and its last MiB, not its last 4: a CUDA OOM or a disk-full "
      "error followed by over a MiB of traceback and NCCL teardown chatter from the other ranks is not found"),
    # ------------------------------------------------------------------ m10: a fourth blind audit (issue 48) of the
    # gate, the sandbox, the run states and diagnosis's inputs, from the product code alone by someone who did not
    # write the tests; 5 per area, none on a line an earlier mutation mutates the same way; the effects of 8 probed
    # on this machine (the worker's process group and namespace init with bwrap, the clipped-ratio alias, the moved
    # config's metrics, a copied progress log, the entropy patch, the ETA). First run (default judging, 2026-12-06
    # 15:32-16:08, tree 6f4544c): 6/20 caught (gate 3/5, sandbox 1/5, runs 1/5, diagnosis 1/5); one unjudged
    # (status._eta's floor: no fast test runs it); the worker_apart pair judged only by AREAS['sandbox'] (no fast
    # test runs the module, none of the area's files runs it), reads._sqlite_files likewise; no pytest error.
    # The runs survivors killed by tables of generated boundaries in tests/test_run_states.py (branch kill10b,
    # `--by-area --only` the four: 4/4 in 421 s at load 6-7): the stop's window of progress lines, the stop's
    # outcome, the ETA at every point of a step (its line now run by fast tests), the entropy patch rule.
    # Killed by generated tables (branch kill10a, --by-area, 806 s at load 14): loaded-config-subfolder (where the
    # model loads from x every shape-free config field), site-hook-link-refused (every sysconfig root x a file or
    # a link within, out, in), sqlite-wal-unpinned (every journal mode x every side file on disk), digest-cache-
    # ctime (size x inode x mtime, ctime moving); reads.py now has MODULE_TESTS.
    # gate: the config as loaded, the loader's variables, the trainer's own origin checks, the reward reads watched
    # at every call, the reference model's weights
    M("m10-gate-loaded-config-subfolder", "gate", "mcp_server/inspection/loaded_config.py",
      "    folder = Path(private) / sub if sub else Path(private)\n",
      "    folder = Path(private)\n",
      "a model loaded from a subfolder (model_init_kwargs subfolder: the checkpoint inside a repo) has its loaded "
      "config and generation config compared with nothing (no config.json at the folder's top: the check returns "
      "empty) or with the top folder's other config.json (a false 'swapped while it loaded' refusal): a config.json "
      "renamed over the subfolder's while the model loads (hidden_act, rope_theta, eos_token_id) trains unrefused"),
    M("m10-gate-preload-bare-name", "gate", "mcp_server/inspection/loader_env.py",
      '    if name in ("LD_PRELOAD", "LD_AUDIT"):\n        return [p for p in parts if "/" in p]',
      '    if name == "LD_AUDIT":\n        return [p for p in parts if "/" in p]',
      "LD_PRELOAD=libtcmalloc_minimal.so.4 (a bare library name, which ld.so searches in the library path) is read "
      "as a file in the run directory: launch_training refuses the launch as 'LD_PRELOAD: libtcmalloc_minimal.so.4 "
      "-> <run>/libtcmalloc_minimal.so.4' inside the workspace, and no launch from that shell can train"),
    M("m10-trainer-site-hook-link-refused", "gate", "mcp_server/training/trainer/verified_script.py",
      "    yield os.path.abspath(path)\n    yield os.path.realpath(path)\n",
      "    yield os.path.realpath(path)\n",
      "a distribution's own site hook that links out of the stdlib (Debian/Ubuntu's /usr/lib/python3.X/"
      "sitecustomize.py -> /etc/python3.X/sitecustomize.py) is judged foreign: every launch on a system Python "
      "refuses to train ('sitecustomize ... ran at this interpreter's start from outside its installation'), as does "
      "a module file of the installation that is a link"),
    M("m10-trainer-reward-calls-unwatched", "gate", "mcp_server/inspection/trained.py",
      "    funcs = reads.watch_all(funcs, watch)\n", "",
      "the trainer checks the files the rewards read only once before the first step, not at each reward call: a "
      "rubric rewritten after step 1, or a file no review read (a branch the samples never took) read at step 200, "
      "scores training with no refusal"),
    M("m13-replay-rounds-away-a-change", "gate", "mcp_server/inspection/row_probes.py",
      "    return round(now, 6) == stored or math.isclose(now, stored, rel_tol=1e-9, abs_tol=1e-12)",
      "    return round(now) == round(stored) or math.isclose(now, stored, rel_tol=1e-9, abs_tol=1e-12)",
      "the trainer's replay compares scores at whole numbers: a reward reviewed at 0.2 that scores 0.4 at launch "
      "(an environment variable, a file's size changed since) trains with no refusal"),
    M("m13b-replay-ignores-the-row-probes", "gate", "mcp_server/inspection/replay.py",
      "    differ += row_differ\n", "",
      "the trainer's replay scores the training rows' probes but drops what differs: a reward input keyed to the "
      "prompts the review never sampled (round 15, G2) changed after the verdict trains with no refusal"),
    M("m10-trainer-ref-model-unchecked", "gate", "mcp_server/inspection/trained.py",
      '    models = [m for m in (getattr(trainer, "model", None), getattr(trainer, "ref_model", None)) '
      'if m is not None]',
      '    models = [m for m in (getattr(trainer, "model", None),) if m is not None]',
      "a full fine-tune with beta > 0 loads its reference model separately: a weight file renamed over the model "
      "folder while the reference loads (and put back) is never compared, so the KL anchors the policy to weights "
      "nobody reviewed, with no refusal"),
    # sandbox: the worker's namespace flags and its init's pid, the reads a reward makes (a WAL database, a module
    # already imported, the digest cache)
    M("m10-worker-same-session", "sandbox", "mcp_server/worker_apart.py",
      'NAMESPACE = ("--unshare-pid", "--new-session", "--proc", "/proc")',
      'NAMESPACE = ("--unshare-pid", "--proc", "/proc")',
      "the worker shares the server's session and process group: reward, grader or environment code it imports "
      "calls os.killpg(os.getpgrp(), signal.SIGKILL) (or kill(0, ...)) and the MCP server dies with it (and "
      "whatever else the client started in that group); it can also reach the server's controlling terminal"),
    M("m10-worker-init-pid-key", "sandbox", "mcp_server/worker_apart.py",
      '        init_pid = int(json.loads(text)["child-pid"])',
      '        init_pid = int(json.loads(text)["child_pid"])',
      "the worker's namespace init is never known (bwrap's info names it child-pid): killing a worker (a cancelled "
      "or timed-out tool call, a restart) kills bwrap alone and the worker keeps running in its namespace, holding "
      "the GPU's memory and writing its results into the run after the server moved on"),
    M("m10-reads-sqlite-wal-unpinned", "sandbox", "mcp_server/rewards/read_events.py",
      '    return [path, path + "-wal", path + "-journal"]',
      '    return [path, path + "-journal"]',
      "a rubric in a SQLite database in WAL mode: rows changed after the verdict sit in rubric.db-wal (not yet "
      "checkpointed into the database file), which nothing pins: the reward scores training with the changed rubric "
      "and the gate and the trainer's check see no change"),
    M("m10-reads-import-not-replayed", "sandbox", "mcp_server/rewards/reads.py",
      "    if module in sys.modules:\n"
      "        for reads in list(_ACTIVE):\n"
      "            for path, pin in AT_IMPORT.get(module, {}).items():\n"
      "                _replay(reads, path, pin)\n"
      "        yield\n",
      "    if module in sys.modules:\n"
      "        yield\n",
      "in the long-lived worker, a second inspect_rewards (the reward module already imported by the first) records "
      "none of the files the module read at its import (a rubric loaded at module level): review.json and the "
      "verdict do not pin it, and the trainer, which imports it afresh, refuses to train ('never read when the "
      "rewards were reviewed'); an evaluate_model baseline likewise loses its graders' reads"),
    M("m10-reads-digest-cache-ctime", "sandbox", "mcp_server/rewards/reads.py",
      '"sha256": _digest(fd, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)}',
      '"sha256": _digest(fd, found.st_ino, found.st_size, found.st_mtime_ns)}',
      "a rubric rewritten in place at the same size with its mtime put back (touch -r, a tar extract) keeps the "
      "digest cached for its old content: the trainer's check at each reward call, and a later review in the same "
      "worker, read the new rubric as the reviewed one"),
    # runs: a resume patch of the entropy coefficient, the stop's step times, the ETA, the guard's record, a stop
    # whose save failed
    M("m10-runs-patch-entropy-adaptive-default", "runs", "mcp_server/training/resume_patch.py",
      'patch.get("use_adaptive_entropy", now("use_adaptive_entropy")):',
      'patch.get("use_adaptive_entropy"):',
      "a run launched with use_adaptive_entropy: true accepts resume_training's patch of entropy_coef (run.json "
      "records it as applied), and the checkpoint's entropy controller state replaces it: the patch does nothing, "
      "and config_hash's advice proposes that patch"),
    M("m10-runs-stop-wait-first-lines", "runs", "mcp_server/training/stopping.py",
      "        return run_progress(run).records[-STEP_WINDOW:]  # the trainer's signed lines alone",
      "        return run_progress(run).records[:STEP_WINDOW]  # the trainer's signed lines alone",
      "stop_training reads the run's first 20 logged steps, not its latest: a run whose steps grew from 30 s to 5 "
      "min is waited for 2 minutes ('its steps take up to 30 s') and left stopping, the wait counted from step 20's "
      "time; stop_result's step_time_s is the early steps'"),
    M("m10-runs-eta-floor-whole", "runs", "mcp_server/training/status.py",
      "    rest = max(steps_left - 1, 0) / speed",
      "    rest = max(steps_left, 0) / speed",
      "training_status's ETA never falls while a step runs: the floor is the whole of the steps left, so 'ETA 8.0 "
      "min' stays for the 5 minutes of a long step (issue 49's sixth walk)"),
    M("m10-runs-guard-record-unsigned", "runs", "mcp_server/training/status.py",
      "    guarded = signed_record(run, run.guard, derived.record) or {}  # the guard's own, of this launch",
      "    guarded = read_json_if_present(run.guard) or {}  # the guard's own, of this launch",
      "a hand-written (or an earlier launch's) train/logs/guard.json shows as the guard's: training_status lists its "
      "findings as live findings with their patches and says 'stopped by the guard: kl_explosion at step N'"),
    M("m10-runs-stop-failure-exit-only", "runs", "mcp_server/training/stopping.py",
      "    failure = stop_failure(run, after.record, after.exit_code) if graceful and not ended else None",
      "    failure = stop_failure(run, after.record, after.exit_code) if graceful and not ended and \\\n"
      "        after.exit_code not in (None, 0) else None",
      "a stop whose checkpoint save failed (not recorded in saves.jsonl, a file missing) while the trainer still "
      "exited 0 is reported 'stopped at step N with a checkpoint saved; resume_training continues it', graceful: "
      "true, no error (issue 48, round 8)"),
    # diagnosis: the progress log's clipped ratio, the schedule's rate record, a launched run's metrics with its
    # config moved, torch.save's full disk, a progress log copied out of its run
    # (torch-save-disk-full's text follows its line, which also reads torch 2.x's forms since: the same bug, torch's
    # miniz message dropped; these four killed by tables in tests/test_diagnosis_logs.py, branch kill10c: 4/4
    # caught --by-area, 2026-12-06 16:38-16:45, with tests/test_bad_input.py left out of the area for that run: its
    # test_a_damaged_run_file_is_one_line_and_the_other_runs_still_list[a list] fails unmutated on main, starting
    # bwrap unmarked)
    M("m10-diagnosis-clipped-ratio-unaliased", "diagnosis", "mcp_server/diagnosis/metrics.py",
      '    "clipped_ratio": "completions/clipped_ratio",\n',
      "",
      "a run's progress.jsonl logs clipped_ratio under the contract's name: diagnose_run on a run whose completions "
      "are cut at max_completion_length reads no completions/clipped_ratio, so it raises no truncation finding and "
      "proposes no max_completion_length patch"),
    M("m10-diagnosis-rate-begin-unsigned", "diagnosis", "mcp_server/diagnosis/rate_applied.py",
      "    if configured is None or not isinstance(begin, dict) or not valid_run(home, home.train_begin, begin):",
      "    if configured is None or not isinstance(begin, dict):",
      "a hand-written train/logs/train-begin.json (learning_rate 0.1) makes training_status and diagnose_run say "
      "'the trainer's schedule runs from learning_rate 0.1 ... the change did not act (resume with the patch "
      "again)'"),
    M("m10-diagnosis-moved-config-unsigned-metrics", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    return (run.config.is_file() or run.run_json.exists() or launch_record(run.dir) is not None\n",
      "    return (run.config.is_file() or run.run_json.exists()\n",
      "a launched run whose train/config.yaml and run.json were moved away (round 11, M1) is read as a TRL "
      "output_dir: a checkpoint's hand-edited trainer_state.json (kl 777) becomes its metrics, and diagnose_run "
      "raises kl_explosion with patches"),
    M("m10-diagnosis-torch-save-disk-full", "diagnosis", "mcp_server/diagnosis/environment.py",
      '|unexpected pos \\d+ vs \\d+|"\n                            r"PytorchStreamWriter failed writing"),',
      '|unexpected pos \\d+ vs \\d+"),',
      "a run that died saving optimizer.pt on a full disk (torch.save says only 'PytorchStreamWriter failed writing "
      "file data/0: file write failed') gets no disk_full finding from diagnose_run: no save_total_limit patch, no "
      "word that the checkpoint may be incomplete"),
    M("m10-diagnosis-copied-progress-as-run", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    return run if Path(os.path.abspath(run.progress)) == path else None",
      "    return run",
      "diagnose_run on a progress.jsonl copied out of its run (exports/run1/progress.jsonl) reads it as the progress "
      "log of the folder two levels up: 'cannot read ...: No such file' (or that folder's own log, every line "
      "dropped as unsigned) instead of the copy's metrics"),
    # ------------------------------------------------------------------ m11: an eleventh blind audit (issue 48)
    # Written from the product code alone (the tests unread) by someone who wrote neither the tests nor the
    # mutations above; 5 per area, none on a line an earlier mutation mutates. First run (default judging,
    # 2026-12-06 18:39-19:13, coverage map 871 s at load 7, 1983 s in all): 12/20 caught (gate 3/5, sandbox 3/5,
    # runs 4/5, diagnosis 2/5); survivors: gate-trained-model-absolute, sandbox-limits-after-module-code,
    # sandbox-native-folder-unwalked, runs-cache-link-unrefused, diagnosis-same-step-drops-first-line,
    # diagnosis-spike-one-value-level, diagnosis-null-metric-key-dropped; one error: gate-weight-kwargs-variant-
    # dropped gives pytest exit 4 by default (a node id of its judges is gone under the mutation: a row generated
    # from WEIGHT_KWARGS) and survives --by-area (gate's files, 234 s). Killed since by tables (kill11a, kill11b:
    # tests/test_gate_table.py's loading arguments read from transformers' own from_pretrained, the moved run's
    # model pins in test_gate_point_of_use.py, every Limits probe at the solution's import in test_sandbox_table.py,
    # folders given to a native reader in test_reward_reads_native.py, the launch gate's declared links in
    # test_run_tampering.py, tests/test_diagnosis_input_tables.py); each applied by hand and seen to fail.
    # gate: the trainer's patched pin and its samples' rows, the weight-choosing kwargs, the loader's workspace
    # root, the model pin of a moved run
    M("m11-gate-patched-unpinned-key", "gate", "mcp_server/inspection/trained.py",
      "            settings.update({k: json.loads(_canonical(v)) for k, v in patch.items() if k in settings})",
      "            settings.update({k: json.loads(_canonical(v)) for k, v in patch.items()})",
      "a guard-stopped run resumed with a patch that moves a pinned setting together with an unpinned one "
      "(temperature 0.7 and learning_rate 1e-6: pin_updates records the whole patch) is refused by its own trainer "
      "at start: the reviewed settings gain learning_rate, which the fingerprint never holds, so 'settings: ... "
      "(reviewed: ...)' and the resume never trains"),
    M("m11-gate-samples-columns-unchecked", "gate", "mcp_server/inspection/trained.py",
      "        if row is None or prompt_differs or _canonical(columns) != _canonical(sample.get(\"columns\")):",
      "        if row is None or prompt_differs:",
      "a samples.jsonl whose rows' other columns (the answer the reward graded against) are not the data that "
      "trains passes the trainer's check when its prompts are: the reviewer read scores against answers written by "
      "hand (or from other data), and the run trains on the real rows' answers with no refusal"),
    M("m11-gate-weight-kwargs-variant-dropped", "gate", "mcp_server/inspection/training_inputs.py",
      'WEIGHT_KWARGS = ("subfolder", "variant", "gguf_file", "use_safetensors")',
      'WEIGHT_KWARGS = ("subfolder", "gguf_file", "use_safetensors")',
      "model_init_kwargs variant: ema (or fp16) is neither passed to sampling's load nor recorded in the model pin: "
      "the samples reviewed come from the default weight file while the trainer loads the variant's, and the "
      "loaded-weights check, choosing files without the variant, compares the variant's tensors with the default "
      "file's (a refusal of every launch, or other weights trained than were sampled)"),
    M("m11-gate-loader-root-runs-only", "gate", "mcp_server/training/launch_gates.py",
      "    inside = inside_workspace(os.environ, str(runs_root().parent), str(run.dir))",
      "    inside = inside_workspace(os.environ, str(runs_root()), str(run.dir))",
      "LD_LIBRARY_PATH (or LD_PRELOAD) naming a folder of the workspace outside runs/ (<workspace>/libs) is no "
      "longer refused outright by launch_training and resume_training: with the verdict recorded from that shell "
      "(the loader pin matches) the workspace's libraries load into the training interpreter before its checks"),
    M("m11-gate-trained-model-absolute", "gate", "mcp_server/inspection/training_inputs.py",
      "    if path.is_absolute() and path.is_relative_to(run.dir.resolve()):\n"
      "        pin[\"model\"] = str(path.relative_to(run.dir.resolve()))\n",
      "",
      "a run whose model lies inside it (an SFT warm start under the run) is pinned by its absolute path in "
      "samples.meta.json's 'trained': moved or renamed after the verdict (runs/a -> runs/b), the gate still "
      "passes (its own pin is relative) but the trainer refuses every launch: 'model: .../runs/b/... (reviewed: "
      ".../runs/a/...)'"),
    # sandbox: the solution's in-place arguments, its exception's bases, its rlimits' moment, a native reader's
    # folder, this package's readers for the reward
    M("m11-sandbox-after-args-off-by-one", "sandbox", "mcp_server/rewards/harness_solution.py",
      '        reply["after"] = [[i, enc(a)] for i, a in enumerate(args) if type(a) in MUTABLE]',
      '        reply["after"] = [[i, enc(a)] for i, a in enumerate(args, 1) if type(a) in MUTABLE]',
      "a correct solution that changes a list argument in place (xs.sort(), xs.append(v), as the task asks) leaves "
      "the tests' copy unchanged (its new value is sent for argument 1, out of range, and dropped; with two list "
      "arguments the first's lands on the second): `assert xs == [1, 2, 3]` fails and the right solution scores 0"),
    M("m11-sandbox-raise-own-class-only", "sandbox", "mcp_server/rewards/harness_solution.py",
      '    return {"raise": [[c.__name__ for c in type(exc).__mro__][:20], message]}',
      '    return {"raise": [[c.__name__ for c in type(exc).__mro__][:1], message]}',
      "a correct solution that raises a subclass of what the tests expect (class InvalidInput(ValueError), "
      "json.JSONDecodeError) crosses by its own class name alone: no builtin, so a SolutionError, and "
      "`pytest.raises(ValueError)` / assertRaises(ValueError) fails: the right solution scores 0"),
    M("m11-sandbox-limits-after-module-code", "sandbox", "mcp_server/rewards/harness_solution.py",
      '    os.chdir("/tmp")\n'
      '    set_limits(load["limits"])\n'
      "    # The solution's CPU budget, below the wall-clock timeout: a busy loop dies of SIGPROF "
      "(whose default action\n"
      "    # ends the process) after cpu_s seconds of CPU, so it holds a core no longer than that.\n"
      '    signal.setitimer(signal.ITIMER_PROF, float(load["limits"].get("cpu_s") or 0))\n'
      '    if not load_solution(load["code"], objects, send):\n'
      "        return\n",
      '    os.chdir("/tmp")\n'
      "    # The solution's CPU budget, below the wall-clock timeout: a busy loop dies of SIGPROF "
      "(whose default action\n"
      "    # ends the process) after cpu_s seconds of CPU, so it holds a core no longer than that.\n"
      '    signal.setitimer(signal.ITIMER_PROF, float(load["limits"].get("cpu_s") or 0))\n'
      '    if not load_solution(load["code"], objects, send):\n'
      "        return\n"
      '    set_limits(load["limits"])\n',
      "the solution's rlimits are set only after its module's code ran: model-written code at module level (outside "
      "any function) forks past max_processes, opens descriptors past max_open_files and writes a file past "
      "max_file_mb; only the watch's sums, the cgroup and the wall clock still stop it"),
    M("m11-sandbox-native-folder-unwalked", "sandbox", "mcp_server/rewards/native_reads.py",
      "            if os.path.isdir(path):\n"
      "                out += [os.path.join(top, name) for top, _, names in os.walk(path) for name in sorted(names)]\n"
      "            else:\n"
      "                out.append(path)",
      "            out.append(path)",
      "a reward whose native reader is given a folder (pyarrow.parquet.read_table('rubric/'), a parquet data set of "
      "shards) records the folder alone ({kind: directory}), not its files: a shard edited after the verdict keeps "
      "the gate open, and the trainer's check at each reward call reads the new rubric as the reviewed one"),
    M("m11-sandbox-userfiles-read-unattributed", "sandbox", "mcp_server/rewards/read_frames.py",
      'READS_FOR_CALLER = frozenset({PACKAGE / "userfiles.py", PACKAGE / "dataset.py",',
      'READS_FOR_CALLER = frozenset({PACKAGE / "dataset.py",',
      "a reward that reads its rubric through mcp_server.userfiles.read_json or read_text (round 11's form) has that "
      "read counted as this package's own: review.json pins nothing, and a rubric edited after the verdict scores "
      "training with no refusal from the gate or the trainer"),
    # runs: the ledger's line for a save made twice, a file planted in a checkpoint, a resume at max_steps, a hard
    # link in train/logs, <run>/cache as a link
    M("m11-runs-ledger-first-save", "runs", "mcp_server/training/trainer/digest.py",
      "    return found[-1] if found else None",
      "    return found[0] if found else None",
      "a checkpoint (or the final model) saved twice under one name (a guard-stopped run resumed from an earlier "
      "checkpoint retrains through checkpoint-20 and overwrites it; a finished run resumed with a larger max_steps "
      "saves its final model again) is judged by the ledger's first line: resume_training refuses it "
      "('model.safetensors is not the file saved'), and promotion and export refuse the new final model"),
    M("m11-runs-checkpoint-extra-file-allowed", "runs", "mcp_server/training/trainer/digest.py",
      '    problems += [f"{name} was not written by the save" for name in present if name not in files]\n',
      "",
      "a file planted in a checkpoint after its save (an adapter_config.json and adapter_model.safetensors, a "
      "custom-code module, a tokenizer file) is not refused: resume_training, promote_checkpoint and export load "
      "weights and code the run never wrote"),
    M("m11-runs-resume-at-max-steps", "runs", "mcp_server/training/launch.py",
      "and step is not None and step >= planned:  # never past max_steps",
      "and step is not None and step > planned:  # never past max_steps",
      "resume_training on a run whose latest checkpoint is at max_steps (checkpoint-100 of 100) is not refused with "
      "the way on (a patch raising max_steps): the trainer starts, loads the model, trains nothing, and the resume "
      "ends as if it had continued the run"),
    M("m11-runs-hard-link-two-names", "runs", "mcp_server/training/trainer/written.py",
      "    return \"shared\" if stat.S_ISREG(info.st_mode) and info.st_nlink > 1 else None",
      "    return \"shared\" if stat.S_ISREG(info.st_mode) and info.st_nlink > 2 else None",
      "`ln ~/.bashrc train/logs/stdout.log` (two names of one file) passes the logs gate: the launched or resumed "
      "training appends its whole output to ~/.bashrc; only a file with three or more names is refused"),
    M("m11-runs-cache-link-unrefused", "runs", "mcp_server/training/trainer/written.py",
      '    Written("cache", True,',  # re-anchored: the declaration became written.WRITTEN (round 19)
      '    Written("logs", True,',  # cache/ no longer declared
      "<run>/cache as a link to a folder outside the workspace (planted in a stopped run, or unpacked with it) passes "
      "the logs gate: launch.sh points the datasets and matplotlib caches there, and training writes the rows' arrow "
      "copy outside the workspace, over what that folder holds"),
    # diagnosis: a step logged twice in a row, an infinite KL, logged zeros, the first grad-norm spike, a null
    # metric (each read from the log as written)
    M("m11-diagnosis-same-step-drops-first-line", "diagnosis", "mcp_server/diagnosis/metrics.py",
      '            if restarts and last is not None and row["step"] < last:',
      '            if restarts and last is not None and row["step"] <= last:',
      "a step written twice in a row in a run's progress.jsonl (its metrics over two lines) is read as a restart at "
      "that step: the first line's metrics that the second lacks are dropped (a loss: NaN followed by a line of "
      "rewards for the same step gives no nan_loss finding)"),
    M("m11-diagnosis-kl-infinity-unseen", "diagnosis", "mcp_server/diagnosis/divergence.py",
      "    bad = next(((s, v) for s, v in kl if not math.isfinite(v)), None)",
      "    bad = next(((s, v) for s, v in kl if math.isnan(v)), None)",
      "a run whose kl reached Infinity (TRL writes Infinity, or a float32 overflow read as one) while its finite kl "
      "values stayed under the warning gets no kl_explosion finding: diagnose_run says nothing of the runaway KL and "
      "proposes no beta patch"),
    M("m11-diagnosis-zero-values-dropped", "diagnosis", "mcp_server/diagnosis/metrics.py",
      '        return [(r["step"], r[name]) for r in self.rows if r.get(name) is not None]',
      '        return [(r["step"], r[name]) for r in self.rows if r.get(name)]',
      "every logged 0.0 is dropped from the series diagnosis reads: a run whose every completion scores 0 (reward "
      "0.0, reward_std 0.0 at each step) gets no 'Every completion scores 0 ... SFT first' cause, and where no "
      "frac_reward_zero_std is logged (older TRL, a CSV export) no no_reward_signal finding at all"),
    M("m11-diagnosis-spike-one-value-level", "diagnosis", "mcp_server/diagnosis/context.py",
      "            level = statistics.median(history[-10:]) if len(history) >= 2 else None",
      "            level = statistics.median(history[-10:]) if len(history) >= 1 else None",
      "a run whose second logged grad_norm is over 10x its first and at least 1.0 (a first step of mostly "
      "zero-advantage groups: 0.08, then 1.2) gets a grad_norm_spike warning and reads as diverged: diagnose_run "
      "proposes lowering the learning rate of a healthy run, and other findings escalate to errors"),
    M("m11-diagnosis-null-metric-key-dropped", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "        if number is not None or name not in row:",
      "        if number is not None:",
      "a log whose reward is null at every step (no reward function scored anything; TRL writes null for a window "
      "of NaNs, and a log without per-function rewards/ columns keeps it null) loses the key: no signal_lost error "
      "(the guard's stop for a run that learns nothing), and diagnose_run reads it as a run that logs no reward"),
    # ------------------------------------------------------------------ m12: a twelfth blind audit (issue 48)
    # Written from the product code and docs alone (the tests unread), 5 per area, each checked non-equivalent by a
    # reproducer on the original and the mutant (/tmp/m12, base 0422123); judged by hand with each area's files:
    # 17/20 caught (gate 4/5, sandbox 4/5, runs 5/5, diagnosis 4/5). Survivors: gate-hidden-model-file-unpinned,
    # sandbox-first-fenced-block, diagnosis-flat-also-falling; killed since by tables (kill12: every form of a file
    # in a pinned tree in tests/test_gate_table.py, the fenced-block table in tests/test_rewards.py run through the
    # reward in tests/test_sandbox.py, the reward-trend table in tests/test_diagnosis_input_tables.py), each applied
    # by hand and seen to fail. m12-gate-samples-columns-unchecked is m11-gate-samples-columns-unchecked again (the
    # same line and change, chosen blind twice): kept, as the audit's own count.
    M("m12-gate-pass-tie-allowed", "gate", "mcp_server/inspection/gate.py",
      "    if disagree and disagree >= agree:\n",
      "    if disagree and disagree > agree:\n",
      "a pass whose per-sample verdicts disagree with exactly half the scores (48 of 96) is recorded: the gate "
      "opens on a reward the reviewer found wrong as often as right, where it refused ('a pass that disagrees with "
      "48 of the 96 scores is a fail')"),
    M("m12-gate-hidden-model-file-unpinned", "gate", "mcp_server/inspection/pins.py",
      '    return sorted(p for p in path.rglob("*") if p.is_file())\n',
      '    return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))\n',
      "a hidden file added to (or changed in) the model folder after the verdict (warm-start/.hidden_config.json) "
      "leaves the gate open: the model pin skips names starting with '.', where the gate closed ('the model "
      "changed')"),
    M("m12-gate-review-jsonl-unchecked", "gate", "mcp_server/inspection/gate.py",
      '    for path, key in ((run.review_md, "review_md_sha256"), (run.review_jsonl, "review_jsonl_sha256")):\n',
      '    for path, key in ((run.review_md, "review_md_sha256"),):\n',
      "review.jsonl edited after the review (a line appended) still backs the verdict: the gate opens, where it "
      "closed ('review.jsonl is not the sheet inspect_rewards wrote')"),
    M("m12-gate-samples-columns-unchecked", "gate", "mcp_server/inspection/trained.py",
      '        if row is None or prompt_differs or _canonical(columns) != _canonical(sample.get("columns")):\n',
      "        if row is None or prompt_differs:\n",
      "the trainer's check of the reviewed samples against the rows that train passes samples whose other columns "
      "(the answer graded against) are not the training rows' (the same line and change as "
      "m11-gate-samples-columns-unchecked: the m12 audit, written blind, chose it again)"),
    M("m12-gate-sampling-settings-unpinned", "gate", "mcp_server/inspection/pins.py",
      '        "sampling": {k: config.get(k) for k in SAMPLING_KEYS},\n',
      "",
      "a sampling setting changed in train/config.yaml after the verdict (temperature: 1.5) leaves the gate open, "
      "where it closed ('the sampling settings in train/config.yaml changed')"),
    M("m12-sandbox-fsize-kib", "sandbox", "mcp_server/rewards/sandbox.py",
      '            "cpu": max(1, int(limits.timeout_s + 0.999)), "fsize": limits.max_file_mb * 1024 * 1024,\n',
      '            "cpu": max(1, int(limits.timeout_s + 0.999)), "fsize": limits.max_file_mb * 1024,\n',
      "the solution's file-size limit is max_file_mb KiB, not MiB: a solution writing a 1 MB file fails ('File too "
      "large') and scores 0 where it passed"),
    M("m12-sandbox-no-tests-ran-passes", "sandbox", "mcp_server/rewards/harness.py",
      "    if not count and not top:\n",
      "    if False:\n",
      "tests that define no test and run no assert ('x = f()') score 1.0 where they failed ('no tests ran')"),
    M("m12-sandbox-generator-test-ran", "sandbox", "mcp_server/rewards/harness_tests.py",
      "NEVER_RAN = (types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)\n",
      "NEVER_RAN = (types.CoroutineType, types.AsyncGeneratorType)\n",
      "a test written as a generator (its body never runs: def test_f(): yield; assert ...) passes, where it "
      "failed ('an async def or a generator')"),
    M("m12-sandbox-shares-net", "sandbox", "mcp_server/rewards/sandbox_command.py",
      '        "--unshare-all",\n',
      '        "--unshare-all",\n        "--share-net",\n',
      "the sandbox shares the host's network: a solution reaches a server listening on the host's 127.0.0.1"),
    M("m12-sandbox-first-fenced-block", "sandbox", "mcp_server/rewards/code.py",
      "    return blocks[-1] if blocks else text\n",
      "    return blocks[0] if blocks else text\n",
      "a completion with a wrong ```python block and then its fixed one scores the first (0.0), where the docs "
      "score the last ```python block (1.0)"),
    M("m12-runs-speed-first-steps", "runs", "mcp_server/training/status.py",
      '    times = sorted(t for t in (_seconds(l.get("step_time")) for l in lines[-STEP_TIMES:]) if t and t > 0)\n',
      '    times = sorted(t for t in (_seconds(l.get("step_time")) for l in lines[:STEP_TIMES]) if t and t > 0)\n',
      "training-status's speed and ETA come from the run's first STEP_TIMES step times, not its latest: a run "
      "whose first steps were slow reads 10x slower than it is"),
    M("m12-runs-final-step-short", "runs", "mcp_server/training/runrecord.py",
      "    if isinstance(planned, int) and (not isinstance(step, int) or step < planned):\n",
      "    if isinstance(planned, int) and (not isinstance(step, int) or step <= planned):\n",
      "a run that reached its planned last step reads as failed: 'the final save is at step 4, short of the 4 "
      "steps' (training-status on the finished demo run)"),
    M("m12-runs-log-tail-head", "runs", "mcp_server/training/runstate.py",
      "    return [line for line in out if line.strip()][-lines:]\n",
      "    return [line for line in out if line.strip()][:lines]\n",
      "training-status --log-lines N shows the log's first N lines (the launch banner), not its last"),
    M("m12-runs-link-listed-twice", "runs", "mcp_server/training/status.py",
      "        if real in seen:\n"
      '            notes.append(f"{escaped_name(run.name)} not listed: a link to {seen[real]}, listed as itself")\n'
      "            continue\n",
      "",
      "a link in runs/ to another run (runs/alias) is listed as a run of its own beside the run, where list-runs "
      "noted it and listed the run once"),
    M("m12-runs-checkpoint-sha-unchecked", "runs", "mcp_server/training/trainer/digest.py",
      '        elif contents and sha256_file(path) != saved["sha256"]:\n',
      '        elif False and contents and sha256_file(path) != saved["sha256"]:\n',
      "a checkpoint's weights swapped for others of the same size (one byte flipped) load and evaluate: "
      "promote-checkpoint no longer refuses 'model.safetensors is not the file saved'"),
    M("m12-diagnosis-export-train-prefix-kept", "diagnosis", "mcp_server/diagnosis/metrics.py",
      '    return key[len("train/"):] if key.startswith("train/") else key\n',
      "    return key\n",
      "a W&B export (train/reward, train/frac_reward_zero_std = 0.96 ...) reads no metric diagnosis knows: "
      "'healthy: no problems in 30 logged steps' where it was no_reward_signal (an error)"),
    M("m12-diagnosis-no-signal-either-share", "diagnosis", "mcp_server/diagnosis/signal.py",
      "    if share < ZERO_STD_ERROR and late < ZERO_STD_WARN:\n",
      "    if share < ZERO_STD_ERROR or late < ZERO_STD_WARN:\n",
      "a run whose zero-spread share rises to 0.95 in its second half (0.55 then 0.95) reads healthy where it got "
      "no_reward_signal (a warning)"),
    M("m12-diagnosis-flat-also-falling", "diagnosis", "mcp_server/diagnosis/signal.py",
      "    if change >= 2 * noise or change >= spread or change <= -2 * noise:\n",
      "    if change >= 2 * noise or change >= spread:\n",
      "a falling reward (0.87 -> 0.30 over 30 steps) is reported reward_falling and also reward_flat, with the "
      "flat finding's patch doubling the learning rate"),
    M("m12-diagnosis-log-dict-at-column-zero", "diagnosis", "mcp_server/diagnosis/metrics.py",
      '        if start < 0 or not line.rstrip().endswith("}"):\n',
      '        if start <= 0 or not line.rstrip().endswith("}"):\n',
      "a stdout log whose printed metric dicts start at the line's first column (as a Trainer prints them) reads "
      "no step: 'no problems found in the log (no metrics were logged)'"),
    M("m12-diagnosis-too-early-healthy", "diagnosis", "mcp_server/diagnosis/diagnose.py",
      "    elif run.rows and ctx.too_early:  # a rule with too few points is not a clean bill (issue 49)\n",
      "    elif False and run.rows and ctx.too_early:  # a rule with too few points is not a clean bill (issue 49)\n",
      "a run of 3 logged steps with 40% of completions clipped reads 'healthy: no problems in 3 logged steps' "
      "where it was 'too early to judge'"),
    # ------------------------------------------------------------------ m13: a thirteenth blind audit (issue 48)
    # Written from the product code alone (the tests unread), 5 per area, each checked to change what a user sees by
    # a reproducer on the original and the mutant (/tmp/m13, base 0f88558); judged by hand with each area's files:
    # 16/20 caught (gate 5/5, sandbox 4/5, runs 3/5, diagnosis 4/5). Survivors, killed since by tables (kill13), each
    # applied by hand and seen to fail: m13-sandbox-cpu-s-not-passed by tests/test_reward_factory_params.py (every
    # parameter of a reward that runs the sandbox, probed on both sides), m13-runs-empty-folder-is-launch-evidence by
    # tests/test_launch_evidence.py (every place of launch evidence x every form), m13-runs-slurm-oom-not-failed by
    # tests/test_slurm_states.py (every SLURM job state x scontrol/sacct text; slow: the lane's fast judges do not run
    # it), m13-diagnosis-nccl-timeout-not-doubled by tests/test_diagnosis_patches.py (every computed patch value on
    # both sides of its bounds). Four repeat m12's lines and changes (pass-tie-allowed, review-jsonl-unchecked,
    # generator-test-ran, first-fenced-block: chosen blind again): kept, as the audit's own count.
    M("m13-gate-pass-tie-allowed", "gate", "mcp_server/inspection/gate.py",
      "    if disagree and disagree >= agree:\n",
      "    if disagree and disagree > agree:\n",
      "a pass whose per-sample verdicts disagree with exactly half of the scores (2 of 4) is recorded, where it was "
      "refused ('is a fail')"),
    M("m13-gate-resume-from-output-dir-itself", "gate", "mcp_server/inspection/trained.py",
      '    if str(resume).lower() != "true" and (where == output or not where.is_relative_to(output)):\n',
      '    if str(resume).lower() != "true" and not where.is_relative_to(output):\n',
      "resume_from_checkpoint set to the output_dir itself (no checkpoint-N) passes the trainer's point-of-use "
      "check, where it was refused (exit 3)"),
    M("m13-gate-attempt-logs-pinned", "gate", "mcp_server/inspection/pins.py",
      '        if any(parts[0] == d or (d.endswith("-") and parts[0].startswith(d)) for d in TRAIN_DIRS_UNPINNED) or '
      "any(\n",
      "        if any(parts[0] == d for d in TRAIN_DIRS_UNPINNED) or any(\n",
      "train/logs-attempt-<n>/ is pinned as part of train/: the gate closes ('train/ changed') after a relaunch "
      "archives the earlier attempt's logs"),
    M("m13-gate-data-files-split-keys-pinned", "gate", "mcp_server/inspection/pins.py",
      "        return [f for value in files.values() for f in _data_files(value)]\n",
      "        return [f for value in files for f in _data_files(value)]\n",
      "data_files given as a mapping of splits ({train: data.jsonl}) is pinned by its split names (a hub name "
      "'train'), not its files: the data edited after the verdict leaves the gate open"),
    M("m13-gate-review-jsonl-unchecked", "gate", "mcp_server/inspection/gate.py",
      '    for path, key in ((run.review_md, "review_md_sha256"), (run.review_jsonl, "review_jsonl_sha256")):\n',
      '    for path, key in ((run.review_md, "review_md_sha256"),):\n',
      "a hand-edited review.jsonl still backs the verdict: the gate opens, where it closed ('not the sheet "
      "inspect_rewards wrote')"),
    M("m13-sandbox-generator-test-ran", "sandbox", "mcp_server/rewards/harness_tests.py",
      "NEVER_RAN = (types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)\n",
      "NEVER_RAN = (types.CoroutineType, types.AsyncGeneratorType)\n",
      "a test written as a generator (its body never runs) scores a pass, where it failed"),
    M("m13-sandbox-stop-iteration-kept", "sandbox", "mcp_server/rewards/harness.py",
      '    if names and names[0] in ("StopIteration", "StopAsyncIteration"):\n',
      '    if names and names[0] == "StopAsyncIteration":\n',
      "`assert all(map(f, xs))` with f raising StopIteration ends the map early and passes, where the StopIteration "
      "was a RuntimeError that failed the run"),
    M("m13-sandbox-first-fenced-block", "sandbox", "mcp_server/rewards/code.py",
      "    return blocks[-1] if blocks else text\n",
      "    return blocks[0] if blocks else text\n",
      "a completion with a draft ```python block and then its final one is scored on the draft: 1.0 -> 0.0"),
    M("m13-sandbox-unexpected-success-passes", "sandbox", "mcp_server/rewards/harness_tests.py",
      "        if result.unexpectedSuccesses:\n"
      '            raise AssertionError(f"{method}: unexpected success of an expected failure")\n',
      "",
      "an @expectedFailure test that succeeds counts as a pass, where unittest's wasSuccessful() fails it"),
    M("m13-sandbox-cpu-s-not-passed", "sandbox", "mcp_server/rewards/code.py",
      "                    max_output_bytes=int(max_output_bytes), cpu_s=float(cpu_s))\n",
      "                    max_output_bytes=int(max_output_bytes))\n",
      "code_execution_reward's cpu_s is validated, then ignored (the 0.5 s default applies): with cpu_s 5 an honest "
      "solution using 1 s of CPU scores 0.0, where it scored 1.0"),
    M("m13-runs-output-dir-run-root-accepted", "runs", "mcp_server/runs.py",
      "    if where != here and where.is_relative_to(here):\n",
      "    if where.is_relative_to(here):\n",
      "output_dir '.' (checkpoints written into the run directory's root) is accepted, where it was refused as not a "
      "folder of the run"),
    M("m13-runs-empty-folder-is-launch-evidence", "runs", "mcp_server/runs.py",
      '    return folder.is_dir() and any(p.is_file() for p in folder.rglob("*"))\n',
      "    return folder.is_dir() and any(folder.iterdir())\n",
      "the empty checkpoints/completions/ GRPOTrainer makes before its first step (or an empty train/logs/a/) reads "
      "as a launch: emit-config --run-dir into the run and a fresh launch are refused"),
    M("m13-runs-checkpoints-by-name", "runs", "mcp_server/training/runrecord.py",
      "    return [path for _, path in sorted(found)]\n",
      "    return [path for _, path in sorted(found, key=lambda item: item[1].name)]\n",
      "checkpoints are ordered by name: checkpoint-9 is the latest over checkpoint-10, and resume picks it"),
    M("m13-runs-median-upper", "runs", "mcp_server/training/status.py",
      "        return 1.0 / (times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2)\n",
      "        return 1.0 / times[middle]\n",
      "with an even count of step times the median is the upper one: step times [10, 30] give 1/30 steps/s, not 1/20 "
      "(an ETA 50% too long)"),
    M("m13-runs-slurm-oom-not-failed", "runs", "mcp_server/training/launchers/slurm/job.py",
      'FAILED = ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")\n',
      'FAILED = ("FAILED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE")\n',
      "a SLURM job the scheduler ended OUT_OF_MEMORY reads 'unknown' (its nodes not named), where it read 'failed' "
      "on its node"),
    M("m13-diagnosis-export-name-split", "diagnosis", "mcp_server/diagnosis/metrics.py",
      '        key = key.rsplit(" - ", 1)[1]\n',
      '        key = key.split(" - ", 1)[1]\n',
      "a W&B export column 'grpo - qwen - train/reward' reads as 'qwen - train/reward': the run's reward is lost to "
      "diagnosis"),
    M("m13-diagnosis-zero-grad-in-level", "diagnosis", "mcp_server/diagnosis/context.py",
      "            if value > 0:\n"
      "                history.append(value)\n",
      "            history.append(value)\n",
      "a zero grad_norm (a batch without advantage) enters the running level: a false grad_norm_spike warning once "
      "training resumes"),
    M("m13-diagnosis-kl-warn-floor-dropped", "diagnosis", "mcp_server/diagnosis/context.py",
      "    warn = max(KL_WARN * beta / KL_REF_BETA, KL_WARN_FLOOR)\n",
      "    warn = KL_WARN * beta / KL_REF_BETA\n",
      "at beta 0.001 a kl of 0.06 is a kl_explosion warning, where the bound's floor left it quiet"),
    M("m13-diagnosis-signal-lost-first-log", "diagnosis", "mcp_server/diagnosis/signal.py",
      '    rows = [r for r in ctx.run.rows if r["step"] != first]\n',
      "    rows = list(ctx.run.rows)\n",
      "two logs without spread or gradient give signal_lost (an error, the guard's stop), where the first log "
      "precedes any update and is not counted"),
    M("m13-diagnosis-nccl-timeout-not-doubled", "diagnosis", "mcp_server/diagnosis/environment.py",
      "            {FIELD.ddp_timeout: int(max(2 * float(timeout), 3600))}))\n",
      "            {FIELD.ddp_timeout: int(max(float(timeout), 3600))}))\n",
      "the NCCL-timeout patch sets ddp_timeout 7200 to 7200, not 14400 ('the patch doubles it'); at TRL's default "
      "1800 both give the 3600 floor"),
    # ------------------------------------------------------------------ m14: a fourteenth blind audit (issue 48)
    # Written blind as m13 was (/tmp/m14, base c8c9ab1), 20 mutations over four areas: 14/20 caught. The six
    # survivors below, killed since by tables (m14kill), each applied by hand and seen to fail: the fence tags written
    # out in tests/test_rewards.py (no longer read from PYTHON_TAGS), list_runs' order through the CLI and MCP
    # (tests/test_run_list_order.py), every declared limit at and one over it (tests/test_input_limits.py, and the
    # wire's in tests/test_server_inputs.py), every CLI switch absent and given (tests/test_cli_switches.py), every
    # LLM_FINETUNING_READ_ONLY value x the tool list (tests/test_tool_registry.py), and every reply kind followed by
    # the end of input, and its id reused (tests/test_server_inputs.py). The read-only values moved to
    # toolspec.READ_ONLY_OFF since ("off" added): the mutation drops "0" from it as the audit's did from the tuple.
    M("m14-sandbox-py-fence-not-python", "sandbox", "mcp_server/rewards/code.py",
      'PYTHON_TAGS = ("", "python", "python3", "py")\n',
      'PYTHON_TAGS = ("", "python", "python3")\n',
      "a completion's ```py block is no code: the whole text is run and an honest solution scores 0.0, where it "
      "scored 1.0"),
    M("m14-runs-list-oldest-first", "runs", "mcp_server/runs.py",
      "    return [Run(p) for p in sorted(dirs, key=lambda p: p.name, reverse=True)]\n",
      "    return [Run(p) for p in sorted(dirs, key=lambda p: p.name)]\n",
      "list_runs lists the oldest run first, where its result says newest first"),
    M("m14-doors-name-max-refused", "doors", "mcp_server/inputs.py",
      "    if len(longest) > NAME_MAX:\n",
      "    if len(longest) >= NAME_MAX:\n",
      "a run, file or folder name of exactly 255 bytes (legal everywhere) is refused as too long"),
    M("m14-doors-inverted-switch-absent-off", "doors", "mcp_server/cli_flags.py",
      '        if value is None or (value is False and read in ("switch", "invert")):\n',
      '        if value is None or (value is False and read in ("switch",)):\n',
      "an inverted switch left out turns its field off: validate-config without --no-rehearse skips the "
      "rehearsal, plan-memory without --no-validate skips the lever checks, launch-training without --no-submit "
      "does not submit"),
    M("m14-doors-read-only-zero-on", "doors", "mcp_server/toolspec.py",
      'READ_ONLY_OFF = ("", "0", "false", "no", "off")\n',
      'READ_ONLY_OFF = ("", "false", "no", "off")\n',
      "LLM_FINETUNING_READ_ONLY=0 serves the read-only tool list (and runs no reward module), where 0 is off"),
    M("m14-doors-error-reply-not-an-answer", "doors", "mcp_server/jsonrpc.py",
      "        if isinstance(item.message, (types.JSONRPCResponse, types.JSONRPCError)):\n",
      "        if isinstance(item.message, types.JSONRPCResponse):\n",
      "after a request answered with an error (an unknown method), the end of input never ends the server, and the "
      "same id sent again is refused as still in flight"),
    # ------------------------------------------------------------------ m15: a fifteenth blind audit (issue 48)
    # Written from the product code alone (/tmp/m15, base 95dbbae), 20 mutations over the four contracts issue 48's
    # done-when names (gate, sandbox, runs, diagnosis inputs): 19/20 caught. The survivor (the later of two lines of
    # the same highest step: a resume re-logs its step) is killed since by
    # tests/test_unsigned_text_never_outranks.py's re-logged row, applied by hand and seen to fail.
    M("m15-gate-pass-half-disagree", "gate", "mcp_server/inspection/gate.py",
      "    if disagree and disagree >= agree:\n",
      "    if disagree and disagree > agree:\n",
      "record_inspection_verdict accepts a pass that disagrees with exactly half the reviewed scores (2 of 4), "
      "where it refused it as a fail"),
    M("m15-gate-resume-unpinned", "gate", "mcp_server/config/fields.py",
      '    "saving": ("output_dir", "save_steps",',
      '    "saving": ("output_dir", "resume_from_checkpoint", "save_steps",',
      "resume_from_checkpoint set in train/config.yaml after the verdict (other weights train) leaves the gate "
      "open: the verdict no longer pins it"),
    M("m15-gate-data-dir-shallow", "gate", "mcp_server/inspection/pins.py",
      '        files = sorted(p for p in path.rglob("*") if p.is_file())\n'
      '        return {"source": str(path.resolve()), "split": split,',
      '        files = sorted(p for p in path.glob("*") if p.is_file())\n'
      '        return {"source": str(path.resolve()), "split": split,',
      "a data directory's files in subfolders (data/train/part-0.jsonl) are not pinned: editing them after the "
      "verdict leaves the gate open"),
    M("m15-gate-weights-any-list", "gate", "mcp_server/inspection/gate.py",
      "    if configured is None or (isinstance(configured, list) and [float(w) if isinstance(w, (int, float)) else w\n"
      "                                                                 for w in configured] == reviewed):\n",
      "    if configured is None or isinstance(configured, list):\n",
      "train/config.yaml's reward_weights that differ from train/rewards.json's (what the review scored with) no "
      "longer close the gate nor refuse a verdict"),
    M("m15-gate-sample-columns-unchecked", "gate", "mcp_server/inspection/trained.py",
      '        if row is None or prompt_differs or _canonical(columns) != _canonical(sample.get("columns")):\n',
      "        if row is None or prompt_differs:\n",
      "the trainer's point-of-use check accepts reviewed samples whose columns (the answer the reward checks) are "
      "not their row's in the data that trains"),
    M("m15-sandbox-skipped-case-counts", "sandbox", "mcp_server/rewards/harness_tests.py",
      "        return SKIPPED if result.skipped else None\n",
      "        return None\n",
      "a unittest.TestCase whose every test is skipped counts as tests run: the completion scores as passing "
      "although no test ran"),
    M("m15-sandbox-async-test-runs", "sandbox", "mcp_server/rewards/harness_tests.py",
      "NEVER_RAN = (types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)\n",
      "NEVER_RAN = (types.GeneratorType, types.AsyncGeneratorType)\n",
      "an `async def test_...` (its body never runs) counts as a passed test: every completion passes such tests"),
    M("m15-sandbox-fsize-kib", "sandbox", "mcp_server/rewards/sandbox.py",
      '"fsize": limits.max_file_mb * 1024 * 1024,',
      '"fsize": limits.max_file_mb * 1024,',
      "the file-size limit is max_file_mb KiB, not MiB: an honest solution writing a 1 MB file fails (File too "
      "large) under the default 16 MB limit"),
    M("m15-sandbox-output-per-chunk", "sandbox", "mcp_server/rewards/sandbox.py",
      "            size += len(chunk)\n",
      "            size = len(chunk)\n",
      "the output cap compares each read's size, not the total: a solution printing megabytes in small writes is "
      "no flood and can pass (its output read whole into memory)"),
    M("m15-sandbox-nofile-wrong-limit", "sandbox", "mcp_server/rewards/harness_wire.py",
      '("RLIMIT_NOFILE", limits["nofile"])',
      '("RLIMIT_NOFILE", limits["nproc"])',
      "the open-files limit is the process limit (10), not max_open_files (64): a solution that opens 5 files "
      "fails with Too many open files"),
    M("m15-runs-checkpoint-text-order", "runs", "mcp_server/training/runrecord.py",
      "            found.append((int(suffix), path))\n",
      "            found.append((suffix, path))\n",
      "with checkpoint-9 and checkpoint-10 the latest is checkpoint-9: status lists it last, resume and stop name "
      "it as the latest"),
    M("m15-runs-guard-resume-at-failure", "runs", "mcp_server/training/resume_patch.py",
      '    before = [p for p in done if int(p.name.split("-")[-1]) < stopped["step"]]\n',
      '    before = [p for p in done if int(p.name.split("-")[-1]) <= stopped["step"]]\n',
      "after a guard stop at step N, a patched resume_training resumes from checkpoint-N, the save that holds the "
      "failure, not the one before it"),
    M("m15-runs-stop-reads-running", "runs", "mcp_server/training/launchers/local/process_state.py",
      '        state = "stopping" if stop_requested else "running" if begun else "starting"\n',
      '        state = "running" if begun else "stopping" if stop_requested else "starting"\n',
      "a training run asked to stop reads 'running' (not 'stopping') in training_status and list_runs until it "
      "ends"),
    M("m15-runs-crash-after-save-succeeded", "runs", "mcp_server/training/launchers/local/process_state.py",
      "    if exit_code not in (None, 0):\n        return \"failed\", note  # it saved the model",
      "    if exit_code is not None and exit_code < 0:\n        return \"failed\", note  # it saved the model",
      "a run that saved its final model and then exited with code 1 reads 'succeeded' (promotable), not failed"),
    M("m15-runs-relogged-step-first-wins", "runs", "mcp_server/training/runrecord.py",
      "    return max(enumerate(lines), key=lambda item: (_line_step(item[1]), item[0]))[1]\n",
      "    return max(enumerate(lines), key=lambda item: _line_step(item[1]))[1]\n",
      "a step logged twice (a resume re-logging it) shows the first attempt's line as the latest in training_status"),
    M("m15-diagnosis-resume-not-restart", "diagnosis", "mcp_server/diagnosis/metrics.py",
      '    rows = rows_from_records(records, path, restarts=kind == "progress_jsonl")\n',
      '    rows = rows_from_records(records, path, restarts=kind == "jsonl")\n',
      "a resumed run's progress.jsonl keeps what the abandoned attempt logged after the resume point (its NaN "
      "steps become findings of the run)"),
    M("m15-diagnosis-steps-unsorted", "diagnosis", "mcp_server/diagnosis/metrics.py",
      "    return [rows[s] for s in sorted(rows)]\n",
      "    return list(rows.values())\n",
      "an export whose rows are out of step order is read in file order: first/last, trends and evidence steps "
      "are wrong"),
    M("m15-diagnosis-null-reward-not-lost", "diagnosis", "mcp_server/diagnosis/signal.py",
      '    return "reward" in row and (reward is None or not math.isfinite(reward))\n',
      '    return reward is not None and not math.isfinite(reward)\n',
      "a run whose reward is logged null at every step (no reward scored anything) gets no signal_lost finding"),
    M("m15-diagnosis-printed-inf-dropped", "diagnosis", "mcp_server/diagnosis/metrics.py",
      'PRINTED_NONFINITE = {"nan": math.nan, "inf": math.inf}\n',
      'PRINTED_NONFINITE = {"nan": math.nan}\n',
      "a stdout log printing a bare `inf` (loss or grad_norm) loses that line: the overflow is never read, no "
      "divergence finding"),
    M("m15-diagnosis-zeros-dropped", "diagnosis", "mcp_server/diagnosis/metrics.py",
      '        return [(r["step"], r[name]) for r in self.rows if r.get(name) is not None]\n',
      '        return [(r["step"], r[name]) for r in self.rows if r.get(name)]\n',
      "metrics logged as 0 (reward 0, grad_norm 0, frac_reward_zero_std 0) vanish from every series the rules "
      "read: zero-reward runs and zero-gradient steps are misjudged"),


)


# ---------------------------------------------------------------------- applying
class Stale(Exception):
    """A mutation whose text is not found exactly once: the code moved."""


def mutated_text(root: Path, mutation: Mutation) -> str:
    path = root / mutation.path
    if not path.is_file():
        raise Stale(f"{mutation.id}: {mutation.path} does not exist")
    text = path.read_text(encoding="utf-8")
    found = text.count(mutation.old)
    if found != 1:
        raise Stale(f"{mutation.id}: its text is found {found} times in {mutation.path} (expected once): "
                    f"{mutation.old.strip()[:80]!r}")
    return text.replace(mutation.old, mutation.new, 1)


def stale(root: Path, mutations=MUTATIONS, areas=None, modules=None) -> list[str]:
    """Why each mutation (or an area's or module's test file) no longer applies to the tree at `root`; empty when
    all do."""
    areas = AREAS if areas is None else areas
    modules = MODULE_TESTS if modules is None else modules
    problems = []
    for m in mutations:
        if m.area not in areas:
            problems.append(f"{m.id}: unknown area {m.area!r}")
            continue
        try:
            mutated_text(root, m)
        except Stale as exc:
            problems.append(str(exc))
    ids = [m.id for m in mutations]
    problems += [f"{i}: declared twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for area in areas.values():
        problems += [f"area {area.name}: no test file {t}" for t in area.tests if not (root / t).is_file()]
    for module, tests in modules.items():
        problems += [f"{module}: no test file {t}" for t in tests if not (root / t).is_file()]
    return problems


def copy_tree(dest: Path) -> Path:
    """The repository's files (tracked, and untracked ones git does not ignore) under `dest`."""
    for name in listed_files(ROOT):
        source = ROOT / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


# ---------------------------------------------------------------------- which tests judge a mutation
FAST = "not slow"  # the fast suite's marker expression (`make check`): in-process, so coverage sees all it runs
KEPT_MAPS = 3  # coverage maps kept in the cache, the newest


def tree_hash(root: Path) -> str:
    """The content hash of a copy of the tree (names and bytes of every file): the coverage map's key."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class CoverageMap:
    """The fast suite's run on the unmutated tree: which tests ran each line of the package, which failed."""
    data_file: Path  # coverage.py's data file, contexts = test node ids ("" outside any test: imports)
    root: str  # the tree the paths in the data file are under
    failed: tuple[str, ...]
    seconds: float
    cached: bool = False

    def lines(self, path: str) -> dict[int, set[str]]:
        """{line: node ids that ran it} of the file `path` (relative to the repository root); "" for a line run
        outside any test."""
        import coverage  # a test dependency (pyproject's `test` extra): only the coverage map needs it

        data = coverage.CoverageData(basename=str(self.data_file))
        data.read()
        wanted = os.path.join(self.root, path)
        found = next((f for f in data.measured_files() if os.path.normpath(f) == os.path.normpath(wanted)), None)
        if found is None:
            return {}
        return {line: set(contexts) for line, contexts in data.contexts_by_lineno(found).items()}


def coverage_map(tree: Path, timeout_s: float, cache: Path | None = None) -> CoverageMap:
    """Run the fast suite once on `tree` under coverage.py, each test recorded under its node id; reuse the map of
    an earlier run of the same content from `cache` (a folder per content hash, written whole or not at all)."""
    key = tree_hash(tree)[:24]
    cache = Path(tempfile.gettempdir()) / f"mutate-coverage-{os.getuid()}" if cache is None else cache
    kept = cache / key
    if (kept / "meta.json").is_file():
        meta = json.loads((kept / "meta.json").read_text(encoding="utf-8"))
        return CoverageMap(kept / ".coverage", meta["root"], tuple(meta["failed"]), meta["seconds"], cached=True)
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=cache))
    failed_file = work / "failed.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "bench")]),
           "PYTHONDONTWRITEBYTECODE": "1", "MUTATE_FAILED_FILE": str(failed_file)}
    command = [sys.executable, "-m", "coverage", "run", f"--data-file={work / '.coverage'}",
               f"--source={tree / 'mcp_server'}", "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-p", "mutate_contexts", "-m", FAST, "tests"]
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, timeout=timeout_s,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        shutil.rmtree(work, ignore_errors=True)
        raise Stale(f"the coverage run of the fast suite took over {timeout_s:.0f}s") from None
    seconds = time.monotonic() - start
    if done.returncode not in (0, 1) or not failed_file.is_file() or not (work / ".coverage").is_file():
        shutil.rmtree(work, ignore_errors=True)
        tail = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
        raise Stale(f"the coverage run of the fast suite did not finish (exit {done.returncode}):\n{tail}")
    failed = tuple(filter(None, failed_file.read_text(encoding="utf-8").splitlines()))
    (work / "meta.json").write_text(json.dumps({"root": str(tree), "failed": failed, "seconds": seconds}))
    try:
        work.rename(kept)
    except OSError:  # another run kept the same content meanwhile
        shutil.rmtree(work, ignore_errors=True)
    # the maps of other contents are kept for a tree switched back to, the newest few (each a few MB)
    older = sorted((d for d in cache.iterdir() if d.is_dir() and "-" not in d.name and d != kept),
                   key=lambda d: d.stat().st_mtime, reverse=True)
    for gone in older[KEPT_MAPS - 1:]:
        shutil.rmtree(gone, ignore_errors=True)
    return CoverageMap(kept / ".coverage", str(tree), failed, seconds)


def mutated_lines(root: Path, mutation: Mutation) -> set[int]:
    """The lines of `mutation.path` its text replaces, widened to the statements they are part of (a statement's
    lines, a compound statement's header): a tracer records a multi-line statement at some of its lines only."""
    text = (root / mutation.path).read_text(encoding="utf-8")
    first = text.count("\n", 0, text.index(mutation.old)) + 1
    last = first + mutation.old.rstrip("\n").count("\n")
    lines = set(range(first, last + 1))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.stmt):
            body = getattr(node, "body", None)
            end = max(node.lineno, body[0].lineno - 1) if isinstance(body, list) and body else node.end_lineno
            if node.lineno <= last and end >= first:
                lines.update(range(node.lineno, end + 1))
    return lines


@dataclass(frozen=True)
class Judges:
    tests: tuple[str, ...]  # node ids of the tests that run the mutated line
    files: tuple[str, ...]  # the area's test files (hand-kept) that judge it too; both empty: nothing can
    marker: str  # pytest -m expression they run under
    how: str  # said beside the outcome


def judges_of(mutation: Mutation, ran: dict[int, set[str]], lines: set[int], failed=(), areas=None,
              modules=None) -> Judges:
    """Who judges `mutation`, given `ran` ({line: node ids}, "" outside any test) of its file and its `lines`: the
    tests that ran them (and its area's files where the area has only slow judges); else its area's files where
    the line runs only at import or the area's judges are slow; else nobody."""
    areas = AREAS if areas is None else areas
    area = areas[mutation.area]
    reached = set().union(*(ran.get(line, set()) for line in lines))
    tests = tuple(sorted(reached - {""} - set(failed)))
    slow_only = area.marker != FAST
    if tests:
        files = by_area(mutation, areas, modules) if slow_only else ()
        extra = " and the area's slow files" if files else ""
        return Judges(tests, files, area.marker,
                      f"judged by {len(tests)} test{'s that run' if len(tests) > 1 else ' that runs'} this line{extra}")
    if "" in reached:  # a module constant, a class field: judged by every test that runs any line of its module
        module = tuple(sorted(set().union(*ran.values()) - {""} - set(failed)))
        files = by_area(mutation, areas, modules) if slow_only or not module else ()
        if module:
            extra = " and the area's slow files" if files else ""
            runs = "s that run" if len(module) > 1 else " that runs"
            return Judges(module, files, area.marker, f"judged by the {len(module)} test{runs} its module (its line "
                          f"runs only at import){extra}")
        return Judges((), files, area.marker, "by the area's files: its line runs only at import and no test runs "
                      "its module")
    if slow_only:
        return Judges((), by_area(mutation, areas, modules), area.marker,
                      "by the area's files: no fast test runs this line (its judges are slow)")
    return Judges((), (), area.marker, "no test runs this line and no area covers it")


# ---------------------------------------------------------------------- running
def by_area(mutation: Mutation, areas=None, modules=None) -> tuple[str, ...]:
    """The hand-kept test files of `mutation`: those of its module (MODULE_TESTS), else its area's."""
    areas = AREAS if areas is None else areas
    modules = MODULE_TESTS if modules is None else modules
    return modules.get(mutation.path, areas[mutation.area].tests)


def tests_of(mutation: Mutation) -> tuple[str, ...]:
    """The test files that judge `mutation` with --by-area: those of its module (MODULE_TESTS), else its area's."""
    return by_area(mutation)


def pytest_command(area: Area, tests: tuple[str, ...] | None = None, marker: str | None = None) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *(tests or area.tests)]
    marker = area.marker if marker is None else marker
    return command + (["-m", marker] if marker else [])


def run_tests(tree: Path, area: Area, timeout_s: float, tests: tuple[str, ...] | None = None,
              marker: str | None = None) -> tuple[str, float]:
    """('pass' | 'fail' | 'timeout' | 'error ...', seconds) of the area's tests (or `tests`) on `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.monotonic()
    try:
        done = subprocess.run(pytest_command(area, tests, marker), cwd=tree, env=env, capture_output=True,
                              timeout=timeout_s, start_new_session=True)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - start
    if done.returncode == 4 and (files := whole_files(tree, tests or (), done.stdout + done.stderr)):
        # node ids the mutation removed (rows a test generates from what it mutates): their whole files judge it
        try:
            done = subprocess.run(pytest_command(area, files, marker), cwd=tree, env=env, capture_output=True,
                                  timeout=max(1.0, timeout_s - (time.monotonic() - start)), start_new_session=True)
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - start
    # pytest: 0 passed, 1 tests failed, 2 interrupted (a collection error), 4 a node id not found, 5 nothing ran;
    # below 0: killed by a signal (a crash, the OOM killer), not a verdict on the mutation: rerun it
    outcome = "pass" if done.returncode == 0 else "fail"
    if done.returncode < 0:
        outcome = f"error (killed by signal {-done.returncode})"
    elif done.returncode not in (0, 1, 2):
        outcome = f"error (pytest exit {done.returncode})"
    return outcome, time.monotonic() - start


def whole_files(tree: Path, tests: tuple[str, ...], output: bytes) -> tuple[str, ...]:
    """`tests` with each node id pytest did not find (its "not found: <file>::<name>" lines in `output`) replaced
    by its whole file, and every other node id of that file dropped (the file runs them); () when none is missing
    or the missing ones name no file of `tests`."""
    said = output.decode(errors="replace").splitlines()
    named = {line.split("not found: ", 1)[1].split("::", 1)[0] for line in said if "not found: " in line}
    gone = {os.path.relpath(name, tree) if os.path.isabs(name) else name for name in named}
    gone &= {test.split("::", 1)[0] for test in tests if "::" in test}
    if not gone:
        return ()
    kept = [test for test in tests if test.split("::", 1)[0] not in gone]
    return tuple(kept + sorted(gone - set(kept)))


def caught(outcome: str) -> bool:
    """A mutation is caught when its tests fail or time out (an error of the lane's own call is no catch)."""
    return outcome in ("fail", "timeout")


def judge(tree: Path, mutation: Mutation, timeout_s: float, judges: Judges | None = None) -> tuple[str, float]:
    if judges is not None and not (judges.tests or judges.files):
        return "unjudged", 0.0
    path = tree / mutation.path
    original = path.read_text(encoding="utf-8")
    path.write_text(mutated_text(tree, mutation), encoding="utf-8")
    try:
        if judges is None:
            return run_tests(tree, AREAS[mutation.area], timeout_s, tests_of(mutation))
        return run_tests(tree, AREAS[mutation.area], timeout_s, judges.tests + judges.files, judges.marker)
    finally:
        path.write_text(original, encoding="utf-8")


def listed_files(root: Path) -> list[str]:
    """The repository's files: tracked, and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, check=True,
                            capture_output=True).stdout.decode().split("\0")
    return [name for name in listed if name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--area", action="append", choices=sorted(AREAS), help="only this area (repeatable)")
    parser.add_argument("--only", help="comma-separated mutation ids")
    parser.add_argument("--check", action="store_true", help="only check that every mutation applies")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--jobs", type=int, default=1, help="copies of the tree judged in parallel")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutation's tests")
    parser.add_argument("--by-area", action="store_true",
                        help="judge by the hand-kept test files of each area (AREAS, MODULE_TESTS), not coverage")
    parser.add_argument("--coverage-timeout", type=float, default=3600.0,
                        help="seconds for the fast suite's coverage run")
    args = parser.parse_args(argv)

    problems = stale(ROOT)
    if problems:
        print("mutations that no longer apply (the code moved): update or drop them in bench/mutate.py",
              file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 2
    chosen = [m for m in MUTATIONS if (not args.area or m.area in args.area)
              and (not args.only or m.id in args.only.split(","))]
    if args.list or args.check:
        for m in chosen:
            print(f"{m.area:10} {m.id:34} {m.path}: {m.effect}")
        print(f"{len(chosen)} mutations apply")
        return 0
    if not chosen:
        print("no mutation selected", file=sys.stderr)
        return 2

    jobs = max(1, min(args.jobs, len(chosen)))
    with tempfile.TemporaryDirectory(prefix="mutate-") as tmp:
        trees = [copy_tree(Path(tmp) / f"tree-{i}") for i in range(jobs)]
        areas = sorted({m.area for m in chosen}, key=list(AREAS).index)
        print(f"{len(chosen)} mutations over {len(areas)} areas, {jobs} cop{'ies' if jobs > 1 else 'y'} of the tree, "
              f"judged {'by the area files' if args.by_area else 'by the tests that run each line'}")
        start = time.monotonic()
        selection: dict[str, Judges | None] = {m.id: None for m in chosen}
        if not args.by_area:
            try:
                covered = coverage_map(trees[0], args.coverage_timeout)
            except Stale as exc:
                print(str(exc), file=sys.stderr)
                return 2
            print(f"  coverage map of the fast suite: {'reused, ' if covered.cached else ''}"
                  f"{covered.seconds:.0f}s, {len(covered.failed)} failing unmutated")
            ran = {m.id: (covered.lines(m.path), mutated_lines(trees[0], m)) for m in chosen}
            selection = {m.id: judges_of(m, *ran[m.id], covered.failed) for m in chosen}
            blocked = [m.id for m in chosen if set(covered.failed) & set().union(*(ran[m.id][0].get(n, set())
                                                                                 for n in ran[m.id][1]))]
            if blocked:
                print(f"tests that fail unmutated ({', '.join(covered.failed)}) run the line of "
                      f"{', '.join(blocked)}: they cannot judge it", file=sys.stderr)
                return 2
        # the unmutated baseline of what runs by file: every area with --by-area, else the areas whose files judge
        # a chosen mutation
        by_file = areas if args.by_area else [a for a in areas
                                              if any(m.area == a and selection[m.id].files for m in chosen)]
        with ThreadPoolExecutor(jobs) as pool:
            baseline = dict(zip(by_file, pool.map(lambda a: run_tests(trees[by_file.index(a) % jobs], AREAS[a],
                                                                      args.timeout), by_file)))
        red = [a for a, (outcome, _) in baseline.items() if outcome != "pass"]
        for a in by_file:
            print(f"  baseline {a}: {baseline[a][0]} in {baseline[a][1]:.0f}s")
        if red:
            print(f"the unmutated tests of {', '.join(red)} do not pass: their mutations cannot be judged",
                  file=sys.stderr)
            return 2
        free = list(trees)

        def one(m: Mutation) -> tuple[Mutation, str, float]:
            tree = free.pop()
            try:
                outcome, seconds = judge(tree, m, args.timeout, selection[m.id])
            finally:
                free.append(tree)
            word = ("caught  " if caught(outcome) else "SURVIVED" if outcome == "pass"
                    else "UNJUDGED" if outcome == "unjudged" else "ERROR   ")
            how = f"; {selection[m.id].how}" if selection[m.id] else ""
            print(f"  {word} {m.id} ({outcome}, {seconds:.0f}s{how})", flush=True)
            return m, outcome, seconds

        with ThreadPoolExecutor(jobs) as pool:
            results = list(pool.map(one, chosen))
        elapsed = time.monotonic() - start

    print("\n| area | mutations | caught |\n|---|---|---|")
    for a in areas:
        rows = [r for r in results if r[0].area == a]
        print(f"| {AREAS[a].title} | {len(rows)} | {sum(caught(r[1]) for r in rows)} |")
    total = sum(caught(r[1]) for r in results)
    print(f"| total | {len(results)} | {total} |")
    errors = [r for r in results if not caught(r[1]) and r[1] not in ("pass", "unjudged")]
    killed = sum("killed by signal" in r[1] for r in errors)
    print(f"\ncaught {total}/{len(results)} = {total / len(results):.0%} in {elapsed:.0f}s"
          + (f"; {len(errors)} error{'s' * (len(errors) > 1)} counted as not caught ({killed} killed by a signal)"
             if errors else ""))
    if not args.by_area:
        hows = [selection[m.id].how for m in chosen]
        print(f"judged by the tests that run the line: {sum(h.startswith('judged by') for h in hows)}; by the "
              f"area's files: {sum(h.startswith('by the area') for h in hows)}; unjudged: "
              f"{sum(not (selection[m.id].tests or selection[m.id].files) for m in chosen)}")
    unjudged = [r[0] for r in results if r[1] == "unjudged"]
    if unjudged:
        print("\nunjudged (no test runs the mutated line, not even at import, and no area covers it):")
        for m in unjudged:
            print(f"- {m.id} ({m.area}, {m.path}): {m.effect}")
    if errors:
        print("\nerrors (neither caught nor survived: pytest did not give a verdict; rerun with --only):")
        for m, outcome, _ in errors:
            print(f"- {m.id}: {outcome}")
    survivors = [r[0] for r in results if r[1] == "pass"]
    if survivors:
        print("\nsurvivors (the tests that judge them pass with the bug in place):")
        for m in survivors:
            print(f"- {m.id} ({m.area}, {m.path}): {m.effect}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
