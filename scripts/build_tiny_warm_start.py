"""Build the tiny demo's shipped warm start (mcp_server/tiny_warm_start/) and print its pinned hash.

The warm start is shipped as data because building it depends on the machine (issue 32: the same SFT under
another CPU kernel set gives another model, and GRPO's lift over it ranged from -1 to +14 points). This script
builds it to the stated range (mcp_server.demo_warm_start.WARM_RANGE, checked on training prompts kept out of the
SFT rows), writes it in place and prints the state_sha256 to pin as demo_warm_start.WARM_START_SHA256. Run it
only to change the warm start.

    PYTHONPATH=$PWD .venv/bin/python scripts/build_tiny_warm_start.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from mcp_server.demo_warm_start import SHIPPED_WARM_START, WARM_CHECK_ROWS, WARM_MAX_OPERAND, build_warm_start
from mcp_server.evaluation.tiny_suite import tiny_split
from mcp_server.tiny import state_sha256


def main() -> int:
    train_rows, _ = tiny_split(WARM_MAX_OPERAND)

    def report(done, total, message):
        if message:
            print(f"  SFT step {done:.0f}: {message}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        built, steps, rate = build_warm_start(Path(tmp) / "warm", train_rows, report)
        shutil.rmtree(SHIPPED_WARM_START, ignore_errors=True)
        # the model and its tokenizer; not the trainer's pickled arguments (training_args.bin), which no load reads
        shutil.copytree(built, SHIPPED_WARM_START, ignore=shutil.ignore_patterns("training_args.bin"))
    print(f"built {SHIPPED_WARM_START} in {steps} SFT steps: {rate:.0%} of {WARM_CHECK_ROWS} check prompts; "
          f"state_sha256 {state_sha256(SHIPPED_WARM_START)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
