"""Benchmark: sample_completions on the tiny model (goal: 64 samples in a few seconds on CPU).

Three arms, each the real `sample_completions` (64 samples = 16 tiny-task prompts x 4, 48 new tokens),
alternated so drift in a shared machine's load hits all alike; the median of `--repeats` runs each:
- ours:        batched (one generate call for all 64 sequences), one CPU thread for a small model
- per-prompt:  one generate call per prompt (batch_size = n), the naive loop
- all-threads: batched, but torch's default thread count (what the one-thread rule avoids)

    .venv/bin/python bench/bench_sampling.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    from mcp_server import model_ref
    from mcp_server.inspection import sampling
    from mcp_server.inspection.models import SampleRequest
    from mcp_server.tiny import ensure_tiny_model

    ensure_tiny_model()
    os.environ["LLM_FINETUNING_WORKSPACE"] = tempfile.mkdtemp(prefix="bench-sampling-")
    from mcp_server.workspace import new_run_dir

    run = str(new_run_dir("bench"))
    request = SampleRequest(run=run, model="tiny", dataset="tiny", n=4, num_prompts=16, max_new_tokens=48)
    arms = {
        "ours": (request, model_ref.SMALL_MODEL_PARAMS),
        "per-prompt": (request.model_copy(update={"batch_size": 4}), model_ref.SMALL_MODEL_PARAMS),
        "all-threads": (request, 0),  # threshold 0: the one-thread rule never applies
    }
    sampling.sample_completions(request)  # warm-up: imports, model load, caches
    times: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name, (req, threshold) in arms.items():
            model_ref.SMALL_MODEL_PARAMS = threshold  # read by generation's small_model_threads
            times[name].append(sampling.sample_completions(req).seconds)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"sample_completions, 64 samples x 48 tokens, tiny model, CPU ({torch.get_num_threads()} torch threads by "
          "default)")
    for name, seconds in median.items():
        print(f"  {name:<12} {seconds:7.2f} s   (runs: {', '.join(f'{t:.2f}' for t in times[name])})")
    print(f"  speed-up vs per-prompt:  {median['per-prompt'] / median['ours']:.1f}x")
    print(f"  speed-up vs all-threads: {median['all-threads'] / median['ours']:.1f}x")


if __name__ == "__main__":
    main()
