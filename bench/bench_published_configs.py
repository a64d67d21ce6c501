"""Benchmark: what validate_grpo_config says of GRPO configs others published and ran (issue 44).

Each config under tests/fixtures/published_configs/ ran as published (its header gives the source, the launch and
every translation to TRL 1.16 names); targets.json gives the hardware it ran on. Each is validated for that target
through the public door (memory.verdict.validate_config, the core of validate_grpo_config and `validate-config`),
and every error and warning is printed: an error on one of these is a false error (the run happened), a warning
must say something true of it.

Prints per config: the verdict, then each error and warning as `severity code [field]: message`; then a summary
line (configs called INVALID, errors, warnings) and the same as JSON with --json.

    PYTHONPATH=. .venv/bin/python bench/bench_published_configs.py [--json]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "published_configs"


def validate(path: Path, target: dict):
    from mcp_server.memory.verdict import validate_config
    from mcp_server.recipe.models import ValidateRequest

    return validate_config(ValidateRequest(config_path=str(path), gpu=target["gpu"], num_gpus=target["num_gpus"],
                                           vllm_server_gpus=target.get("vllm_server_gpus")))


def main() -> None:
    targets = {k: v for k, v in json.loads((CORPUS / "targets.json").read_text()).items() if not k.startswith("_")}
    rows = []
    for name, target in sorted(targets.items()):
        result = validate(CORPUS / f"{name}.yaml", target)
        shown = [f for f in result.findings if f.severity in ("error", "warning")]
        rows.append({"config": name, "target": result.target, "valid": result.valid,
                     "errors": [{"code": f.code, "field": f.field, "message": f.message}
                                for f in shown if f.severity == "error"],
                     "warnings": [{"code": f.code, "field": f.field, "message": f.message}
                                  for f in shown if f.severity == "warning"]})
    invalid = sum(not r["valid"] for r in rows)
    errors = sum(len(r["errors"]) for r in rows)
    warnings = sum(len(r["warnings"]) for r in rows)
    if "--json" in sys.argv:
        print(json.dumps({"configs": len(rows), "invalid": invalid, "errors": errors, "warnings": warnings,
                          "rows": rows}, indent=1))
        return
    for r in rows:
        print(f"{r['config']}  ({r['target']}): {'VALID' if r['valid'] else 'INVALID'}")
        for kind in ("errors", "warnings"):
            for f in r[kind]:
                print(f"  {kind[:-1]} {f['code']} [{f['field']}]: {f['message']}")
    print(f"\n{invalid} of {len(rows)} published configs called INVALID; {errors} errors "
          f"(each one false: these runs happened), {warnings} warnings "
          f"in {sum(bool(r['warnings']) for r in rows)} configs")


if __name__ == "__main__":
    main()
