"""CLI door (`llm-finetuning ...`): the same core calls as the MCP tools.

Each command's flags come from its request model, the same pydantic model that is the MCP tool's schema: a field
`max_new_tokens` is the flag `--max-new-tokens`, typed, defaulted, bounded and described by the field (a Literal
gives the choices, a bool a switch, a list or dict takes JSON inline or as @file.json). COMMANDS below holds
only what the command line adds: the positional argument, a flag named otherwise than its field, a shorter help
line, fields left off the command line, and the human-readable summary.

`--json` prints the pydantic result for machines; without it, a short readable summary for people.
Exit code 0 on success (for validation: only when the config is valid), 1 on a failed check, 2 on bad input
(the message names the field or file), 3 on an unexpected error (one line; LLM_FINETUNING_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
import time
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from mcp_server.errors import UserInputError, describe_failure, validation_message
from mcp_server.reporting import silent
from mcp_server.userfiles import read_json


class Flag:
    """How one request field deviates on the command line: `name` ('--timeout' for timeout_s; a bare name such as
    'path' makes it positional), a shorter `help`, `invert` (a true-by-default field as a '--no-...' switch), and
    any other argparse keyword (default, metavar)."""

    def __init__(self, name: str | None = None, help: str | None = None, *, invert: bool = False, **argparse: Any):
        self.name, self.help, self.invert, self.argparse = name, help, invert, argparse


@dataclass
class Command:
    """One command: its request model gives the flags, `core` does the work, `human` renders the result."""

    name: str
    help: str
    core: str  # "module:function", imported when the command runs (the core modules take ~1 s to import)
    human: Callable[[Any], str] | None = None  # the readable summary (None: always JSON)
    ok: Callable[[Any], bool] = lambda result: True  # exit 0 when true, else 1
    request: str | None = None  # "module:Model": the request model the flags come from
    flags: dict[str, Flag] = field(default_factory=dict)  # deviations, by field name
    hide: tuple[str, ...] = ()  # fields not offered on the command line
    whole_request: str | None = None  # help of a --request flag taking the whole request as JSON (flags override it)
    json_help: str = "Print the result as JSON."
    extra: Callable[[argparse.ArgumentParser], None] | None = None  # flags that are no field
    fold: Callable[[argparse.Namespace, dict], None] | None = None  # puts the extra flags into the request data
    handler: Callable[[argparse.Namespace, Any], int] | None = None  # instead of core + print, for an odd command


def _load(ref: str):
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _print(result: BaseModel, as_json: bool, human: Callable[[BaseModel], str] | None = None) -> None:
    if as_json or human is None:
        print(result.model_dump_json(indent=2))
    else:
        print(human(result))


def _progress(args):
    """A long command's progress as lines on stderr, for a person at a terminal (never with --json or when piped)."""
    if args.json or not sys.stderr.isatty():
        return silent
    return lambda done, total, message: print(f"  ... {message}", file=sys.stderr, flush=True)


def _load_json_arg(value: str | None, field: str):
    """A JSON value given inline or as @file.json (a file read like every hand-edited file: userfiles)."""
    if value is None:
        return None
    if value.startswith("@"):
        if not value[1:].strip():
            raise UserInputError(field, "expected @file.json naming a file after the @")
        return read_json(value[1:], field)
    try:
        return json.loads(value)
    except ValueError as exc:
        raise UserInputError(field, f"expected JSON (inline or @file.json): {exc}") from None


# ---------------------------------------------------------------- human-readable summaries
def _render_findings(findings) -> list[str]:
    icons = {"error": "ERROR  ", "warning": "WARN   ", "info": "INFO   "}
    lines = []
    for f in findings:
        lines.append(f"  {icons[f.severity]}{f.code}" + (f" [{f.field}]" if f.field else "") + f": {f.message}")
        if f.fix:
            lines.append(f"         fix: {f.fix}")
    return lines


