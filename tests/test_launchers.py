"""The launcher seam (training/launchers/): each case of a launch goes to its launcher, which plans it, writes its
files and, for resume_training, reads its own launch record back into the same layout. Files only: nothing
starts here (test_training.py starts, stops and resumes local runs; test_slurm.py SLURM jobs)."""

from __future__ import annotations

import pytest
import subprocess
from pathlib import Path

import yaml

from mcp_server.runs import Run
from mcp_server.training.launch import build_launch_plan, write_plan_files
from mcp_server.training.derived import DerivedState
from mcp_server.training import launchers
from mcp_server.training.launchers import BACKENDS, LAUNCHERS, ORDER, launcher_of
from mcp_server.training.models import LaunchRequest, StatusRequest
from mcp_server.training.runrecord import write_run_json
from mcp_server.training.runstate import derive_state
from mcp_server.training.status import training_status
from mcp_server.training.launchers.base import ACCELERATE_TEXT_ENV, PYTHON_PIN_LINE
from mcp_server.training.launchers.slurm.script import with_pins
from support import emitted_run_dir

# A GPU target's default max_completion_length (512) is not below the tiny model's 256-token context: such an
# emission is NOT VALID and writes nothing (issue 49). The layouts below do not depend on it.
FITS_TINY = {"max_completion_length": 64}


@pytest.mark.slow
def test_each_case_goes_to_its_launcher_which_writes_its_files(workspace, tiny_model):
    cpu = Run(emitted_run_dir("cpu", model="tiny", gpu="cpu"))
    gpus = Run(emitted_run_dir("gpus", model="tiny", gpu="H100", num_gpus=8, overrides=FITS_TINY))
    cases = [  # (run, request, launcher, strategy, processes, files written)
        (cpu, {}, "local", "single", 1, {"script"}),
        (cpu, {"num_processes": 2}, "local", "ddp", 2, {"script"}),
        (gpus, {"strategy": "zero3"}, "accelerate", "zero3", 7, {"script", "accelerate_config"}),
        (gpus, {"num_nodes": 2}, "slurm", "zero3", 4, {"slurm", "accelerate_config"}),  # the last node serves vLLM
    ]
    for run, options, name, strategy, processes, files in cases:
        plan = build_launch_plan(run, LaunchRequest(run=str(run.dir), **options), ["--resume_from_checkpoint", "c"])
        assert (plan.launcher, plan.strategy, plan.num_processes) == (name, strategy, processes), (options, plan)
        assert plan.train_command[-2:] == ["--resume_from_checkpoint", "c"]
        written = write_plan_files(run, plan)
        texts = {"script_text", "slurm_text"}  # what is run (a copy, or sbatch's stdin): the file's text as written
        assert set(written) - texts - {ACCELERATE_TEXT_ENV} == files and len(set(written) & texts) == 1, written
        if "accelerate_config" in files:  # accelerate launch reads the text written, never the file (round 19)
            assert written[ACCELERATE_TEXT_ENV] == Path(written["accelerate_config"]).read_text()
            text = written.get("script_text") or written["slurm_text"]
            assert "--config_file train/accelerate.yaml" not in text and '--config_file "$ACCELERATE_CONFIG"' in text
        script = Path(written.get("script") or written["slurm"])
        assert (written.get("script_text") or written.get("slurm_text")) == script.read_text(), options
        # the plan's script, with the training interpreter's check written where its line stood (issue 48, G3)
        # (a job script with its pins exported: here the accelerate config's text, round 19)
        planned = with_pins(plan.script, {ACCELERATE_TEXT_ENV: written[ACCELERATE_TEXT_ENV]}) if "slurm" in written \
            else plan.script
        before, after = planned.split(PYTHON_PIN_LINE + "\n")
        text = script.read_text()
        # the loader's check first (the loader runs before the interpreter does), then the interpreter's
        assert text.startswith(before + PYTHON_PIN_LINE + "\ncheck_loader() {") and text.endswith(after), options
        assert text.index("\ncheck_loader || {") < text.index("\ncheck_python || {"), options
        assert "\ncheck_python() {" in text and subprocess.run(["bash", "-n", str(script)]).returncode == 0
        if "accelerate_config" in written:
            assert yaml.safe_load(Path(written["accelerate_config"]).read_text())["num_processes"] == processes
    torchrun = build_launch_plan(cpu, LaunchRequest(run=str(cpu.dir), num_processes=2)).train_command
    assert torchrun[1:3] == ["-m", "torch.distributed.run"] and "--standalone" in torchrun


