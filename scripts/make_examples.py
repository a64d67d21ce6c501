"""The emitted runs in examples/, regenerated from the emitter: each example's `emit-config` line, its
train/config.yaml and train/rewards.json as emitted (the checkout's absolute path left out, so the files read
the same on every machine), and examples/README.md listing how each was made.

    python scripts/make_examples.py            # compare with examples/ (exit 1 and a diff when the emitter drifted)
    python scripts/make_examples.py --write    # regenerate examples/ after an intended change of the emitter

tests/test_examples.py runs the comparison, so an emitter change that alters a checked-in example fails there.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import os
import shlex
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
KEPT = ("train/config.yaml", "train/rewards.json")
CODE_REWARD = '[{"name": "code_execution_reward", "params": {}, "weight": 1.0}]'

# name, what it shows, the emit-config arguments (run from the checkout's root; data under examples/data/)
RUNS = [
    ("qwen2.5-1.5b-h100", "Qwen2.5-1.5B-Instruct, full fine-tune on one H100, colocated vLLM",
     ["--model", "Qwen/Qwen2.5-1.5B-Instruct", "--dataset", "examples/data/arithmetic.jsonl", "--gpu", "H100"]),
    ("qwen2.5-7b-qlora-l4", "Qwen2.5-7B-Instruct, QLoRA on one L4 (24 GB; plain LoRA does not fit with vLLM)",
     ["--model", "Qwen/Qwen2.5-7B-Instruct", "--dataset", "examples/data/arithmetic.jsonl", "--gpu", "L4",
      "--finetune", "qlora"]),
    ("code-sandbox-a100", "a code task scored by code_execution_reward (the bubblewrap sandbox), one A100",
     ["--model", "Qwen/Qwen2.5-Coder-1.5B-Instruct", "--dataset", "examples/data/code.jsonl", "--gpu", "A100",
      "--rewards", CODE_REWARD]),
    ("agentic-vault-cpu", "an agentic run (TRL's tool loop with an environment class) on the embedded agentic tiny "
     "model, AGENTIC_TINY: `mcp_server.agentic.tiny.ensure_agentic_model()` builds it offline (a hub model's "
     "tokenizer would need the network here)",
     ["--model", "AGENTIC_TINY", "--dataset", "examples/data/vaults.jsonl", "--gpu", "cpu",
      "--environment", "mcp_server.agentic.tiny:VaultEnv", "--override", "max_completion_length=256", "--rewards",
      '[{"name": "correctness_reward", "params": {}, "weight": 1.0}]']),
]


def _readme() -> str:
    lines = ["# Emitted runs", "",
             "What `emit-config` writes, checked in: each folder holds `train/config.yaml` (a reason above every value",
             "that differs from TRL's default) and `train/rewards.json`. Each was made from the checkout's root with",
             "the line below it; `python scripts/make_examples.py --write` regenerates them all, and",
             "`tests/test_examples.py` fails when the emitter's output drifts from these files.", ""]
    for name, what, args in RUNS:
        lines += textwrap.wrap(f"- [{name}]({name}/train/config.yaml): {what}.", 118, subsequent_indent="  ")
        lines += ["",
                  "  ```bash", "  llm-finetuning emit-config " + shlex.join(args), "  ```", ""]
    return "\n".join(lines)


def emit_all() -> dict[str, str]:
    """{path under examples/: text} for every example, emitted now in a throwaway workspace."""
    sys.path.insert(0, str(ROOT))
    from mcp_server.cli import main as cli_main

    from mcp_server.agentic.tiny import ensure_agentic_model
    from mcp_server.emission.emit import config_body, stamp_config

    agentic = str(ensure_agentic_model())
    files = {"README.md": _readme()}
    with tempfile.TemporaryDirectory(prefix="llm-finetuning-examples-") as ws:
        os.environ["LLM_FINETUNING_WORKSPACE"] = ws
        here = os.getcwd()
        os.chdir(ROOT)  # the data paths in RUNS are relative to the checkout, as the README lines say
        try:
            for name, _, args in RUNS:
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    argv = [agentic if arg == "AGENTIC_TINY" else arg for arg in args]
                    code = cli_main(["emit-config", *argv, "--run-name", name, "--json"])
                if code not in (0, None):
                    raise SystemExit(f"emit-config for {name} exited {code}:\n{out.getvalue()[-2000:]}")
                run = Path(json.loads(out.getvalue())["run_dir"])
                for kept in KEPT:
                    text = (run / kept).read_text(encoding="utf-8")
                    body = config_body(text) if kept.endswith("config.yaml") else None
                    text = (body or text).replace(str(ROOT) + os.sep, "").replace(str(run), "RUN")
                    text = text.replace(agentic, "AGENTIC_TINY")
                    # the stamp covers what is shown, not this machine's paths
                    files[f"{name}/{kept}"] = stamp_config(text) if body else text
        finally:
            os.chdir(here)
    return files


def differences(now: dict[str, str]) -> list[str]:
    diff: list[str] = []
    on_disk = {p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*") if p.is_file()}
    on_disk = {p for p in on_disk if not p.startswith("data/")}
    for name in sorted(on_disk | set(now)):
        old = (EXAMPLES / name).read_text(encoding="utf-8").splitlines() if name in on_disk else []
        new = now.get(name, "").splitlines()
        diff += difflib.unified_diff(old, new, f"examples/{name}", f"emitted {name}", lineterm="", n=1)
    return diff


def main() -> int:
    now = emit_all()
    if sys.argv[1:] == ["--write"]:
        for name, text in now.items():
            (EXAMPLES / name).parent.mkdir(parents=True, exist_ok=True)
            (EXAMPLES / name).write_text(text, encoding="utf-8")
        print(f"wrote {len(now)} files under examples/")
        return 0
    diff = differences(now)
    print("\n".join(diff) if diff else "examples/ is what the emitter writes")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