def _human_validation(result) -> str:
    errors = {f.code for f in result.findings if f.severity == "error"}
    # a config TRL accepts that will not fit the GPU: its own verdict
    head = "VALID" if result.valid else "VALID BUT WILL NOT FIT" if errors == {"memory_does_not_fit"} else "NOT VALID"
    lines = [f"{head} for {result.target} (TRL {result.trl_version})"]
    lines += _render_findings(result.findings) or ["  no findings"]
    return "\n".join(lines)


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


def _parse_ids(value: str | None, field: str) -> list[int]:
    """'3,17,20-25' -> [3, 17, 20, 21, 22, 23, 24, 25]."""
    ids: list[int] = []
    for part in (value or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            ids.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
        except ValueError:
            raise UserInputError(field, f"expected sample ids like '3,17,20-25', got '{part}'") from None
    return ids


def _human_samples(r) -> str:
    return "\n".join(
        [
            f"Sampled {r.num_samples} completions ({r.num_prompts} prompts x {r.n}) with {r.engine} in "
            f"{r.seconds:.1f}s",
            f"  model:     {r.model}",
            f"  samples:   {r.samples_path}",
            f"  truncated: {r.truncated}",
            f"  lengths:   {r.lengths.get('advice', '')}",
            *[f"  DIFFERS FROM THE CONFIG (no verdict on these): {d}" for d in r.differs_from_config],
            f"  next:      {r.next_step}",
        ]
    )


def _human_inspection(r) -> str:
    lines = [
        f"Reviewed {r.num_samples} samples ({r.num_prompts} prompts x {r.samples_per_prompt}); sheet: "
        f"{r.review_md_path}",
        f"  base success rate: {r.base_success_rate:.0%} of {r.rate_prompts} prompts (95% interval "
        f"{r.base_success_interval[0]:.0%}-{r.base_success_interval[1]:.0%}; success: {r.success_rule})",
        f"  zero-variance groups: {r.zero_variance_groups}/{r.num_prompts}; malformed: {r.malformed}; "
        f"well-formed but wrong: {r.well_formed_but_wrong}; truncated: {r.truncated}",
    ]
    for d in r.distributions:
        lines.append(f"  {d.name:<24} mean {d.mean}  std {d.std}  min {d.min}  max {d.max}  zeros {d.zero_share:.0%}")
    lines += [f"  CHECK sample {s.id}: {'; '.join(s.reasons)}" for s in r.likely_misscored]
    lines += [f"  warning: {w}" for w in r.warnings]
    lines.append(("  ROUTE: SFT FIRST. " if r.route == "sft_first" else "  next: ") + r.next_step)
    return "\n".join(lines)


def _human_gate(g) -> str:
    head = "GATE OPEN" if g.passed else "GATE CLOSED"
    return f"{head}: {g.reason}" + (f"\n  to clear: {g.how_to_clear}" if g.how_to_clear else "")


def _human_rewards(catalog) -> str:
    lines = []
    for info in catalog.rewards:
        lines.append(f"{info.name}" + (f"   (dotted path: {info.dotted_path})" if info.dotted_path else ""))
        lines.append(f"  {info.description}")
        for p in info.params:
            default = "required" if p.required else f"default {json.dumps(p.default)}"
            lines.append(f"    {p.name} ({p.type}, {default}): {p.description}")
        lines.append("")
    lines.append(catalog.user_rewards)
    return "\n".join(lines)


def _human_plan(plan) -> str:
    head = {"fits": "FITS", "tight": "FITS (TIGHT)", "does_not_fit": "DOES NOT FIT"}[plan.status]
    lines = [
        f"{head}: {plan.model} on {plan.num_gpus}x {plan.gpu} ({plan.capacity_gib:.1f} GiB each)",
        f"  {plan.params.total/1e9:.2f}B params, {plan.trainable_params/1e6:.1f}M trained; "
        f"peak {plan.peak_gib:.1f} GiB in {plan.peak_phase}, headroom {plan.headroom_gib:+.1f} GiB",
    ]
    lines.append(f"  peak as torch.cuda.max_memory_allocated {plan.peak_allocated_gib:.1f} GiB, max_memory_reserved "
                 f"{plan.peak_reserved_gib:.1f} GiB, nvidia-smi {plan.peak_nvidia_smi_gib:.1f} GiB")
    lines += [f"    {c.name:<20} {c.gib:8.2f} GiB  {c.note}" for c in plan.breakdown]
    launch = plan.launch
    lines.append(f"  launch: {launch.strategy}, {launch.training_processes} training process(es)"
                 + (f"; trl vllm-serve on {launch.vllm_server.gpus} GPU(s) (--tensor_parallel_size "
                    f"{launch.vllm_server.tensor_parallel_size} --data_parallel_size "
                    f"{launch.vllm_server.data_parallel_size} --gpu_memory_utilization "
                    f"{launch.vllm_server.gpu_memory_utilization:g})" if launch.vllm_server else "")
                 + f" - {launch.reason}")
    if plan.server:
        lines.append(f"  vLLM server: {plan.server.gpus} GPU(s), weights {plan.server.weights_gib} GiB, "
                     f"KV {plan.server.kv_cache_gib} GiB")
    if plan.levers:
        lines.append("  levers (GiB saved alone):")
        for lv in plan.levers:
            check = "" if lv.validation is None or lv.validation.valid is None else (
                "  (validates)" if lv.validation.valid else f"  (INVALID: {'; '.join(lv.validation.errors)})")
            lines.append(f"    {lv.name:<24} -{lv.saves_gib:6.1f}  {lv.patch}{check}")
    if plan.recommended:
        r = plan.recommended
        lines.append(f"  smallest set that fits: {', '.join(r.levers)} -> {r.peak_gib:.1f} GiB; set {r.patch}")
    lines.append(f"  anchor ({plan.anchor.size_class}): {plan.anchor.statement}")
    if plan.anchor.consistent is not None:
        lines.append(
            f"    planner: {plan.anchor.planner_check} [{'agrees' if plan.anchor.consistent else 'DISAGREES'}]"
        )
    sp = plan.speed
    lines.append(f"  speed ({sp.engine}, {sp.bandwidth_gbs:.0f} GB/s): {sp.rollout_tokens_per_s:.0f} tok/s rollout, "
                 f"{sp.step_s:.0f} s/step; {sp.verdict}")
    lines += [f"  note: {n}" for n in plan.notes]
    lines += [f"  assumed: {a}" for a in plan.assumptions]
    return "\n".join(lines)


def _human_diagnosis(d) -> str:
    icons = {"error": "ERROR  ", "warning": "WARN   ", "info": "INFO   "}
    lines = [f"{d.summary}", f"  source: {d.source} ({d.source_kind}, {d.steps_logged} logged steps)"]
    for f in d.findings:
        lines.append(f"  {icons[f.severity]}{f.code}: {f.explanation}")
        for e in f.evidence[:4]:
            where = f" @ step {e.step}" if e.step is not None else ""
            lines.append(f"         {e.metric}{where} = {e.value}")
        if f.patch:
            checked = {True: "validates", False: "does NOT validate", None: "not checked"}[f.patch_valid]
            lines.append(f"         patch ({checked}): {json.dumps(f.patch)}")
    return "\n".join(lines)


def _human_evaluation(result) -> str:
    lines = [
        f"{result.model}: {result.passed}/{result.n} passed = {result.pass_rate:.1%} "
        f"(95% CI {result.ci_low:.1%}-{result.ci_high:.1%}) on {result.goldens}",
        f"  goldens sha256 {result.goldens_sha256}",
        f"  baseline: {result.baseline_note}" + (f" ({result.baseline_path})" if result.baseline_path else ""),
    ]
    for item in [i for i in result.items if not i.passed][:3]:
        lines.append(f"  failed #{item.index} (gold {item.answer}): {item.completion[:100]!r}")
    return "\n".join(lines)


def _human_promotion(result) -> str:
    return "\n".join([f"{result.verdict}: {result.checkpoint}", *[f"  {r}" for r in result.reasons],
                      f"  report: {result.report_path}"])


def _human_export(result) -> str:
    return "\n".join([
        f"Exported {result.run_dir} -> {result.export_dir}" + (" (LoRA merged)" if result.merged_lora else ""),
        f"  files: {', '.join(result.files)}",
        f"  model card: {result.model_card}; promotion verdict: {result.promotion_verdict}",
        f"  smoke test ({result.smoke_items} goldens, greedy before/after): "
        + ("identical" if result.smoke_identical else "DIFFERENT"),
    ])


def _human_env(r) -> str:
    lines = [f"{r.verdict.upper()}: {r.allows}", f"  python: {r.python}"]
    for g in r.gpus:
        lines.append(f"  GPU {g.index}: {g.name}, {g.memory_gib:.0f} GiB, cc {g.compute_capability}, bf16 "
                     f"{'yes' if g.bf16 else 'no'}")
    lines.append("  packages: " + ", ".join(f"{k} {v or '-'}" for k, v in r.packages.items()))
    lines.append(
        f"  RAM {r.ram_gib} GiB, free disk {r.free_disk_gib} GiB" + (f", target {r.target}" if r.target else "")
    )
    lines += [f"  BLOCKED  {b}" for b in r.blockers] + [f"  WARN     {w}" for w in r.warnings]
    lines.append(f"  report: {r.report_path}")
    return "\n".join(lines)


def _human_prepare(r) -> str:
    lines = [f"{r.status.upper()}: {r.message}", f"  python: {r.python}", f"  log:    {r.log_path}"]
    if r.status != "running" and r.log_tail:
        lines += ["  last lines of the log:"] + [f"    {line}" for line in r.log_tail]
    return "\n".join(lines)


def _human_launch(r) -> str:
    lines = [r.message]
    for ref in r.refusals:
        lines += [f"  REFUSED by the {ref.gate} gate: {ref.message}", f"     to clear: {ref.how_to_clear}"]
    if r.launched:
        lines += [f"  command: {' '.join(r.command)}", f"  log:     {r.log_path}"]
    if r.slurm_script:
        lines.append(f"  SLURM script: {r.slurm_script}")
    return "\n".join(lines)


def _human_status(r) -> str:
    lines = [r.message]
    keys = ("reward", "reward_std", "kl", "entropy", "completion_mean_length", "clipped_ratio", "loss", "grad_norm")
    shown = [f"{k}={r.latest[k]:.4g}" for k in keys if isinstance(r.latest.get(k), (int, float))]
    if shown:
        lines.append("  latest: " + ", ".join(shown))
    if r.steps_per_s:
        lines.append(
            f"  speed: {r.steps_per_s:.3g} steps/s" + (f", ETA {r.eta_s / 60:.1f} min" if r.eta_s is not None else "")
        )
    for flag in r.health:
        lines.append(f"  {flag.severity.upper():8}{flag.code}: {flag.explanation}")
    if r.health_note:
        lines.append(f"  health: {r.health_note}")
    if r.state == "failed" and r.log_tail:
        lines += ["  log tail:"] + [f"    {line}" for line in r.log_tail[-10:]]
    if r.plot_path:
        lines.append(f"  plot: {r.plot_path}")
    return "\n".join(lines)


def _human_runs(r) -> str:
    if not r.runs:
        return f"no runs under {r.runs_root}"
    return "\n".join(f"{x.run:40} {x.state:13} " + (x.error or "") if x.error else
                     f"{x.run:40} {x.state:13} step {x.step if x.step is not None else '-'}/{x.max_steps or '?'}  "
                     f"{x.model or ''}"
                     for x in r.runs)


# ---------------------------------------------------------------- flags from the request model
def _plain(annotation):
    """The field's type without None and Annotated constraints: `PathText | None` -> str."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _takes_json(kind) -> bool:
    """A list, dict, model or union of several types: given as JSON on the command line."""
    origin = typing.get_origin(kind)
    if origin in (list, dict, typing.Union, types.UnionType):
        return True
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _add_field(p: argparse.ArgumentParser, cmd: Command, name: str, info) -> tuple[str, str, str]:
    """Add one field's argument; returns (field, how its value is read: value|json|switch|invert, flag)."""
    spec = cmd.flags.get(name, Flag())
    flag = spec.name or "--" + name.replace("_", "-")
    kind = _plain(info.annotation)
    default = info.default if info.default is not PydanticUndefined and not cmd.whole_request else None
    kw: dict[str, Any] = {"help": spec.help or (info.description or "").replace("%", "%%")}
    read = "value"
    if _takes_json(kind) and not spec.invert:
        kw["help"] += " As JSON (inline or @file.json)."
    if spec.invert:
        kw["action"], read = "store_true", "invert"
    elif kind is bool:
        kw["action"] = argparse.BooleanOptionalAction if default is None else "store_true"
        read = "value" if default is None else "switch"
    elif typing.get_origin(kind) is typing.Literal:
        choices = list(typing.get_args(kind))
        kw.update(choices=choices, default=default)
        if not isinstance(choices[0], str):
            kw["type"] = type(choices[0])
    elif _takes_json(kind):
        read = "json"
    else:
        kw["default"] = default
        if kind in (int, float):
            kw["type"] = kind
    if not flag.startswith("-"):  # positional
        p.add_argument(name, **({"metavar": flag} if flag != name else {}), **{**kw, **spec.argparse})
        return name, read, flag
    kw["dest"] = name
    if spec.name and "action" not in kw:  # a renamed flag shows its own name, not the field's
        kw["metavar"] = flag.lstrip("-").replace("-", "_").upper()
    if info.is_required() and not cmd.whole_request and "default" not in spec.argparse:
        kw["required"] = True
    p.add_argument(flag, **{**kw, **spec.argparse})
    return name, read, flag


def _add_arguments(p: argparse.ArgumentParser, cmd: Command) -> None:
    fields = []
    if cmd.whole_request:
        p.add_argument("--request", help=cmd.whole_request)
    if cmd.request:
        model = _load(cmd.request)
        if stale := (set(cmd.flags) | set(cmd.hide)) - set(model.model_fields):  # a field renamed in the model
            raise ValueError(f"{cmd.name}: {model.__name__} has no field {', '.join(sorted(stale))}")
        fields = [_add_field(p, cmd, name, info) for name, info in model.model_fields.items() if name not in cmd.hide]
    if cmd.extra:
        cmd.extra(p)
    p.add_argument("--json", action="store_true", help=cmd.json_help)
    p.set_defaults(_command=cmd, _fields=fields)


def _request(cmd: Command, args: argparse.Namespace):
    """The request model from the flags: a flag not given leaves the field's default (or --request's value)."""
    data = (_load_json_arg(args.request, "--request") or {}) if cmd.whole_request else {}
    if not isinstance(data, dict):
        raise UserInputError("--request", f"expected a JSON object of the request's fields, got {type(data).__name__}")
    for name, read, flag in args._fields:
        value = getattr(args, name)
        if value is None or (value is False and read in ("switch", "invert")):
            continue
        data[name] = False if read == "invert" else _load_json_arg(value, flag) if read == "json" else value
    if cmd.fold:
        cmd.fold(args, data)
    model = _load(cmd.request)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise UserInputError("request", validation_message(exc, model, "request")) from None


def _run(args: argparse.Namespace) -> int:
    cmd: Command = args._command
    request = _request(cmd, args) if cmd.request else None
    if cmd.handler:
        return cmd.handler(args, request)
    core = _load(cmd.core)
    kwargs = {"report": _progress(args)} if "report" in inspect.signature(core).parameters else {}
    result = core(request, **kwargs) if request is not None else core(**kwargs)
    _print(result, args.json, cmd.human)
    return 0 if cmd.ok(result) else 1


# ---------------------------------------------------------------- commands that add flags of their own
def _add_overrides(p) -> None:
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="Set a GRPOConfig field (repeatable).")