def test_a_launch_record_names_the_launcher_that_relaunches_it_with_the_same_layout():
    assert [launcher.name for launcher in ORDER] == ["slurm", "accelerate", "local"] and set(LAUNCHERS) == {
        "slurm", "accelerate", "local"}
    local = launcher_of({"pid": 1, "strategy": "zero2", "num_processes": 7})
    assert local.name == "local" and launcher_of(None) is local
    again = local.relaunch({"strategy": "zero2", "num_processes": 7}, "r")
    assert (again.launcher, again.strategy, again.num_processes, again.num_nodes) == ("local", "zero2", 7, 1)
    job = {"backend": "slurm", "strategy": "zero3", "num_processes": 16,
           "slurm": {"nodes": 2, "partition": "gpu", "account": "a", "time_limit": "1:00:00", "requeue": False}}
    slurm = launcher_of(job)
    again = slurm.relaunch(job, "r")  # the record holds the job's processes; the request, those of one node
    assert slurm.name == "slurm" and (again.launcher, again.num_nodes, again.num_processes) == ("slurm", 2, 8)
    assert (again.partition, again.account, again.time_limit, again.requeue) == ("gpu", "a", "1:00:00", False)


class _Queue:
    """A scheduler-backed launcher as a new backend folder would add it: its `state` is the scheduler's word, its
    view of the job goes into the generic state's slot for it, and its words into the status message."""

    name = "queue"

    def state(self, run: Run, record: dict | None) -> DerivedState:
        return DerivedState(state="pending", alive=True, record=record, view={"job_id": record["job_id"]},
                            running_as=f"queue job {record['job_id']}")

    def status_text(self, derived: DerivedState) -> str:
        return f" (queue job {derived.view['job_id']} waits)"


def test_a_runs_state_is_read_by_the_launcher_its_record_names(workspace, tiny_model, monkeypatch):
    run = Run(emitted_run_dir("queued", model="tiny", gpu="cpu"))
    write_run_json(run, {"backend": "queue", "job_id": "7", "state": "pending", "started_ts": 1.0})
    # no launcher of that name: this machine's launcher reads it, and no process of the run lives
    assert training_status(StatusRequest(run=str(run.dir))).state == "failed"
    write_run_json(run, {"backend": "queue", "job_id": "7", "state": "pending", "started_ts": 1.0})
    monkeypatch.setitem(LAUNCHERS, "queue", _Queue())
    status = training_status(StatusRequest(run=str(run.dir)))
    assert (status.state, status.alive, status.job) == ("pending", True, {"job_id": "7"})
    assert status.message.endswith("(queue job 7 waits)"), status.message
    assert derive_state(run).running_as == "queue job 7"


def test_a_backend_is_its_folder_and_its_registration_line():
    """Each folder under launchers/ is one backend, registered once in BACKENDS, whose LAUNCHER is named as its
    folder; the generic modules of the seam import no backend (launch.py, status.py and the gates go through
    launchers.LAUNCHERS / launcher_of)."""
    folder = Path(launchers.__file__).parent
    backends = sorted(p.name for p in folder.iterdir() if (p / "__init__.py").is_file())
    assert backends == sorted(BACKENDS) and all(LAUNCHERS[name].name == name for name in BACKENDS)
    training = folder.parent
    generic = [training / name for name in ("launch.py", "launch_gates.py", "status.py", "derived.py", "runstate.py",
                                            "runrecord.py", "models.py", "tools.py")] + [folder / "base.py",
                                                                                         folder / "__init__.py"]
    for path in generic:
        imported = [line for line in path.read_text().splitlines()
                    if line.startswith(("from mcp_server", "import mcp_server"))]
        leaks = [line for line in imported for name in BACKENDS if f"launchers.{name}" in line]
        assert not leaks, (path.name, leaks)


COMPILED_SAMPLER = """
import torch
@torch.compile
def sample(logits, q):  # what vLLM's CPU sampler compiles: softmax, exponential race, argmax
    return (torch.softmax(logits / 0.7, dim=-1) / q.exponential_()).argmax(dim=-1)
x = torch.randn(4, 1000)
print(sample(x, torch.empty_like(x)).shape)
"""


