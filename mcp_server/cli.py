"""CLI door (`llm-finetuning ...`): the same core calls as the MCP tools.

`--json` prints the pydantic result for machines; without it, a short readable summary for people.
Exit code 0 on success (for validation: only when the config is valid), 1 on a failed check, 2 on bad input
(the message names the field or file), 3 on an unexpected error (one line; LLM_FINETUNING_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable

from pydantic import BaseModel, ValidationError

from mcp_server.errors import UserInputError, describe_failure, validation_message

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
        raise UserInputError(what, validation_message(exc, model_cls, what)) from None


def _progress(args):
    """A long command's progress as lines on stderr, for a person at a terminal (never with --json or when piped)."""
    from mcp_server.reporting import silent

    if args.json or not sys.stderr.isatty():
        return silent
    return lambda done, total, message: print(f"  ... {message}", file=sys.stderr, flush=True)


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
    from mcp_server.emission.emit import emit_grpo_config
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


# ---------------------------------------------------------------- inspection gate (H6)
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
            f"Sampled {r.num_samples} completions ({r.num_prompts} prompts x {r.n}) with {r.engine} in {r.seconds:.1f}s",
            f"  model:     {r.model}",
            f"  samples:   {r.samples_path}",
            f"  truncated: {r.truncated}",
            f"  next:      {r.next_step}",
        ]
    )


def cmd_sample_completions(args) -> int:
    from mcp_server.inspection.models import SampleRequest
    from mcp_server.inspection.sampling import sample_completions

    fields = ("model", "dataset", "dataset_config", "dataset_split", "prompt_column", "num_prompts", "n",
              "temperature", "top_p", "top_k", "max_new_tokens", "seed", "engine", "batch_size")
    data = {"run": args.run, **{k: getattr(args, k) for k in fields if getattr(args, k) is not None}}
    result = sample_completions(_parse_model(SampleRequest, data, "request"), report=_progress(args))
    _print(result, args.json, _human_samples)
    return 0


def _human_inspection(r) -> str:
    lines = [
        f"Reviewed {r.num_samples} samples ({r.num_prompts} prompts x {r.samples_per_prompt}); sheet: {r.review_md_path}",
        f"  base success rate: {r.base_success_rate:.0%} (success: {r.success_rule})",
        f"  zero-variance groups: {r.zero_variance_groups}/{r.num_prompts}; malformed: {r.malformed}; "
        f"well-formed but wrong: {r.well_formed_but_wrong}; truncated: {r.truncated}",
    ]
    for d in r.distributions:
        lines.append(f"  {d.name:<24} mean {d.mean}  std {d.std}  min {d.min}  max {d.max}  zeros {d.zero_share:.0%}")
    lines += [f"  CHECK sample {s.id}: {'; '.join(s.reasons)}" for s in r.likely_misscored]
    lines += [f"  warning: {w}" for w in r.warnings]
    lines.append(("  ROUTE: SFT FIRST. " if r.route == "sft_first" else "  next: ") + r.next_step)
    return "\n".join(lines)


def cmd_inspect_rewards(args) -> int:
    from mcp_server.inspection.models import InspectRequest
    from mcp_server.inspection.review import inspect_rewards

    data = {"run": args.run, "max_samples": args.max_samples, "max_suspects": args.max_suspects}
    if args.rewards:
        data["rewards"] = _load_json_arg(args.rewards, "--rewards")
    if args.success_threshold is not None:
        data["success_threshold"] = args.success_threshold
    result = inspect_rewards(_parse_model(InspectRequest, data, "request"), report=_progress(args))
    _print(result, args.json, _human_inspection)
    return 0 if result.grpo_can_learn else 1


def _human_gate(g) -> str:
    head = "GATE OPEN" if g.passed else "GATE CLOSED"
    return f"{head}: {g.reason}" + (f"\n  to clear: {g.how_to_clear}" if g.how_to_clear else "")