def _fold_overrides(args, data: dict) -> None:
    for item in args.override or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise UserInputError("--override", f"expected KEY=VALUE, got '{item}'")
        overrides = data.setdefault("overrides", {})
        if not isinstance(overrides, dict):  # --request gave overrides that are not a mapping
            raise UserInputError("--override", "the request's overrides must be a JSON object of fields")
        try:
            overrides[key] = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON: the text itself
            overrides[key] = raw


def _add_sample_ids(p) -> None:
    p.add_argument("--agree", help="Sample ids agreed with, e.g. '0-9,12'.")
    p.add_argument("--disagree", help="Sample ids disagreed with, e.g. '3,17'.")


def _fold_sample_ids(args, data: dict) -> None:
    verdicts = data.get("sample_verdicts") or []
    if not isinstance(verdicts, list):
        raise UserInputError("--verdicts", "expected a JSON list of {id, agree, note}")
    verdicts += [{"id": i, "agree": True} for i in _parse_ids(args.agree, "--agree")]
    verdicts += [{"id": i, "agree": False} for i in _parse_ids(args.disagree, "--disagree")]
    data["sample_verdicts"] = verdicts


def _check_gate(args, request) -> int:
    result = _load("mcp_server.inspection.gate:check_inspection_gate")(request.run)
    _print(result, args.json, _human_gate)
    return 0 if result.passed else 1


