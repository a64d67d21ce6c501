"""Does a demo's lift hold on every CPU kernel set and seed? (issue 32)

torch's ATEN_CPU_CAPABILITY forces one CPU kernel set (default, avx2, avx512) on this machine: each stands in for
another user's CPU, whose float kernels round differently and so train another model from the same bytes. This
runs a demo once per kernel set x GRPO seed (3 x 3 = 9 runs, one after the other, each in a fresh workspace and
process) and prints the table: warm start and trained success on the held-out set, the lift, the exact paired
(McNemar) p-value, the wall time and the checkpoint gate's verdict. The goal is p < 0.01 in every cell; the last
lines say how many cells meet it, count the verdicts and give the load average (the machine is shared: wall times
are the load's as much as the demo's).

    .venv/bin/python bench/bench_kernels.py --demo tiny|agentic|smollm2 [--kernels avx512,avx2,default]
        [--seeds 3407,1,2] [--jobs N] [--skip-export]

--jobs runs that many cells at once (each is one process on one thread): on a machine shared with other work it
takes a larger share of the CPU, and the figures are the same (each cell is deterministic), but each wall time is
then the load's, not the demo's.

--demo smollm2 is the real-model demo (`llm-finetuning demo --model smollm2-135m`); its start is the base model
(no warm start), evaluated greedily, so its success is the same for every seed under one kernel set (the table
shows it). --skip-export ends its walk at the checkpoint gate, which decides the lift: the export (phase 6, about
30 s at load 3) only copies and smoke-tests the promoted model, so the lift and p are the full walk's. The
converted model is cached outside the per-run workspace (LLM_FINETUNING_CACHE), so it is converted once.

Kernel sets the CPU lacks are skipped (torch falls back silently, which would repeat another cell). Each run's own
output goes to a log file whose path is printed; the table is also written as JSON beside the logs.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_P = 0.01
WALL_GOAL_S = {"tiny": 180, "agentic": 360, "smollm2": 1200}  # on a quiet machine (issues 32; 31: smollm2)

# Each child prints one JSON line last: {base, trained, n, p_value, extra}.
TINY_CHILD = """
import json, sys
from mcp_server.demo import run_demo
from mcp_server.demo_models import DemoSettings
s = run_demo(settings=DemoSettings(grpo_seed=int(sys.argv[1])), as_json=True)
print(json.dumps({"base": s.sft_pass_rate, "trained": s.grpo_pass_rate, "lift": s.improvement_points,
                  "p_value": s.p_value, "verdict": s.verdict, "ok": s.ok, "problems": s.problems}))
"""
AGENTIC_CHILD = """
import json, sys
from mcp_server.demo_agentic import run_agentic_demo
s = run_agentic_demo(seed=int(sys.argv[1]))
n = s["held_out"]
print(json.dumps({"base": s["base"] / n, "trained": s["trained"] / n, "lift": 100 * (s["trained"] - s["base"]) / n,
                  "p_value": s["p_value"], "verdict": s.get("verdict"), "ok": s["outcome"] == "succeeded",
                  "warm_start_check": s["warm_start_check"], "problems": []}))
"""
# The real model: GRPO from the base model. The per-step training reward shows that the seed acts (another seed
# samples other completions from another LoRA initialisation); the phases' seconds show where the wall time went.
SMOLLM2_CHILD = """
import json, sys
from pathlib import Path
from mcp_server.demo_smollm2 import SmolDemoSettings, run_smollm2_demo
from mcp_server.runs import Run
s = run_smollm2_demo(as_json=True, settings=SmolDemoSettings(grpo_seed=int(sys.argv[1]), export=sys.argv[2] == "1"))
progress = Run(Path(s.run_dir)).progress
steps = [json.loads(line) for line in progress.read_text().splitlines()] if progress.is_file() else []
print(json.dumps({"base": s.baseline_pass_rate, "trained": s.grpo_pass_rate, "lift": s.improvement_points,
                  "p_value": s.p_value, "verdict": s.verdict, "ok": s.ok, "problems": s.problems,
                  "phases": {p.name: p.seconds for p in s.phases},
                  "step_rewards": [round(r["reward"], 4) for r in steps if "reward" in r]}))
