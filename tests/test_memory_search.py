"""plan_memory's whole answer for representative runs, against answers recorded before the lever search was made
cheaper (issue 26): the search may get faster, never different.

The fixture (fixtures/plan_memory_results.json) is regenerated only from code whose planning is known right:
    .venv/bin/python tests/test_memory_search.py --write
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from mcp_server.memory.breakdown import COLOCATED_VLLM_FIELDS, FitCache
from mcp_server.memory.constants import TIGHT_FRACTION
from mcp_server.memory.levers import VllmFloors, candidate_levers, compatible_sets, merged_patch
from mcp_server.memory.models import MemoryPlanRequest
from mcp_server.memory.planner import PlannedRun, plan_memory, planned_run, request_options, request_spec
from mcp_server.memory.settings import RunSettings

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "plan_memory_results.json"
VLLM = {"use_vllm": True}
# fits / does not fit; full, LoRA, QLoRA; vLLM colocate and server; MoE; ZeRO over several GPUs; T4, A10G, H100,
# H200, a bare memory size; several TRL releases. Two validate their levers (TRL in the training interpreter).
REQUESTS: dict[str, dict] = {
    "7b_full_t4_validated": {"model": "Qwen/Qwen2.5-7B", "gpu": "T4"},
    "05b_fits_h100": {"model": "Qwen/Qwen2.5-0.5B", "gpu": "H100", "validate_levers": False},
    "7b_lora_colocate_a10g": {"model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "A10G", "finetune": "lora", **VLLM},
    "8b_qlora_colocate_a10g": {"model": "Qwen/Qwen3-8B", "gpu": "A10G", "finetune": "qlora", **VLLM},
    "8b_full_colocate_h100_validated": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "H100", "beta": 0.04,
                                        **VLLM},
    "32b_lora_colocate_h100": {"model": "Qwen/Qwen2.5-32B-Instruct", "gpu": "H100", "finetune": "lora",
                               "vllm_enable_sleep_mode": True, **VLLM},
    "70b_qlora_h200": {"model": "meta-llama/Llama-3.1-70B-Instruct", "gpu": "H200", "finetune": "qlora", **VLLM},
    "moe_30b_lora_h200": {"model": "Qwen/Qwen3-30B-A3B", "gpu": "H200", "finetune": "lora", **VLLM},
    "moe_30b_full_8xh100": {"model": "Qwen/Qwen3-30B-A3B", "gpu": "H100", "num_gpus": 8, **VLLM},
    "14b_full_4xh100_zero": {"model": "Qwen/Qwen2.5-14B-Instruct", "gpu": "H100", "num_gpus": 4,
                             "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2},
    "7b_server_4xa10g": {"model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "A10G", "num_gpus": 4, "vllm_mode": "server",
                         **VLLM},
    "3b_full_t4_trl014": {"model": "Qwen/Qwen2.5-3B-Instruct", "gpu": "T4", "trl_version": "0.14.0",
                          "gradient_checkpointing": False},
    "4b_full_a10g_trl019": {"model": "Qwen/Qwen3-4B", "gpu": "A10G", "trl_version": "0.19.0",
                            "max_completion_length": 2048, "per_device_train_batch_size": 16},
    "1b_full_24gib_trl025": {"model": "meta-llama/Llama-3.2-1B-Instruct", "gpu_memory_gib": 24,
                             "trl_version": "0.25.0", "beta": 0.04, **VLLM},
    "9b_lora_tight_h100": {"model": "google/gemma-2-9b-it", "gpu": "H100", "finetune": "lora", "num_gpus": 2,
                           "max_completion_length": 4096, **VLLM},
}


def answer(name: str) -> dict:
    request = {"validate_levers": False, **REQUESTS[name]}
    if "validated" in name:
        request["validate_levers"] = True
    return plan_memory(MemoryPlanRequest(**request)).model_dump(mode="json")


def test_plans_unchanged_by_the_search():
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert sorted(recorded) == sorted(REQUESTS)
    statuses = {recorded[name]["status"] for name in recorded}
    assert statuses >= {"fits", "does_not_fit"}, statuses  # the fixture covers both sides
    for name in REQUESTS:
        got = answer(name)
        if got != recorded[name]:
            diff = sorted(k for k in got.keys() | recorded[name].keys() if got.get(k) != recorded[name].get(k))
            pytest.fail(f"{name}: plan_memory's answer changed in {diff}")


def _planned(fields: dict) -> PlannedRun:
    """plan_memory's run for a request's fields, before its levers are ranked."""
    request = MemoryPlanRequest(**{"validate_levers": False, **fields})
    return planned_run(request_spec(request), request_options(request))


def _lever_sets(run: PlannedRun) -> tuple[dict[str, dict], list[tuple[dict, tuple[str, ...]]]]:
    """Every lever that applies to the run, by name, and every compatible set of them with its merged patch."""
    patches = {name: patch for name, _, patch in
               candidate_levers(run.arch, run.params, run.settings, run.target, run.breakdown)}
    sets = [(merged_patch(patches, combo), combo) for combo in compatible_sets(list(patches), len(patches))]
    return patches, sets


def test_the_vllm_floor_is_under_every_lever_set():
    """The search skips a lever set whose colocated vLLM alone is over the limit or cannot start, without its
    breakdown (levers.VllmFloors): that keeps the answer only if, for every set, the floor is at most the set's peak
    and the floor's problem is the set's problem. Checked on every compatible set of every run above."""
    checked, binding = 0, 0
    for name, fields in REQUESTS.items():
        run = _planned(fields)
        patches, sets = _lever_sets(run)
        fits = FitCache(run.arch, run.params, run.unlaid, run.target)
        floors = VllmFloors(fits, patches)
        for patch, combo in sets:
            fit, floor = fits.fit(patch), floors.of(combo)
            assert floor.peak <= fit.peak, (name, combo, floor, fit)
            assert set(floor.problems) <= set(fit.problems), (name, combo, floor, fit)
            checked += 1
            binding += bool(floor.problems) or floor.peak > run.target.capacity_gib * (1 - TIGHT_FRACTION)
    assert checked > 1000 and binding > 100, (checked, binding)  # the floor decides for many sets here


def test_the_vllm_floor_reads_only_its_fields():
    """VllmFloors shares one floor among the sets that agree on the levers that set COLOCATED_VLLM_FIELDS: the
    floor must read no other setting. The settings here record every field read while the floor is computed."""
    read: set[str] = set()

    class Recording(RunSettings):
        def __getattribute__(self, name):
            if name in RunSettings.NAMES:
                read.add(name)
            return super().__getattribute__(name)

    for name in ("7b_full_t4_validated", "8b_qlora_colocate_a10g", "32b_lora_colocate_h100", "moe_30b_full_8xh100",
                 "7b_server_4xa10g", "9b_lora_tight_h100"):
        run = _planned(REQUESTS[name])
        recording = copy.copy(run.unlaid)
        recording.__class__ = Recording  # the same settings, each read recorded
        fits = FitCache(run.arch, run.params, recording, run.target)
        for patch, _ in _lever_sets(run)[1]:
            fits.floor(patch)
    assert {"vllm_gpu_memory_utilization", "finetune", "vllm_max_model_length"} <= read  # it did read
    assert read <= COLOCATED_VLLM_FIELDS, sorted(read - COLOCATED_VLLM_FIELDS)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    FIXTURE.write_text(json.dumps({name: answer(name) for name in REQUESTS}, indent=1, sort_keys=True) + "\n",
                       encoding="utf-8")
