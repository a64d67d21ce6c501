"""DAPO's dynamic sampling (issue 47) on the embedded tiny demo: the demo's GRPO with and without it, same steps and
seeds, and what it costs.

Each run is `llm-finetuning demo` (the shipped warm start, the inspection gate, GRPO, the paired evaluation on the
225 held-out goldens) in a temporary workspace, in a child process of its own, one after the other (both arms see
the same machine, never each other's load). Printed per seed and arm: the held-out lift over the warm start (points),
its paired p-value, the GRPO phase's wall time, lift per GRPO minute, the raw and kept zero-spread shares and the
extra completions generated (the dynamic_sampling/* metrics of the run's progress.jsonl, averaged over its logged
lines; extra completions summed as mean x steps).

    .venv/bin/python bench/bench_dynamic_sampling.py [--seeds 1 2 3] [--steps 150] [--rounds 3]

--steps shortens the GRPO phase (the cosine then spans 4/3 of it, as the shipped 150 of 200). A bench, not a test:
it reports whether the option helps here, either way.
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


def child(seed: int, steps: int, rounds: int | None) -> dict:
    """One demo run in this process: its figures as a dict."""
    from mcp_server.demo import run_demo
    from mcp_server.demo_models import DemoSettings

    settings = DemoSettings(grpo_seed=seed, grpo_steps=steps, grpo_cosine_steps=round(steps * 4 / 3),
                            grpo_dynamic_sampling=rounds)
    with tempfile.TemporaryDirectory(prefix="bench-dyn-") as ws:
        os.environ["LLM_FINETUNING_WORKSPACE"] = ws
        os.chdir(ws)
        summary = run_demo(settings=settings, as_json=True)
        os.chdir("/")
        progress = Path(summary.run_dir) / "train" / "logs" / "progress.jsonl"
        lines = [json.loads(x) for x in progress.read_text().splitlines()] if progress.is_file() else []
    grpo = next((p.seconds for p in summary.phases if "training" in p.name.lower()), None)

    def mean(key):
        values = [x[key] for x in lines if isinstance(x.get(key), (int, float))]
        return statistics.fmean(values) if values else None

    extra = mean("dynamic_sampling/extra_completions")
    return {"seed": seed, "dynamic": rounds is not None, "lift": summary.improvement_points, "p": summary.p_value,
            "grpo_s": grpo, "zero_raw": mean("dynamic_sampling/zero_std_raw"),
            "frac_zero": mean("frac_reward_zero_std"),
            "zero_kept": mean("dynamic_sampling/zero_std_kept"),
            "extra_completions": None if extra is None else extra * steps, "verdict": summary.verdict}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        seed, steps, rounds = (int(v) if v != "none" else None for v in args.child)
        print(json.dumps(child(seed, steps, rounds)))
        return
    rows = []
    for seed in args.seeds:
        for rounds in (None, args.rounds):
            log = Path(tempfile.gettempdir()) / f"bench-dyn-{seed}-{'on' if rounds else 'off'}.log"
            with log.open("w") as err:
                out = subprocess.run([sys.executable, __file__, "--child", str(seed), str(args.steps),
                                      str(rounds) if rounds else "none"], stdout=subprocess.PIPE, stderr=err,
                                     text=True, check=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'seed':>4} {'dyn':>4} {'lift':>6} {'p':>7} {'GRPO s':>7} {'lift/min':>8} {'raw0':>5} {'kept0':>5} "
          f"{'extra gen':>9}")
    for r in rows:
        per_min = r["lift"] / (r["grpo_s"] / 60) if r["lift"] is not None and r["grpo_s"] else None

        def fmt(v, spec):
            return format(v, spec) if isinstance(v, (int, float)) else "-"
        raw = r["zero_raw"] if r["dynamic"] else r["frac_zero"]
        print(f"{r['seed']:>4} {'on' if r['dynamic'] else 'off':>4} {fmt(r['lift'], '+6.1f')} {fmt(r['p'], '7.3f')} "
              f"{fmt(r['grpo_s'], '7.0f')} {fmt(per_min, '+8.2f')} {fmt(raw, '5.2f')} "
              f"{fmt(r['zero_kept'] if r['dynamic'] else r['frac_zero'], '5.2f')} "
              f"{fmt(r['extra_completions'] or 0, '9.0f')}")


if __name__ == "__main__":
    main()