"""
CHILDREN = {"tiny": TINY_CHILD, "agentic": AGENTIC_CHILD, "smollm2": SMOLLM2_CHILD}


def cpu_has(kernel: str) -> bool:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    return kernel == "default" or {"avx2": " avx2", "avx512": " avx512f"}[kernel] in flags


def run_cell(demo: str, kernel: str, seed: int, logs: Path, export: bool = True) -> dict:
    log = logs / f"{demo}-{kernel}-seed{seed}.log"
    with tempfile.TemporaryDirectory(prefix=f"bench-kernels-{demo}-") as ws:
        env = {**os.environ, "ATEN_CPU_CAPABILITY": kernel, "LLM_FINETUNING_WORKSPACE": ws,
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        start, load_before = time.perf_counter(), os.getloadavg()[0]
        with log.open("w") as err:
            child = subprocess.run([sys.executable, "-c", CHILDREN[demo], str(seed), "1" if export else "0"],
                                   cwd=ws, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        seconds = time.perf_counter() - start
    with log.open("a") as err:
        err.write(child.stdout)
    lines = child.stdout.strip().splitlines()
    try:
        got = json.loads(lines[-1])
    except (IndexError, ValueError):
        got = {"problems": [f"exit {child.returncode}: see {log}"]}
    return {"demo": demo, "kernel": kernel, "seed": seed, "seconds": round(seconds, 1), "log": str(log),
            "load": (round(load_before, 1), round(os.getloadavg()[0], 1)), **got}


def row_text(cell: dict) -> str:
    if cell.get("p_value") is None:
        return f"  {cell['kernel']:8} {cell['seed']:>5}   failed: {'; '.join(cell.get('problems') or [])}"
    warm = (f"  (warm-start check {cell['warm_start_check']:.0%})" if cell.get("warm_start_check") is not None
            else "")
    return (f"  {cell['kernel']:8} {cell['seed']:>5}   {cell['base']:6.0%} -> {cell['trained']:4.0%}   "
            f"{cell['lift']:+5.0f}   {cell['p_value']:8.2g}   {'yes' if cell['p_value'] < GOAL_P else 'NO ':3}   "
            f"{cell['seconds']:6.0f}   {cell['load'][0]:4.1f}-{cell['load'][1]:4.1f}   "
            f"{cell.get('verdict') or '-'}{warm}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", choices=tuple(CHILDREN), required=True)
    parser.add_argument("--kernels", default="avx512,avx2,default")
    parser.add_argument("--seeds", default="3407,1,2")
    parser.add_argument("--jobs", type=int, default=1, help="cells run at once (default 1: one after the other)")
    parser.add_argument("--skip-export", action="store_true", help="smollm2: end each walk at the checkpoint gate, "
                        "which decides the lift (the export only copies and smoke-tests the model)")
    args = parser.parse_args()
    kernels = [k for k in args.kernels.split(",") if cpu_has(k)]
    skipped = sorted(set(args.kernels.split(",")) - set(kernels))
    seeds = [int(s) for s in args.seeds.split(",")]
    logs = Path(tempfile.mkdtemp(prefix=f"bench-kernels-{args.demo}-logs-"))
    print(f"bench_kernels {args.demo}: kernel sets {kernels} x seeds {seeds}; logs in {logs}"
          + (f"; skipped (this CPU lacks them): {skipped}" if skipped else ""), flush=True)
    load_start = os.getloadavg()
    cells = []
    print("  kernel    seed  start -> trained   lift          p   p<0.01   wall s   load (1 min, start-end)   verdict",
          flush=True)
    order = [(kernel, seed) for seed in seeds for kernel in kernels]  # seed-major: a cut-short bench covers them all
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = [pool.submit(run_cell, args.demo, kernel, seed, logs, not args.skip_export)
                   for kernel, seed in order]
        for future in futures:  # printed in order, each as soon as it and those before it are done
            cells.append(future.result())
            print(row_text(cells[-1]), flush=True)
            (logs / "table.json").write_text(json.dumps(cells, indent=1))
    meets = sum(c.get("p_value") is not None and c["p_value"] < GOAL_P for c in cells)
    walls = [c["seconds"] for c in cells]
    verdicts = collections.Counter(c.get("verdict") or "none" for c in cells)
    print(f"\n{meets} of {len(cells)} runs lift held-out success with exact paired p < {GOAL_P}; verdicts: "
          f"{', '.join(f'{verdict} {count}' for verdict, count in sorted(verdicts.items()))}; wall time "
          f"{min(walls):.0f}-{max(walls):.0f} s (goal under {WALL_GOAL_S[args.demo]} s on a quiet machine)")
    print(f"load average (1 min): {load_start[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, on "
          f"{os.cpu_count()} CPUs")
    return 0 if meets == len(cells) else 1


if __name__ == "__main__":
    sys.exit(main())