@pytest.mark.slow
def test_a_cpu_run_under_a_forced_kernel_set_does_not_load_code_compiled_for_another(tmp_path):
    """torch 2.13's compile cache leaves the kernel set out of its key: a sampler compiled under the native set and
    loaded under ATEN_CPU_CAPABILITY=default failed to build, and killed vLLM's CPU engine. launch.sh gives a run
    that forces a set a compile cache of its own: the second run compiles afresh and samples."""
    import os
    import sys

    from mcp_server.training.launchers.local.shell import render_launch_sh

    (tmp_path / "sampler.py").write_text(COMPILED_SAMPLER)
    (tmp_path / "run" / "train").mkdir(parents=True)
    script = tmp_path / "run" / "train" / "launch.sh"
    script.write_text(render_launch_sh("kernels", sys.executable, [sys.executable, str(tmp_path / "sampler.py")],
                                       cpu=True, server=None))
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    # As a parent that imported TRL passes it on (torch sets it to its default then)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "torchinductor")
    for forced in ({}, {"ATEN_CPU_CAPABILITY": "default"}):  # the native set first, as a machine's earlier run
        done = subprocess.run(["bash", str(script)], env={**env, **forced}, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0 and "torch.Size([4])" in done.stdout, (forced, done.stdout[-3000:],
                                                                            done.stderr[-3000:])
    assert (tmp_path / "torchinductor_default").is_dir()


@pytest.mark.slow
def test_the_config_gate_validates_on_the_world_the_launch_trains_on(workspace, tiny_model):
    """Issue 46's probe: a 4x H100 server-mode run, one completion per GPU, a generation round of one group of 3.
    Emitted with the default one-GPU server it trains on 3 GPUs (the round is one completion each) and validates;
    launched with `vllm_server_gpus=2` it trains on 2, whose global batch of 2 does not divide the round of 3, which
    TRL's GRPOConfig refuses inside the trainer. The config gate validates on the launch's world (config.target.Target)
    and refuses it with TRL's batch rule named, before anything starts; the default launch has no config refusal."""
    from mcp_server.training.launch import launch_training
    from support import emit_run

    run_dir = emit_run("groups-of-three", gpu="H100", num_gpus=4, use_vllm=True, vllm_mode="server",
                       per_device_train_batch_size=1, num_generations=3, generation_batch_size=3)
    from mcp_server.inspection.gate import record_inspection_verdict
    from mcp_server.inspection.models import InspectRequest, SampleRequest, VerdictRequest
    from mcp_server.inspection.review import inspect_rewards
    from mcp_server.inspection.sampling import sample_completions

    sample_completions(SampleRequest(run=str(run_dir), num_prompts=17, engine="transformers"))  # 51 samples
    inspect_rewards(InspectRequest(run=str(run_dir), max_samples=51))
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="test", agree_with_rest=True))
    two = launch_training(LaunchRequest(run=str(run_dir), vllm_server_gpus=2))
    config = [r for r in two.refusals if r.gate == "config"]
    assert not two.launched and config, two.refusals
    assert "generation_batch_not_divisible" in config[0].message and "1 x 2 = 2" in config[0].message
    one = launch_training(LaunchRequest(run=str(run_dir), vllm_server_gpus=1))
    assert not one.launched and not [r for r in one.refusals if r.gate == "config"], one.refusals


@pytest.mark.slow
def test_a_launch_reads_each_run_file_once(workspace, tiny_model):
    """Issue 46: a launch reads the run as one value (recipe.runspec.RunSpec) and passes it to every gate and the
    launcher. Counted with an audit hook on every open of the run's files while launch_training decides: the state
    check, the launch plan, the inspection gate's pins, the config gate, the environment gate and the launcher's
    record each used to read train/config.yaml again (7 reads, and request.json 6). A GPU target on this CPU machine
    runs every gate and is refused by the environment gate, so nothing starts; a launch over an ended launch's
    run.json (a relaunch, refused by the state gate) reads that record once too."""
    import sys
    from collections import Counter

    from mcp_server.training.launch import launch_training
    from support import emit_run, pass_inspection, record_launch

    run_dir = emit_run("read-once", gpu="H100", num_gpus=2)
    pass_inspection(run_dir)
    run = Run(run_dir)
    counted = {run.config: "config.yaml", run.request: "request.json", run.rewards: "rewards.json",
               run.run_json: "run.json"}
    opened: Counter = Counter()
    counting = [True]

    def hook(event, args):
        if counting[0] and event == "open" and isinstance(args[0], (str, Path)) and Path(args[0]) in counted:
            opened[counted[Path(args[0])]] += 1

    def launch_counted():
        opened.clear()
        counting[0] = True
        try:
            return launch_training(LaunchRequest(run=str(run_dir)))
        finally:
            counting[0] = False

    sys.addaudithook(hook)  # an audit hook cannot be removed: it counts only while a launch decides
    result = launch_counted()
    assert not result.launched and [r.gate for r in result.refusals] == ["environment"], result.refusals
    assert dict(opened) == {"config.yaml": 1, "request.json": 1, "rewards.json": 1}, opened  # no run.json yet
    record_launch(run_dir, "earlier")  # as launch_training records a launch (else run.json is an earlier run's)
    write_run_json(run, {"state": "failed", "exit_code": 1, "pid": 2**22 + 12345, "launcher": "local",
                         "launch_id": "earlier"})
    result = launch_counted()
    assert not result.launched and [r.gate for r in result.refusals] == ["state"], result.refusals
    assert dict(opened) == {"config.yaml": 1, "request.json": 1, "rewards.json": 1, "run.json": 1}, opened


