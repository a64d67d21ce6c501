"""Count hand-typed TRL field names in the package (issue 46's measure).

A hand-typed field name is a string literal whose whole text is the name of a field of the generated TRL table
(`mcp_server.config.grpo_fields.GRPOView`: GRPOConfig, ModelConfig and the GRPO script's arguments), anywhere in
`mcp_server` except that generated table itself. The other side of the measure is the checked form,
`FIELD.<name>` (`mcp_server.config.FIELD`). Run from the repository root:

    python scripts/count_field_names.py            # the totals and the ten modules with the most
    python scripts/count_field_names.py --top 0    # every module
    python scripts/count_field_names.py --json     # the same as one JSON object
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp_server.config.grpo_fields import GRPOView  # noqa: E402

PACKAGE = ROOT / "mcp_server"
GENERATED = PACKAGE / "config" / "grpo_fields.py"


def count(package: Path = PACKAGE) -> dict:
    names = set(GRPOView.DEFAULTS)
    literals: Counter = Counter()
    checked: Counter = Counter()
    for path in sorted(package.rglob("*.py")):
        if path == GENERATED:
            continue
        module = path.relative_to(package.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                literals[module] += 1
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "FIELD"
                  and node.attr in names):
                checked[module] += 1
    return {"literals": sum(literals.values()), "modules": len(literals), "field_uses": sum(checked.values()),
            "by_module": dict(literals.most_common())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="modules to list, most first (0: all)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = count()
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"hand-typed TRL field names: {result['literals']} in {result['modules']} modules; "
          f"FIELD.<name> uses: {result['field_uses']}")
    listed = list(result["by_module"].items())
    for module, n in listed[:args.top] if args.top else listed:
        print(f"{n:5d}  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