def cmd_record_inspection_verdict(args) -> int:
    from mcp_server.inspection.gate import record_inspection_verdict
    from mcp_server.inspection.models import VerdictRequest

    verdicts = _load_json_arg(args.verdicts, "--verdicts") or []
    if not isinstance(verdicts, list):
        raise UserInputError("--verdicts", "expected a JSON list of {id, agree, note}")
    verdicts += [{"id": i, "agree": True} for i in _parse_ids(args.agree, "--agree")]
    verdicts += [{"id": i, "agree": False} for i in _parse_ids(args.disagree, "--disagree")]
    data = {
        "run": args.run, "verdict": args.verdict, "reviewer": args.reviewer, "sample_verdicts": verdicts,
        "agree_with_rest": args.agree_rest, "note": args.note or "",
    }
    result = record_inspection_verdict(_parse_model(VerdictRequest, data, "request"))
    _print(
        result,
        args.json,
        lambda r: f"Recorded '{r.verdict}' by {r.reviewer} ({r.agree} agree, {r.disagree} disagree of {r.reviewed}) "
        f"in {r.verdict_path}\n{_human_gate(r.gate)}",
    )
    return 0


def cmd_check_inspection_gate(args) -> int:
    from mcp_server.inspection.gate import check_inspection_gate

    result = check_inspection_gate(args.run)
    _print(result, args.json, _human_gate)
    return 0 if result.passed else 1