def test_the_machine_layout_at_its_edges(workspace, tiny_model):
    """A multi-GPU LoRA run trains under plain DDP (adapters are small; DeepSpeed and 4-bit bases mix badly), and a
    vLLM server launch whose training processes and server GPUs use exactly the run's GPUs is planned, not refused
    (survivors of issue 48's blind mutation audit)."""
    lora = Run(emitted_run_dir("lora", model="tiny", gpu="H100", num_gpus=4, finetune="lora", overrides=FITS_TINY))
    plan = build_launch_plan(lora, LaunchRequest(run=str(lora.dir)))
    assert plan.strategy == "ddp" and plan.num_processes > 1, plan
    server = Run(emitted_run_dir("server", model="tiny", gpu="H100", num_gpus=4,
                                 overrides={"use_vllm": True, "vllm_mode": "server", **FITS_TINY}))
    plan = build_launch_plan(server, LaunchRequest(run=str(server.dir), num_processes=3, vllm_server_gpus=1))
    assert plan.num_processes == 3 and plan.vllm is not None, plan


def test_validation_and_a_multi_node_launch_judge_the_same_world(workspace, tiny_model):
    """Issue 46: 2 nodes x 8 H100 in vLLM server mode. The SLURM job serves on the whole last node and trains on the
    first node's 8 GPUs, so TRL's whole-groups rule is judged on a world of 8, not on 16 GPUs less a one-GPU server
    (15). Groups of 5 with one completion per GPU fill a world of 15 but not of 8: validate_grpo_config given the
    launch's num_nodes, and the launch's own config gate, refuse it with TRL's rule named on the job's world; on one
    node (15 train) the same config is valid."""
    from mcp_server.memory.verdict import validate_config
    from mcp_server.recipe.models import ValidateRequest
    from mcp_server.training.launch import launch_training

    run = Run(emitted_run_dir("two-by-eight", model="tiny", gpu="H100", num_gpus=16, overrides={
        "use_vllm": True, "vllm_mode": "server", "per_device_train_batch_size": 1, "num_generations": 5,
        "gradient_accumulation_steps": 1, "steps_per_generation": 1, "max_completion_length": 12}))
    plan = build_launch_plan(run, LaunchRequest(run=str(run.dir), num_nodes=2))
    assert (plan.launcher, plan.num_processes, plan.accelerate_config["num_processes"]) == ("slurm", 8, 8), plan
    assert plan.vllm["gpus"] == 8 and "#SBATCH --nodes=2" in plan.script, plan.vllm
    assert "--num_machines 1 --num_processes 8 " in plan.script  # what launch.slurm starts: one node of 8 trains

    def errors(num_nodes: int) -> dict[str, str]:
        result = validate_config(ValidateRequest(config_path=str(run.config), num_nodes=num_nodes, rehearse=False))
        return {f.code: f.message for f in result.findings if f.severity == "error"}

    assert errors(1) == {}, errors(1)  # one node: 1 x 15 x 1 = 15, three groups of 5
    refused = errors(2)["generation_batch_not_divisible"]
    assert f"1 per device x {plan.num_processes} processes" in refused, refused
    launched = launch_training(LaunchRequest(run=str(run.dir), num_nodes=2, submit=False))  # no scheduler asked
    config = [r for r in launched.refusals if r.gate == "config"]
    assert not launched.launched and config and "generation_batch_not_divisible" in config[0].message, launched
    assert f"x {plan.num_processes} processes" in config[0].message, config[0].message
    assert not (run.dir / "train" / "launch.slurm").exists() and not (run.dir / "run.json").exists()
