"""DAPO's dynamic sampling (issue 47) on the embedded tiny demo and on smollm2-135m: the demo's GRPO with and without
it, same steps and seeds, and what it costs.

Each run is `llm-finetuning demo` (--demo tiny: the shipped warm start, the inspection gate, GRPO, the paired
evaluation on the 225 held-out goldens) or `llm-finetuning demo --model smollm2-135m` (--demo smollm2: the real
model from its base, GRPO with LoRA, the paired evaluation on 50 held-out goldens; the walk ends at the checkpoint
gate, as bench/bench_kernels.py --skip-export does) in a temporary workspace, in a child process of its own, one
after the other (both arms see the same machine, never each other's load), or with --parallel both arms of a seed at
once (for a machine too loaded to run them in turn: each arm's wall time then includes the other's load, alike for
both). Printed per seed and arm: the held-out lift over the start (points), its paired p-value, the GRPO phase's
wall time, lift per GRPO minute, the raw and kept zero-spread shares and the extra completions generated (the
dynamic_sampling/* metrics of the run's progress.jsonl, averaged over its logged lines; extra completions summed as
mean x steps).

    .venv/bin/python bench/bench_dynamic_sampling.py [--demo tiny|smollm2] [--seeds 1 2 3] [--steps N]
        [--rounds 3] [--parallel]

--steps shortens or lengthens the GRPO phase (tiny: 150 by default, the cosine then spans 4/3 of it, as the shipped
150 of 200; smollm2: the demo's 10). A bench, not a test: it reports whether the option helps here, either way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_STEPS = {"tiny": 150, "smollm2": 10}


def run_one(demo: str, seed: int, steps: int, rounds: int | None):
    """The demo's summary for one arm, in this process and the current workspace."""
    if demo == "smollm2":
        from mcp_server.demo_smollm2 import SmolDemoSettings, run_smollm2_demo

        return run_smollm2_demo(as_json=True, settings=SmolDemoSettings(
            grpo_seed=seed, grpo_steps=steps, grpo_dynamic_sampling=rounds, export=False))
    from mcp_server.demo import run_demo
    from mcp_server.demo_models import DemoSettings

    return run_demo(settings=DemoSettings(grpo_seed=seed, grpo_steps=steps, grpo_cosine_steps=round(steps * 4 / 3),
                                          grpo_dynamic_sampling=rounds), as_json=True)


def child(demo: str, seed: int, steps: int, rounds: int | None) -> dict:
    """One demo run in this process: its figures as a dict."""
    with tempfile.TemporaryDirectory(prefix="bench-dyn-") as ws:
        os.environ["LLM_FINETUNING_WORKSPACE"] = ws
        os.chdir(ws)
        summary = run_one(demo, seed, steps, rounds)
        os.chdir("/")
        progress = Path(summary.run_dir) / "train" / "logs" / "progress.jsonl"
        lines = [json.loads(x) for x in progress.read_text().splitlines()] if progress.is_file() else []
    grpo = next((p.seconds for p in summary.phases if "training" in p.name.lower()), None)

    def mean(key):
        values = [x[key] for x in lines if isinstance(x.get(key), (int, float))]
        return statistics.fmean(values) if values else None

    extra = mean("dynamic_sampling/extra_completions")
    return {"demo": demo, "seed": seed, "dynamic": rounds is not None, "lift": summary.improvement_points,
            "p": summary.p_value, "grpo_s": grpo, "wall_s": summary.seconds,
            "zero_raw": mean("dynamic_sampling/zero_std_raw"), "frac_zero": mean("frac_reward_zero_std"),
            "zero_kept": mean("dynamic_sampling/zero_std_kept"),
            "extra_completions": None if extra is None else extra * steps, "verdict": summary.verdict}


def _started(demo: str, seed: int, steps: int, rounds: int | None) -> subprocess.Popen:
    log = Path(tempfile.gettempdir()) / f"bench-dyn-{demo}-{seed}-{'on' if rounds else 'off'}.log"
    with log.open("w") as err:
        return subprocess.Popen([sys.executable, __file__, "--child", demo, str(seed), str(steps),
                                 str(rounds) if rounds else "none"], stdout=subprocess.PIPE, stderr=err, text=True)


def _finished(process: subprocess.Popen) -> dict:
    out, _ = process.communicate()
    if process.returncode:
        raise SystemExit(f"a bench child failed ({' '.join(process.args)}): its log is under {tempfile.gettempdir()}")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--demo", choices=tuple(DEFAULT_STEPS), default="tiny")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parallel", action="store_true", help="run both arms of a seed at once")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        demo, *numbers = args.child
        seed, steps, rounds = (int(v) if v != "none" else None for v in numbers)
        print(json.dumps(child(demo, seed, steps, rounds)))
        return
    steps = args.steps or DEFAULT_STEPS[args.demo]
    rows = []
    for seed in args.seeds:
        if args.parallel:
            arms = [_finished(p) for p in [_started(args.demo, seed, steps, r) for r in (None, args.rounds)]]
        else:
            arms = [_finished(_started(args.demo, seed, steps, r)) for r in (None, args.rounds)]
        for row in arms:
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{'demo':>7} {'seed':>4} {'dyn':>4} {'lift':>6} {'p':>9} {'GRPO s':>7} {'lift/min':>8} {'raw0':>5} "
          f"{'kept0':>5} {'extra gen':>9}")
    for r in rows:
        per_min = r["lift"] / (r["grpo_s"] / 60) if r["lift"] is not None and r["grpo_s"] else None

        def fmt(v, spec):
            return format(v, spec) if isinstance(v, (int, float)) else "-"
        raw = r["zero_raw"] if r["dynamic"] else r["frac_zero"]
        print(f"{r['demo']:>7} {r['seed']:>4} {'on' if r['dynamic'] else 'off':>4} {fmt(r['lift'], '+6.1f')} "
              f"{fmt(r['p'], '9.2g')} {fmt(r['grpo_s'], '7.0f')} {fmt(per_min, '+8.2f')} {fmt(raw, '5.2f')} "
              f"{fmt(r['zero_kept'] if r['dynamic'] else r['frac_zero'], '5.2f')} "
              f"{fmt(r['extra_completions'] or 0, '9.0f')}")


if __name__ == "__main__":
    main()