def add_inspection_commands(sub) -> None:
    p = sub.add_parser("sample-completions", help="Sample n completions per prompt into <run>/inspection/samples.jsonl.")
    p.add_argument("run", help="Run directory or name under runs/.")
    p.add_argument("--model", help="Local model directory, 'tiny', or hub name (default: the run's config).")
    p.add_argument("--dataset", help="Local .jsonl/.json/.csv/.parquet, directory, 'tiny' or hub name (default: config).")
    p.add_argument("--dataset-config", help="Hub data set configuration.")
    p.add_argument("--dataset-split", help="Split to read (default train).")
    p.add_argument("--prompt-column", help="Prompt column (default prompt).")
    p.add_argument("--num-prompts", type=int, help="Prompts to draw (default 64 // n).")
    p.add_argument("--n", type=int, help="Completions per prompt (default: num_generations, else TRL's 8).")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--top-k", type=int)
    p.add_argument("--max-new-tokens", type=int, help="Default: max_completion_length from the config, else TRL's 512.")
    p.add_argument("--seed", type=int)
    p.add_argument("--engine", choices=["auto", "transformers", "vllm"])
    p.add_argument("--batch-size", type=int, help="Sequences per generate call (default 64).")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_sample_completions)

    p = sub.add_parser("inspect-rewards", help="Score the samples with the run's rewards and write inspection/review.md.")
    p.add_argument("run", help="Run directory or name under runs/.")
    p.add_argument("--rewards", help="Reward specs as a JSON list (inline or @file.json); default train/rewards.json.")
    p.add_argument("--max-samples", type=int, default=100, help="Review at most this many samples (50-100).")
    p.add_argument("--success-threshold", type=float, help="Success = total reward >= this (default: task rewards > 0).")
    p.add_argument("--max-suspects", type=int, default=10, help="Likely mis-scored samples to list.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_inspect_rewards)

    p = sub.add_parser("record-inspection-verdict", help="Record a person's verdict on review.md (the gate's sign-off).")
    p.add_argument("run", help="Run directory or name under runs/.")
    p.add_argument("--verdict", required=True, choices=["pass", "fail"], help="Overall verdict on the rewards.")
    p.add_argument("--reviewer", required=True, help="Who read the review.")
    p.add_argument("--agree", help="Sample ids agreed with, e.g. '0-9,12'.")
    p.add_argument("--disagree", help="Sample ids disagreed with, e.g. '3,17'.")
    p.add_argument("--agree-rest", action="store_true", help="Agree with every reviewed sample not listed.")
    p.add_argument("--verdicts", help="Per-sample verdicts as JSON [{id, agree, note}] (inline or @file.json).")
    p.add_argument("--note", help="Overall note (required for a pass with disagreements).")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_record_inspection_verdict)

    p = sub.add_parser("check-inspection-gate", help="Is the run cleared to train? Exit 0 only when the gate is open.")
    p.add_argument("run", help="Run directory or name under runs/.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_check_inspection_gate)


# ---------------------------------------------------------------- rewards (H1)
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


def cmd_list_rewards(args) -> int:
    from mcp_server.rewards.registry import list_rewards

    _print(list_rewards(), args.json, _human_rewards)
    return 0


def add_rewards_commands(sub) -> None:
    p = sub.add_parser("list-rewards", help="List the reward registry: names, what each scores, parameters.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_list_rewards)


# ---------------------------------------------------------------- memory planner (H2)
def _human_plan(plan) -> str:
    head = {"fits": "FITS", "tight": "FITS (TIGHT)", "does_not_fit": "DOES NOT FIT"}[plan.status]
    lines = [
        f"{head}: {plan.model} on {plan.num_gpus}x {plan.gpu} ({plan.capacity_gib:.1f} GiB each)",
        f"  {plan.params.total/1e9:.2f}B params, {plan.trainable_params/1e6:.1f}M trained; "
        f"peak {plan.peak_gib:.1f} GiB in {plan.peak_phase}, headroom {plan.headroom_gib:+.1f} GiB",
    ]
    lines += [f"    {c.name:<20} {c.gib:8.2f} GiB  {c.note}" for c in plan.breakdown]
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
        lines.append(f"    planner: {plan.anchor.planner_check} [{'agrees' if plan.anchor.consistent else 'DISAGREES'}]")
    sp = plan.speed
    lines.append(f"  speed ({sp.engine}, {sp.bandwidth_gbs:.0f} GB/s): {sp.rollout_tokens_per_s:.0f} tok/s rollout, "
                 f"{sp.step_s:.0f} s/step; {sp.verdict}")
    lines += [f"  note: {n}" for n in plan.notes]
    return "\n".join(lines)


def cmd_plan_memory(args) -> int:
    from mcp_server.memory.models import MemoryPlanRequest
    from mcp_server.memory.planner import plan_memory

    data = _load_json_arg(args.request, "request") or {}
    for key in ("model", "config_path", "gpu", "gpu_memory_gib", "num_gpus", "finetune", "lora_r", "optim", "dtype",
                "beta", "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
                "prompt_length", "max_completion_length", "vllm_mode", "vllm_gpu_memory_utilization",
                "zero_stage", "max_steps"):
        value = getattr(args, key, None)
        if value is not None:
            data[key] = value
    for key in ("gradient_checkpointing", "use_vllm", "vllm_enable_sleep_mode", "use_liger_kernel"):
        value = getattr(args, key, None)
        if value is not None:
            data[key] = value
    if args.no_validate:
        data["validate_levers"] = False
    plan = plan_memory(_parse_model(MemoryPlanRequest, data, "request"))
    _print(plan, args.json, _human_plan)
    return 0 if plan.fits else 1


def add_memory_commands(sub) -> None:
    p = sub.add_parser("plan-memory", help="Will a GRPO run fit the GPU? Breakdown, levers, anchor, rollout speed. "
                       "Exit 0 when it fits, 1 when not.")
    p.add_argument("--request", help="The whole MemoryPlanRequest as JSON (inline or @file.json); flags override it.")
    p.add_argument("--model", help="Catalog name (qwen2.5-7b, Qwen/Qwen3-8B...), local model dir or config.json, or 'tiny'.")
    p.add_argument("--config", dest="config_path", help="A train/config.yaml (or run directory) from emit-config.")
    p.add_argument("--gpu", help="Target GPU type (H100, A100-40GB, RTX 4090, DGX Spark...).")
    p.add_argument("--gpu-memory-gib", type=float, help="Raw GPU memory in GiB, for a GPU not in the catalog.")
    p.add_argument("--num-gpus", type=int, help="GPUs on the target.")
    p.add_argument("--finetune", choices=["full", "lora", "qlora"])
    p.add_argument("--lora-r", type=int)
    p.add_argument("--optim", help="adamw_torch_fused, adamw_8bit, paged_adamw_8bit, adafactor...")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--beta", type=float)
    p.add_argument("--num-generations", type=int)
    p.add_argument("--per-device-train-batch-size", type=int)
    p.add_argument("--gradient-accumulation-steps", type=int)
    p.add_argument("--prompt-length", type=int, help="Longest prompt in tokens.")
    p.add_argument("--max-completion-length", type=int)
    p.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--use-vllm", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--vllm-mode", choices=["colocate", "server"])
    p.add_argument("--vllm-gpu-memory-utilization", type=float)
    p.add_argument("--vllm-enable-sleep-mode", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--use-liger-kernel", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--zero-stage", type=int, choices=[0, 1, 2, 3])
    p.add_argument("--max-steps", type=int, help="Training steps, for the total time.")
    p.add_argument("--no-validate", action="store_true", help="Skip validating each lever's config change.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_plan_memory)


# ---------------------------------------------------------------- diagnosis (H5)
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


def cmd_diagnose_run(args) -> int:
    from mcp_server.training.diagnose import diagnose

    result = diagnose(args.source, config=args.config, log=args.log, validate_patches=not args.no_validate)
    _print(result, args.json, _human_diagnosis)
    return 0 if result.healthy else 1


def add_diagnosis_commands(sub) -> None:
    p = sub.add_parser("diagnose-run", help="Diagnose a training run from its metrics (run dir, progress.jsonl, "
                       "trainer_state.json, CSV/JSONL export) and log. Exit 0 when healthy, 1 with problems.")
    p.add_argument("source", help="Run directory (or name under runs/), progress.jsonl, trainer_state.json, "
                   ".csv/.jsonl metrics export, or a stdout log.")
    p.add_argument("--config", help="The run's YAML config (default: <run>/train/config.yaml when present).")
    p.add_argument("--log", help="The run's stdout log (default: <run>/train/logs/stdout.log when present).")
    p.add_argument("--no-validate", action="store_true", help="Skip validating the patches (faster; no TRL import).")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_diagnose_run)


# ---------------------------------------------------------------- evaluation, promotion, export, demo (H7)
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


def cmd_evaluate_model(args) -> int:
    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest

    data = {"model": args.model, "goldens": args.goldens, "baseline": args.baseline, "max_new_tokens": args.max_new_tokens}
    if args.graders:
        data["graders"] = _load_json_arg(args.graders, "--graders")
    if args.limit:
        data["limit"] = args.limit
    result = evaluate_model(_parse_model(EvaluateRequest, data, "request"), report=_progress(args))
    _print(result, args.json, _human_evaluation)
    return 0


def _human_promotion(result) -> str:
    return "\n".join([f"{result.verdict}: {result.checkpoint}", *[f"  {r}" for r in result.reasons],
                      f"  report: {result.report_path}"])


def cmd_promote_checkpoint(args) -> int:
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint

    data = {k: v for k, v in dict(run=args.run, checkpoint=args.checkpoint, goldens=args.goldens,
                                   drift_suite=args.drift_suite).items() if v is not None}
    result = promote_checkpoint(_parse_model(PromoteRequest, data, "request"), report=_progress(args))
    _print(result, args.json, _human_promotion)
    return 0 if result.verdict == "PROMOTE" else 1


def _human_export(result) -> str:
    return "\n".join([
        f"Exported {result.run_dir} -> {result.export_dir}" + (" (LoRA merged)" if result.merged_lora else ""),
        f"  files: {', '.join(result.files)}",
        f"  model card: {result.model_card}; promotion verdict: {result.promotion_verdict}",
        f"  smoke test ({result.smoke_items} goldens, greedy before/after): "
        + ("identical" if result.smoke_identical else "DIFFERENT"),
    ])


def cmd_export_model(args) -> int:
    from mcp_server.evaluation.export import export_model
    from mcp_server.evaluation.models import ExportRequest

    data = {"run": args.run, "allow_unpromoted": args.allow_unpromoted}
    if args.checkpoint:
        data["checkpoint"] = args.checkpoint
    result = export_model(_parse_model(ExportRequest, data, "request"), report=_progress(args))
    _print(result, args.json, _human_export)
    return 0 if result.smoke_identical else 1


def cmd_demo(args) -> int:
    from mcp_server.demo import run_demo

    summary = run_demo(quick=args.quick, run_name=args.run_name, as_json=args.json)
    if args.json:
        print(summary.model_dump_json(indent=2))
    return 0 if summary.ok else 1


def add_evaluation_commands(sub) -> None:
    p = sub.add_parser("evaluate-model", help="Greedy pass rate (95%% Wilson CI) of a model on goldens; the first "
                       "evaluation of a base model writes eval/baseline-<model>.json (never overwritten).")
    p.add_argument("model", help="Local model directory, 'tiny', or a hub name (online only).")
    p.add_argument("--goldens", default="tiny", help="Goldens JSONL (prompt + answer columns), or 'tiny'.")
    p.add_argument("--graders", help="Reward specs as a JSON list (inline or @file.json); default correctness_reward.")
    p.add_argument("--max-new-tokens", type=int, default=256, help="Completion length limit.")
    p.add_argument("--limit", type=int, help="Only the first N goldens (never becomes a baseline).")
    p.add_argument("--baseline", choices=["auto", "write", "never"], default="auto",
                   help="auto: write the baseline for a base model; write: also for a model inside a run.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_evaluate_model)

    p = sub.add_parser("promote-checkpoint", help="PROMOTE or REJECT a run's checkpoint against the baseline and "
                       "the drift budget; writes promotion-report.md. Exit 0 only on PROMOTE.")
    p.add_argument("run", help="Run directory or name under runs/.")
    p.add_argument("--checkpoint", help="Checkpoint directory (default: the run's output_dir).")
    p.add_argument("--goldens", help="Goldens file (default: the baseline's).")
    p.add_argument("--drift-suite", help="Frozen drift suite JSONL (default: the embedded tiny suite).")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_promote_checkpoint)

    p = sub.add_parser("export-model", help="Merge LoRA if any, save safetensors + tokenizer + model card into "
                       "<run>/export/, smoke-test greedy outputs before/after.")
    p.add_argument("run", help="Run directory or name under runs/.")
    p.add_argument("--checkpoint", help="Checkpoint directory (default: the run's output_dir).")
    p.add_argument("--allow-unpromoted", action="store_true", help="Export without a PROMOTE verdict.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_export_model)

    p = sub.add_parser("demo", help="Walk all seven phases on the embedded tiny model: baseline, SFT warm-start, "
                       "inspection, config, GRPO training, diagnosis, promotion, export (a few minutes on CPU).")
    p.add_argument("--quick", action="store_true", help="A shortened walk (fewer steps): checks the plumbing, "
                   "does not aim to improve the model.")
    p.add_argument("--run-name", help="Slug for runs/<date>-<slug>/ (default: demo, or demo-quick with --quick).")
    p.add_argument("--json", action="store_true", help="Print the summary as JSON at the end.")
    p.set_defaults(handler=cmd_demo)


# ---------------------------------------------------------------- training: environment, launch, status (H4)
def _human_env(r) -> str:
    lines = [f"{r.verdict.upper()}: {r.allows}", f"  python: {r.python}"]
    for g in r.gpus:
        lines.append(f"  GPU {g.index}: {g.name}, {g.memory_gib:.0f} GiB, cc {g.compute_capability}, bf16 {'yes' if g.bf16 else 'no'}")
    lines.append("  packages: " + ", ".join(f"{k} {v or '-'}" for k, v in r.packages.items()))
    lines.append(f"  RAM {r.ram_gib} GiB, free disk {r.free_disk_gib} GiB" + (f", target {r.target}" if r.target else ""))
    lines += [f"  BLOCKED  {b}" for b in r.blockers] + [f"  WARN     {w}" for w in r.warnings]
    lines.append(f"  report: {r.report_path}")
    return "\n".join(lines)


def cmd_check_environment(args) -> int:
    from mcp_server.training.environment import check_environment
    from mcp_server.training.models import EnvironmentRequest

    report = check_environment(EnvironmentRequest(run=args.run))
    _print(report, args.json, _human_env)
    return 1 if report.verdict == "blocked" else 0


def _human_prepare(r) -> str:
    lines = [f"{r.status.upper()}: {r.message}", f"  python: {r.python}", f"  log:    {r.log_path}"]
    if r.status != "running" and r.log_tail:
        lines += ["  last lines of the log:"] + [f"    {line}" for line in r.log_tail]
    return "\n".join(lines)


def cmd_prepare_environment(args) -> int:
    import time

    from mcp_server.training.models import PrepareRequest
    from mcp_server.training.prepare import prepare_environment

    request = PrepareRequest(path=args.path, torch_spec=args.torch_spec, torch_index=args.torch_index,
                             restart=args.restart)
    result = prepare_environment(request)
    if args.wait and not args.json:
        print(_human_prepare(result), flush=True)
    while args.wait and result.status == "running":
        time.sleep(5)
        result = prepare_environment(PrepareRequest(path=args.path))
    _print(result, args.json, _human_prepare)
    return 1 if result.status == "failed" else 0


def _human_launch(r) -> str:
    lines = [r.message]
    for ref in r.refusals:
        lines += [f"  REFUSED by the {ref.gate} gate: {ref.message}", f"     to clear: {ref.how_to_clear}"]
    if r.launched:
        lines += [f"  command: {' '.join(r.command)}", f"  log:     {r.log_path}"]
    if r.slurm_script:
        lines.append(f"  SLURM script: {r.slurm_script}")
    return "\n".join(lines)


def cmd_launch_training(args) -> int:
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    result = launch_training(_parse_model(LaunchRequest, {
        "run": args.run, "strategy": args.strategy, "num_processes": args.num_processes,
        "vllm_server_gpus": args.vllm_server_gpus, "num_nodes": args.num_nodes}, "request"))
    _print(result, args.json, _human_launch)
    return 0 if (result.launched or result.slurm_script) else 1


def cmd_resume_training(args) -> int:
    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    result = resume_training(RunRequest(run=args.run))
    _print(result, args.json, _human_launch)
    return 0 if result.launched else 1


def _human_status(r) -> str:
    lines = [r.message]
    keys = ("reward", "reward_std", "kl", "entropy", "completion_mean_length", "clipped_ratio", "loss", "grad_norm")
    shown = [f"{k}={r.latest[k]:.4g}" for k in keys if isinstance(r.latest.get(k), (int, float))]
    if shown:
        lines.append("  latest: " + ", ".join(shown))
    if r.steps_per_s:
        lines.append(f"  speed: {r.steps_per_s:.3g} steps/s" + (f", ETA {r.eta_s / 60:.1f} min" if r.eta_s is not None else ""))
    for flag in r.health:
        lines.append(f"  {flag.severity.upper():8}{flag.code}: {flag.explanation}")
    if r.health_note:
        lines.append(f"  health: {r.health_note}")
    if r.state == "failed" and r.log_tail:
        lines += ["  log tail:"] + [f"    {line}" for line in r.log_tail[-10:]]
    if r.plot_path:
        lines.append(f"  plot: {r.plot_path}")
    return "\n".join(lines)


def cmd_training_status(args) -> int:
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    _print(training_status(StatusRequest(run=args.run, plot=args.plot, log_lines=args.log_lines)), args.json, _human_status)
    return 0


def cmd_stop_training(args) -> int:
    from mcp_server.training.models import StopRequest
    from mcp_server.training.status import stop_training

    result = stop_training(_parse_model(StopRequest, {"run": args.run, "timeout_s": args.timeout}, "request"))
    _print(result, args.json, lambda r: r.message)
    return 0


def _human_runs(r) -> str:
    if not r.runs:
        return f"no runs under {r.runs_root}"
    return "\n".join(f"{x.run:40} {x.state:13} step {x.step if x.step is not None else '-'}/{x.max_steps or '?'}  {x.model or ''}"
                     for x in r.runs)


def cmd_list_runs(args) -> int:
    from mcp_server.training.status import list_runs

    _print(list_runs(), args.json, _human_runs)
    return 0


def add_training_commands(sub) -> None:
    p = sub.add_parser("check-environment", help="GPUs, CUDA, RAM, disk, package versions and a verdict; writes env-report.json.")
    p.add_argument("--run", help="Judge against this run's target and write <run>/env-report.json.")
    p.add_argument("--json", action="store_true", help="Print the report as JSON.")
    p.set_defaults(handler=cmd_check_environment)

    p = sub.add_parser("prepare-environment", help="Build a training environment (torch, TRL, transformers) in the "
                       "background; run again for its status.")
    p.add_argument("--path", help="Where to build it (default: <user data dir>/llm-finetuning/training-venv).")
    p.add_argument("--torch-spec", help="The torch requirement (default: the CPU build torch==2.13.0 without an "
                   "NVIDIA GPU, torch>=2.4 with one; TORCH_CPU_SPEC / TORCH_GPU_SPEC override).")
    p.add_argument("--torch-index", help="Extra package index for torch (default: TORCH_CPU_INDEX without a GPU).")
    p.add_argument("--restart", action="store_true", help="Build again even when ready or failed.")
    p.add_argument("--wait", action="store_true", help="Wait until the build is ready or has failed.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_prepare_environment)

    p = sub.add_parser("launch-training", help="Start a run's training (detached) once its gates pass.")
    p.add_argument("run", help="Run directory or its name under runs/.")
    p.add_argument("--strategy", default="auto", choices=["auto", "single", "ddp", "zero2", "zero3", "fsdp"])
    p.add_argument("--num-processes", type=int, help="Training processes (default: from the run's target).")
    p.add_argument("--vllm-server-gpus", type=int, help="GPUs for `trl vllm-serve` in vLLM server mode (default 1).")
    p.add_argument("--num-nodes", type=int, default=1, help="Nodes; more than 1 writes a SLURM script.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_launch_training)

    p = sub.add_parser("training-status", help="State, latest metrics, speed, ETA and health of a run.")
    p.add_argument("run", help="Run directory or its name under runs/.")
    p.add_argument("--plot", action="store_true", help="Also write <run>/progress.png.")
    p.add_argument("--log-lines", type=int, default=20, help="Last lines of stdout.log to include.")
    p.add_argument("--json", action="store_true", help="Print the status as JSON.")
    p.set_defaults(handler=cmd_training_status)

    p = sub.add_parser("stop-training", help="Stop a run gracefully (checkpoint saved), kill it after a timeout.")
    p.add_argument("run", help="Run directory or its name under runs/.")
    p.add_argument("--timeout", type=float, default=120.0, help="Seconds to wait before killing.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_stop_training)

    p = sub.add_parser("resume-training", help="Continue a run from its latest checkpoint (same config hash).")
    p.add_argument("run", help="Run directory or its name under runs/.")
    p.add_argument("--json", action="store_true", help="Print the result as JSON.")
    p.set_defaults(handler=cmd_resume_training)

    p = sub.add_parser("list-runs", help="Every run under runs/ with its state.")
    p.add_argument("--json", action="store_true", help="Print the list as JSON.")
    p.set_defaults(handler=cmd_list_runs)


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

    add_inspection_commands(sub)  # inspection gate (H6)
    add_rewards_commands(sub)  # rewards (H1)
    add_memory_commands(sub)  # memory planner (H2)
    add_evaluation_commands(sub)  # evaluation, promotion, export, demo (H7)
    add_diagnosis_commands(sub)  # diagnosis (H5)
    add_training_commands(sub)  # training: environment, launch, status (H4)

    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
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
