"""Every config patch diagnosis computes from the run's values, on both sides of each floor and ceiling, as a table
(issue 48, the m13 audit's survivor 20: the NCCL-timeout patch stopped doubling ddp_timeout; the suite's one input
set none, TRL's 1800, where doubling meets the 3600 floor, so both versions answered 3600).

The sites are read from where the patches are written: every value a rule under mcp_server/diagnosis/ puts into a
patch under a config field (`{FIELD.x: value}`, `patch[FIELD.x] = value`, or a key looped over) that is not a
constant is a site, named by its function and field; a site without rows fails
`test_every_computed_patch_value_has_rows`, and each site's rows must reach at least two answers (a floor or a
ceiling and the side beyond it, or a change and none). A row is a real log shape that makes the finding
(tests/test_diagnosis_logs.py's SHAPES) with the row's config over it (and its own log, where the row is about
the log's words), read by diagnose_run: the finding's patch holds the value, or has no such field."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from test_diagnosis_logs import FIXTURES, SHAPES, build

from mcp_server.diagnosis.diagnose import diagnose_run
from mcp_server.diagnosis.models import DiagnoseRequest
from mcp_server.recipe.variants import BASE_RECIPE, LORA_LEARNING_RATE

DIAGNOSIS = Path(__file__).resolve().parents[1] / "mcp_server" / "diagnosis"
NONE = "(no such field in the patch)"
RATE, LORA = BASE_RECIPE["learning_rate"], LORA_LEARNING_RATE  # the recipes' rates, which patches set
# Places that write a config field with a computed value but propose nothing: the base config every patch is
# validated against (rule_truncated's other such place, the config the soft overlong punishment's parameters are
# read from, shares its site with that rule's patch).
NOT_PATCHES = {("validation_base", "learning_rate")}

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"  # no capacity: no planner
VLLM_STARTUP = (FIXTURES / "vllm_oom_startup.log").read_text()  # "less than desired GPU memory utilization"
COLOCATE = {"use_vllm": True, "vllm_mode": "colocate"}
NO_OTHER_LEVER = {"gradient_checkpointing": True, "beta": 0.0}  # the memory levers tried before the length
CLIP_HIGHER = {"epsilon_high": 0.28}  # DAPO's clip-higher: an off-policy variant keeps two mini-batches


@dataclasses.dataclass(frozen=True)
class Row:
    shape: str  # the SHAPES row that makes the finding
    code: str
    field: str
    config: dict  # over the shape's config
    want: object  # the patch's value for `field`, or NONE
    stdout: str | None = None  # the run's stdout log instead of the shape's


# site (the function writing the patch, the field) -> its rows
ROWS: dict[tuple[str, str], list[Row]] = {}


def rows(site: tuple[str, str], shape: str, code: str, *cases) -> None:
    ROWS[site] = [Row(shape, code, site[1], *case) for case in cases]


rows(("rule_environment", "ddp_timeout"), "NCCL watchdog timeout in stdout", "nccl_timeout",
     ({}, 3600), ({"ddp_timeout": 600}, 3600), ({"ddp_timeout": 1800}, 3600), ({"ddp_timeout": 1801}, 3602),
     ({"ddp_timeout": 7200}, 14400))
rows(("memory_patch", "max_completion_length"), "CUDA out of memory in stdout", "cuda_out_of_memory",
     ({**NO_OTHER_LEVER, "max_completion_length": 24}, NONE, OOM),
     ({**NO_OTHER_LEVER, "max_completion_length": 256}, NONE, OOM),
     ({**NO_OTHER_LEVER, "max_completion_length": 257}, 128, OOM),
     ({**NO_OTHER_LEVER, "max_completion_length": 1024}, 512, OOM),
     ({"max_completion_length": 1024}, NONE, OOM))  # two levers tried before it (gradient checkpointing, beta)
rows(("vllm_patch", "vllm_gpu_memory_utilization"), "vLLM out of memory in stdout", "vllm_out_of_memory",
     ({**COLOCATE, "vllm_gpu_memory_utilization": 0.5}, 0.6), ({**COLOCATE, "vllm_gpu_memory_utilization": 0.8}, 0.9),
     ({**COLOCATE, "vllm_gpu_memory_utilization": 0.85}, 0.9),
     ({**COLOCATE, "vllm_gpu_memory_utilization": 0.95}, 0.9),
     ({**COLOCATE, "vllm_gpu_memory_utilization": 0.5}, 0.4, VLLM_STARTUP),
     ({**COLOCATE, "vllm_gpu_memory_utilization": 0.2}, 0.1, VLLM_STARTUP),
     ({**COLOCATE, "vllm_gpu_memory_utilization": 0.15}, 0.1, VLLM_STARTUP),
     ({"use_vllm": True, "vllm_mode": "server", "vllm_gpu_memory_utilization": 0.5}, NONE),
     ({"use_vllm": False}, NONE))
rows(("vllm_patch", "vllm_max_model_length"), "vLLM out of memory in stdout", "vllm_out_of_memory",
     ({**COLOCATE, "max_completion_length": 24}, 24 + 1024), ({**COLOCATE, "max_completion_length": 512}, 512 + 1024),
     ({**COLOCATE, "vllm_max_model_length": 2048}, NONE), ({**COLOCATE}, NONE, VLLM_STARTUP))
rows(("divergence_patch", "learning_rate"), "loss NaN from step 9", "nan_loss",
     ({"learning_rate": 1e-6}, 2.5e-7), ({"learning_rate": 4e-7}, 1e-7), ({"learning_rate": 2e-7}, 1e-7),
     ({"learning_rate": 1e-7}, NONE), ({"learning_rate": 5e-8}, NONE), ({"learning_rate": 1e-5}, 2.5e-6),
     ({"use_peft": True, "learning_rate": 4e-6}, 1e-6),
     # above the range, the rate's own finding (lr_out_of_range, ranked above as the cause) carries the recipe's
     # rate, and an effect carries no patch of its own (triage)
     ({"learning_rate": 3e-5}, NONE), ({"use_peft": True, "learning_rate": 5e-3}, NONE))
rows(("rule_kl", "beta"), "kl Infinity", "kl_explosion",
     ({"beta": 0.001}, 0.002), ({"beta": 0.04}, 0.08), ({"beta": 0.05}, 0.1), ({"beta": 0.06}, 0.1),
     ({"beta": 0.1}, NONE), ({"beta": 0.2}, NONE))
# walk 13: above the range on a healthy run is a note, and a note carries no patch; below it, the recipe's rate
rows(("rule_learning_rate", "learning_rate"), "a learning rate above the range on a healthy run", "lr_out_of_range",
     ({"learning_rate": 3e-5}, NONE), ({"learning_rate": 1.01e-5}, NONE), ({"learning_rate": 1e-5}, NONE),
     ({"learning_rate": 1e-7}, NONE), ({"learning_rate": 9e-8}, RATE),
     ({"use_peft": True, "learning_rate": 5e-3}, NONE), ({"use_peft": True, "learning_rate": 2e-4}, NONE))
# a far rate with a symptom it causes: promoted to a warning, with the recipe's rate
rows(("promote_far_rate", "learning_rate"), "completions cut more and more", "lr_out_of_range",
     ({"learning_rate": 3e-3}, RATE), ({"use_peft": True, "learning_rate": 5e-2}, LORA))
rows(("rule_importance_ratio", "steps_per_generation"), "a third of the tokens clipped", "importance_ratio_blowup",
     ({"steps_per_generation": 8}, 1), ({**CLIP_HIGHER, "steps_per_generation": 8}, 4),
     ({**CLIP_HIGHER, "steps_per_generation": 3}, 2), ({**CLIP_HIGHER, "steps_per_generation": 2}, NONE),
     ({"steps_per_generation": 8, "gradient_accumulation_steps": 4}, 4),
     ({"steps_per_generation": 4, "gradient_accumulation_steps": 4}, NONE))
rows(("rule_importance_ratio", "learning_rate"), "a third of the tokens clipped", "importance_ratio_blowup",
     ({"learning_rate": 1e-6}, 5e-7), ({"learning_rate": 2e-7}, 1e-7), ({"learning_rate": 1.5e-7}, 1e-7),
     ({"learning_rate": 1e-7}, NONE), ({"learning_rate": 1e-6, "num_iterations": 2}, NONE),
     ({"learning_rate": 1e-6, "steps_per_generation": 8}, NONE))
rows(("rule_truncated", "max_completion_length"), "completions cut more and more", "completions_truncated",
     ({"max_completion_length": 24}, 48), ({"max_completion_length": 512}, 1024))
rows(("more_generations_patch", "num_generations"), "most groups without spread", "no_reward_signal",
     ({"num_generations": 4}, 8), ({"num_generations": 8}, 16))
rows(("more_generations_patch", "gradient_accumulation_steps"), "most groups without spread", "no_reward_signal",
     ({}, 2), ({"gradient_accumulation_steps": 3}, 6))
rows(("more_generations_patch", "generation_batch_size"), "most groups without spread", "no_reward_signal",
     ({}, NONE), ({"generation_batch_size": 32}, 64))
rows(("more_generations_patch", "steps_per_generation"), "most groups without spread", "no_reward_signal",
     ({}, NONE), ({"steps_per_generation": 2}, 4))
rows(("rule_flat", "learning_rate"), "the reward is flat for 24 logs", "reward_flat",
     ({"learning_rate": 1e-6}, 2e-6), ({"learning_rate": 5e-6}, 1e-5), ({"learning_rate": 6e-6}, NONE),
     ({"use_peft": True, "learning_rate": 1e-4}, 2e-4), ({"use_peft": True, "learning_rate": 1.5e-4}, NONE))


def _field(key: ast.expr, loops: dict[str, list[str]]) -> list[str]:
    """The config field(s) a patch key names: FIELD.x, or a loop variable over literal names."""
    if isinstance(key, ast.Attribute) and isinstance(key.value, ast.Name) and key.value.id == "FIELD":
        return [key.attr]
    if isinstance(key, ast.Name) and key.id in loops:
        return loops[key.id]
    return []


def computed_patch_sites() -> set[tuple[str, str]]:
    """(function, field) of every computed value a diagnosis module writes under a config field."""
    sites = set()
    for path in sorted(DIAGNOSIS.glob("*.py")):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, ast.FunctionDef):
                continue
            loops = {node.target.id: [e.value for e in node.iter.elts if isinstance(e, ast.Constant)]
                     for node in ast.walk(function) if isinstance(node, ast.For)
                     and isinstance(node.target, ast.Name) and isinstance(node.iter, (ast.Tuple, ast.List))}
            for node in ast.walk(function):
                pairs = []
                if isinstance(node, ast.Dict):
                    pairs = [(k, v) for k, v in zip(node.keys, node.values) if k is not None]
                elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
                    pairs = [(node.targets[0].slice, node.value)]
                sites |= {(function.name, name) for key, value in pairs if not isinstance(value, ast.Constant)
                          for name in _field(key, loops)}
    return sites


def test_every_computed_patch_value_has_rows():
    sites = computed_patch_sites()
    assert sites - NOT_PATCHES == set(ROWS), (f"sites without rows: {sorted(sites - NOT_PATCHES - set(ROWS))}; "
                                              f"rows of no site: {sorted(set(ROWS) - sites)}")
    one_answer = [site for site, cases in ROWS.items() if len({repr(r.want) for r in cases}) < 2]
    assert not one_answer, f"sites whose rows reach one answer only (no side of a bound): {one_answer}"


CASES = [(site, i) for site, cases in ROWS.items() for i in range(len(cases))]


def _id(site: tuple[str, str], i: int) -> str:
    row = ROWS[site][i]
    log = "" if row.stdout is None else ", its own log"
    return f"{site[0]}.{site[1]} {row.config}{log} -> {row.want}"


@pytest.mark.parametrize(("site", "i"), CASES, ids=[_id(*case) for case in CASES])
def test_a_computed_patch_value_on_each_side_of_its_bounds(site, i, tmp_path, workspace):
    row = ROWS[site][i]
    shape = next(s for s in SHAPES if s.name == row.shape)
    shape = dataclasses.replace(shape, config={**shape.config, **row.config},
                                stdout=shape.stdout if row.stdout is None else row.stdout)
    d = diagnose_run(DiagnoseRequest(source=str(build(shape, tmp_path)), validate_patches=False))
    found = {f.code: f for f in d.findings}
    got = found[row.code].patch.get(row.field, NONE) if row.code in found else NONE
    if row.want != NONE:
        assert row.code in found, [f.code for f in d.findings]
    assert got == pytest.approx(row.want) if isinstance(row.want, float) else got == row.want, (
        got, row.want, {c: f.patch for c, f in found.items()})