def _add_wait(p) -> None:
    p.add_argument("--wait", action="store_true", help="Wait until the build is ready or has failed.")


def _prepare(args, request) -> int:
    prepare_environment = _load("mcp_server.training.prepare:prepare_environment")
    result = prepare_environment(request)
    if args.wait and not args.json:
        print(_human_prepare(result), flush=True)
    while args.wait and result.status == "running":
        time.sleep(5)
        result = prepare_environment(type(request)(path=request.path))
    _print(result, args.json, _human_prepare)
    return 1 if result.status == "failed" else 0


def _add_demo_flags(p) -> None:
    p.add_argument("--quick", action="store_true", help="A shortened walk (fewer steps): checks the plumbing, "
                   "does not aim to improve the model.")
    p.add_argument("--run-name", help="Slug for runs/<date>-<slug>/ (default: demo, or demo-quick with --quick).")


def _demo(args, request) -> int:
    summary = _load("mcp_server.demo:run_demo")(quick=args.quick, run_name=args.run_name, as_json=args.json)
    if args.json:
        print(summary.model_dump_json(indent=2))
    return 0 if summary.ok else 1


# ---------------------------------------------------------------- the commands
RECIPE, INSPECTION, MEMORY = "mcp_server.recipe.models:", "mcp_server.inspection.models:", "mcp_server.memory.models:"
EVALUATION, TRAINING = "mcp_server.evaluation.models:", "mcp_server.training.models:"
RUN = Flag("run")

