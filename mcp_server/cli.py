"""CLI door (`llm-finetuning ...`): the same core calls as the MCP tools.

`--json` prints the pydantic result for machines; without it, a short readable summary for people.
Exit code 0 on success (for validation: only when the config is valid), 1 on a failed check, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from pydantic import BaseModel, ValidationError

from mcp_server.errors import UserInputError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def _print(result: BaseModel, as_json: bool, human: Callable[[BaseModel], str] | None = None) -> None:
    if as_json or human is None:
        print(result.model_dump_json(indent=2))
    else:
        print(human(result))


def _parse_model(model_cls, data: dict, what: str):
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or what}: {e['msg']}" for e in exc.errors())
        raise UserInputError(what, problems) from None


def _load_json_arg(value: str | None, field: str):
    """A JSON value given inline or as @file.json."""
    if value is None:
        return None
    try:
        if value.startswith("@"):
            with open(value[1:], encoding="utf-8") as handle:
                return json.load(handle)
        return json.loads(value)
    except (OSError, json.JSONDecodeError) as exc:
        raise UserInputError(field, f"expected JSON (inline or @file.json): {exc}") from None


def _render_findings(findings) -> list[str]:
    icons = {"error": "ERROR  ", "warning": "WARN   ", "info": "INFO   "}
    lines = []
    for f in findings:
        lines.append(f"  {icons[f.severity]}{f.code}" + (f" [{f.field}]" if f.field else "") + f": {f.message}")
        if f.fix:
            lines.append(f"         fix: {f.fix}")
    return lines


# ---------------------------------------------------------------- recipe (configs)
def _human_validation(result) -> str:
    head = "VALID" if result.valid else "NOT VALID"
    lines = [f"{head} for {result.target} (TRL {result.trl_version})"]
    lines += _render_findings(result.findings) or ["  no findings"]
    return "\n".join(lines)


def cmd_validate_config(args) -> int:
    from mcp_server.recipe.models import ValidateRequest
    from mcp_server.recipe.validate import validate_config

    request = ValidateRequest(config_path=args.path, gpu=args.gpu, num_gpus=args.num_gpus)
    result = validate_config(request)
    _print(result, args.json, _human_validation)
    return 0 if result.valid else 1


def _human_emit(result) -> str:
    lines = [
        f"Emitted GRPO config ({result.variant}: {result.variant_reason})",
        f"  run dir:   {result.run_dir}",
        f"  config:    {result.config_path}",
        f"  script:    {result.train_script_path}",
        f"  schema:    {result.schema_path}",
        f"  run with:  {result.launch_command}",
        _human_validation(result.validation),
    ]
    return "\n".join(lines)


def cmd_emit_config(args) -> int:
    from mcp_server.recipe.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    data = _load_json_arg(args.request, "request") or {}
    for key in ("model", "dataset", "gpu", "num_gpus", "finetune", "variant", "symptom", "run_name", "run_dir"):
        value = getattr(args, key, None)
        if value is not None:
            data[key] = value
    if args.override:
        overrides = data.setdefault("overrides", {})
        for item in args.override:
            key, sep, raw = item.partition("=")
            if not sep:
                raise UserInputError("--override", f"expected KEY=VALUE, got '{item}'")
            try:
                overrides[key] = json.loads(raw)
            except json.JSONDecodeError:
                overrides[key] = raw
    if args.rewards:
        data["rewards"] = _load_json_arg(args.rewards, "--rewards")
    request = _parse_model(GRPORecipeRequest, data, "request")
    result = emit_grpo_config(request)
    _print(result, args.json, _human_emit)
    return 0 if result.validation.valid else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llm-finetuning", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate-config", help="Validate a GRPO config YAML for the installed TRL and a target GPU.")
    p.add_argument("path", help="Path to the YAML config.")
    p.add_argument("--gpu", help="Target GPU type (H100, A100, T4, ...).")
    p.add_argument("--num-gpus", type=int, help="Target GPU count.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_validate_config)

    p = sub.add_parser("emit-config", help="Emit a validated GRPO config and train.py into a run directory.")
    p.add_argument("--request", help="The whole request as JSON (inline or @file.json); flags override it.")
    p.add_argument("--model", help="Hub name, local path, or 'tiny'.")
    p.add_argument("--dataset", help="Hub name, local file, or 'tiny'.")
    p.add_argument("--gpu", help="Target GPU type.")
    p.add_argument("--num-gpus", type=int, help="Target GPU count.")
    p.add_argument("--finetune", choices=["full", "lora", "qlora"])
    p.add_argument("--variant", choices=["grpo", "dapo", "dr_grpo", "gspo"])
    p.add_argument("--symptom", choices=["entropy_collapse", "length_bias", "moe_instability", "truncated_completions"])
    p.add_argument("--rewards", help="Reward specs as JSON list (inline or @file.json).")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="Set a GRPOConfig field (repeatable).")
    p.add_argument("--run-name", help="Slug for runs/<date>-<slug>/.")
    p.add_argument("--run-dir", help="Existing run directory to write into.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_emit_config)

    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"error: {problems}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