COMMANDS = [
    Command(
        "validate-config", "Validate a GRPO config YAML for the installed TRL and a target GPU.",
        "mcp_server.memory.verdict:validate_config", _human_validation, lambda r: r.valid, RECIPE + "ValidateRequest",
        hide=("config",), flags={"config_path": Flag("path")},
    ),
    Command(
        "emit-config", "Emit a validated GRPO config and train.py into a run directory.",
        "mcp_server.emission.emit:emit_grpo_config", _human_emit, lambda r: r.validation.valid,
        RECIPE + "GRPORecipeRequest",
        whole_request="The whole request as JSON (inline or @file.json); flags override it.",
        hide=("dataset_config", "dataset_split", "prompt_column", "answer_column", "lora_r", "lora_alpha",
              "lora_target_modules", "overrides", "override_reason"),
        extra=_add_overrides, fold=_fold_overrides,
    ),
    Command(
        "sample-completions", "Sample n completions per prompt into <run>/inspection/samples.jsonl.",
        "mcp_server.inspection.sampling:sample_completions", _human_samples, request=INSPECTION + "SampleRequest",
        flags={"run": RUN},
    ),
    Command(
        "inspect-rewards", "Score the samples with the run's rewards and write inspection/review.md.",
        "mcp_server.inspection.review:inspect_rewards", _human_inspection, lambda r: r.grpo_can_learn,
        INSPECTION + "InspectRequest", flags={"run": RUN},
    ),
    Command(
        "record-inspection-verdict", "Record a person's verdict on review.md (the gate's sign-off).",
        "mcp_server.inspection.gate:record_inspection_verdict",
        lambda r: f"Recorded '{r.verdict}' by {r.reviewer} ({r.agree} agree, {r.disagree} disagree of {r.reviewed}) "
        f"in {r.verdict_path}\n{_human_gate(r.gate)}",
        request=INSPECTION + "VerdictRequest", extra=_add_sample_ids, fold=_fold_sample_ids, flags={
            "run": RUN,
            "sample_verdicts": Flag("--verdicts"),
            "agree_with_rest": Flag("--agree-rest"),
        },
    ),
    Command(
        "check-inspection-gate", "Is the run cleared to train? Exit 0 only when the gate is open.",
        "mcp_server.inspection.gate:check_inspection_gate", request=INSPECTION + "GateRequest", handler=_check_gate,
        flags={"run": RUN},
    ),
    Command(
        "list-rewards", "List the reward registry: names, what each scores, parameters.",
        "mcp_server.rewards.registry:list_rewards", _human_rewards,
    ),
    Command(
        "plan-memory", "Will a GRPO run fit the GPU? Breakdown, levers, launch layout, anchor, rollout speed. Exit 0 "
        "when it fits, 1 when not.", "mcp_server.memory.planner:plan_memory", _human_plan, lambda r: r.fits,
        MEMORY + "MemoryPlanRequest",
        whole_request="The whole MemoryPlanRequest as JSON (inline or @file.json); flags override it.",
        hide=("architecture", "config", "lora_target_modules", "lora_dropout", "steps_per_generation",
              "vllm_tensor_parallel_size", "vllm_server_gpus", "fsdp", "fused_logits", "attn_implementation"),
        flags={
            "config_path": Flag("--config", metavar="CONFIG_PATH"),
            "validate_levers": Flag("--no-validate", "Skip validating each lever's config change.", invert=True),
        },
    ),
    Command(
        "evaluate-model", "Greedy pass rate (95%% Wilson CI) of a model on goldens; the first evaluation of a base "
        "model writes eval/baseline-<model>.json (never overwritten).", "mcp_server.evaluation.evaluate:evaluate_model",
        _human_evaluation, request=EVALUATION + "EvaluateRequest", hide=("seed", "batch_size"), flags={
            "model": Flag("model"),
            "goldens": Flag(default="tiny"),
        },
    ),
    Command(
        "promote-checkpoint", "PROMOTE or REJECT a run's checkpoint against the baseline and the drift budget; writes "
        "promotion-report.md. Exit 0 only on PROMOTE.", "mcp_server.evaluation.promote:promote_checkpoint",
        _human_promotion, lambda r: r.verdict == "PROMOTE", EVALUATION + "PromoteRequest",
        hide=("rerun_seeds", "rerun_temperature", "min_improvement_points"), flags={"run": RUN},
    ),
    Command(
        "export-model", "Merge LoRA if any, save safetensors + tokenizer + model card into <run>/export/, smoke-test "
        "greedy outputs before/after.", "mcp_server.evaluation.export:export_model", _human_export,
        lambda r: r.smoke_identical, EVALUATION + "ExportRequest", hide=("smoke_items",), flags={"run": RUN},
    ),
    Command(
        "demo", "Walk all seven phases on the embedded tiny model: baseline, SFT warm-start, inspection, config, GRPO "
        "training, diagnosis, promotion, export (a few minutes on CPU).", "mcp_server.demo:run_demo",
        json_help="Print the summary as JSON at the end.", extra=_add_demo_flags, handler=_demo,
    ),
    Command(
        "diagnose-run", "Diagnose a training run from its metrics (run dir, progress.jsonl, trainer_state.json, "
        "CSV/JSONL export) and log. Exit 0 when healthy, 1 with problems.", "mcp_server.training.diagnose:diagnose_run",
        _human_diagnosis, lambda r: r.healthy, TRAINING + "DiagnoseRequest", flags={
            "source": Flag("source"),
            "config_path": Flag("--config"),
            "log_path": Flag("--log"),
            "validate_patches": Flag("--no-validate", "Skip validating the patches (faster; no TRL import).",
                                     invert=True),
        },
    ),
    Command(
        "check-environment", "GPUs, CUDA, RAM, disk, package versions and a verdict; writes env-report.json.",
        "mcp_server.training.environment:check_environment", _human_env, lambda r: r.verdict != "blocked",
        TRAINING + "EnvironmentRequest", json_help="Print the report as JSON.",
    ),
    Command(
        "prepare-environment", "Build a training environment (torch, TRL, transformers) in the background; run "
        "again for its status.", "mcp_server.training.prepare:prepare_environment", _human_prepare,
        request=TRAINING + "PrepareRequest", extra=_add_wait, handler=_prepare,
    ),
    Command(
        "launch-training", "Start a run's training (detached) once its gates pass.",
        "mcp_server.training.launch:launch_training", _human_launch, lambda r: bool(r.launched or r.slurm_script),
        TRAINING + "LaunchRequest", flags={"run": RUN},
    ),
    Command(
        "training-status", "State, latest metrics, speed, ETA and health of a run.",
        "mcp_server.training.status:training_status", _human_status, request=TRAINING + "StatusRequest",
        json_help="Print the status as JSON.", flags={"run": RUN},
    ),
    Command(
        "stop-training", "Stop a run gracefully (checkpoint saved), kill it after a timeout.",
        "mcp_server.training.status:stop_training", lambda r: r.message, request=TRAINING + "StopRequest",
        flags={"run": RUN, "timeout_s": Flag("--timeout")},
    ),
    Command(
        "resume-training", "Continue a run from its latest checkpoint (same config hash).",
        "mcp_server.training.launch:resume_training", _human_launch, lambda r: r.launched, TRAINING + "RunRequest",
        flags={"run": RUN},
    ),
    Command(
        "list-runs", "Every run under runs/ with its state.", "mcp_server.training.status:list_runs", _human_runs,
        json_help="Print the list as JSON.",
    ),
]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only`, the flags of that command alone (what one run needs: the others' request
    models are not imported)."""
    parser = argparse.ArgumentParser(prog="llm-finetuning", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help)
        if only in (None, cmd.name):
            _add_arguments(p, cmd)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = {cmd.name for cmd in COMMANDS}
    parser = build_parser(only=next((a for a in argv if a in names), "") if argv else "")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except (UserInputError, ValidationError, OSError) as exc:  # bad input, or a file the system refused
        print(f"error: {describe_failure(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug: one line, the traceback only on request
        if os.environ.get("LLM_FINETUNING_DEBUG"):
            raise
        print(f"error: {describe_failure(exc)} (set LLM_FINETUNING_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
