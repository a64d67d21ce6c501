"""train/launch.sh, the script the local and accelerate launchers start: a typed description in, one readable
bash script out. It runs from the run directory wherever it is called from (a person can run it by hand), starts
the vLLM server first when the config asks for server mode and waits for it, runs the training command and
records its exit code in train/logs/exit-code."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from mcp_server.errors import one_line
from mcp_server.training.launchers.base import (ACCELERATE_ARG, ACCELERATE_LINE, ACCELERATE_TEXT_ENV, PLAIN_EXIT,
                                                PYTHON_PIN_LINE, accelerate_config_arg, python_env,
                                                trainer_pythonpath)
from mcp_server.training.launchers.commands import tools
from mcp_server.training.processes import BASH, RUN_MARK
from mcp_server.kernel_sets import KERNEL_SET_CACHE_LINE
from mcp_server.training.trainer.vllm_cpu import VLLM_CPU_MEMORY_SHARE, WORKER_EXTENSION
from mcp_server.training.trainer.vllm_auth import AUTH_MODULE, IMPOSTOR_EXIT, KEY_ENV, MIDDLEWARE
from mcp_server.training.trainer.vllm_serve import SERVE_MODULE

VLLM_HEALTH_TIMEOUT_S = 900  # loading a large model into vLLM takes minutes
VLLM_SERVE_GPU_MEMORY_UTILIZATION = 0.9  # trl/scripts/vllm_serve.py's default, when no plan says otherwise
VLLM_DOWN_EXIT = 97  # the exit code for "the vLLM server did not come up" (as train/launch.slurm)

# The run directory, from where the script lies (train/launch.sh by hand); the copy bash runs names it (copy_text)
CD_LINE = 'cd "$({dirname} -- "$0")/.." || exit 1\n'
HEADER = """\
#!{bash}
# Training launcher for run {name}, written by llm-finetuning launch_training.
# Runs from the run directory wherever it is called from: bash train/launch.sh
""" + CD_LINE + """\
# Every process of the run carries its directory: training_status finds a trainer that outlived this script.
export {mark}="$(pwd -P)"
# Caches a library would write under your home (an arrow copy of the data, matplotlib's) stay in the run.
[ -n "$HF_DATASETS_CACHE$HF_HOME" ] || export HF_DATASETS_CACHE="$PWD/cache/datasets"
export MPLCONFIGDIR="${{MPLCONFIGDIR:-$PWD/cache/matplotlib}}"
{python_env}LOGS=train/logs
{mkdir} -p "$LOGS"
VLLM_PID=
"""
# transformers puts a run on the CPU (and torchrun ranks in a gloo group) only when told: without this, each
# torchrun rank would train alone as a world of one. A run that forces a CPU kernel set compiles into a cache of its
# own (kernel_sets.KERNEL_SET_CACHE_LINE).
CPU_LINE = "export ACCELERATE_USE_CPU=1\n" + KERNEL_SET_CACHE_LINE + "\n"
# The exit code is written to a fresh file (noclobber: O_EXCL, so never through a link planted there) and renamed
# over exit-code itself (-T: never into a directory or a link to one).
# Then the launcher's signed record of it (evidence.py), the one the readers trust: a tiny Python step.
RECORD_EXIT = PLAIN_EXIT + '; {py} -m mcp_server.evidence exit $rc'
# The server (SERVE_MODULE): `vllm serve` with the flags TRL's `trl vllm-serve` shim adds (deprecated in TRL 1.16),
# built by the installed TRL's own build_command (trainer/vllm_serve.py); it takes the shim's arguments.
# The server and the trainer share a secret made here, in their environment only (trainer/vllm_auth.py): the server
# answers only requests that carry it and signs each answer; the trainer and the wait below refuse any other server.
VLLM_KEY = """\
export {key_env}="$({py} -m {auth} new-key)" || exit 1
"""
VLLM_SERVE = VLLM_KEY + """\
# vLLM server mode: `vllm serve` on its own GPUs with the flags TRL's vllm-serve adds (its first log line is the
# command), started first and waited for; its sizes are the memory plan's (plan_memory: launch.vllm_server).
CUDA_VISIBLE_DEVICES={gpus} {py} -m {module} --model {model} --tensor_parallel_size {tp} \
--data_parallel_size {dp} --gpu_memory_utilization {util:g} --port {port} --middleware {middleware} > {log} 2>&1 &
VLLM_PID=$!
"""
# A CPU target: the server runs on this machine's CPU beside the trainer (vLLM's CPU build), listening on loopback
# only; eager mode (torch.compile of the model would take minutes of the same cores); its worker gets the reload
# the trainer's weight sync calls (trainer/vllm_cpu.py); --gpu_memory_utilization is its share of the host's RAM.
VLLM_SERVE_CPU = VLLM_KEY + """\
# vLLM server mode on the CPU: `vllm serve` on this machine beside the trainer, started first and waited for.
{py} -m {module} --model {model} --host 127.0.0.1 --port {port} --gpu_memory_utilization {util:g} \
--enforce_eager true{max_len} --worker-extension-cls {extension} --middleware {middleware} > {log} 2>&1 &
VLLM_PID=$!
"""
VLLM_WAIT = """\
echo "waiting for the vLLM server on port {port} (pid $VLLM_PID)"
deadline=$((SECONDS + {timeout}))
# Only the launch's own server proves the secret: anything else answering on the port ends the launch, named.
until {py} -m {auth} http://127.0.0.1:{port} 2>/dev/null; up=$?; [ $up -eq 0 ]; do
  if [ $up -eq {impostor} ]; then  # the launch's server then fails to bind: its error is shown (a minute at most)
    waited=0; while kill -0 "$VLLM_PID" 2>/dev/null && [ $waited -lt 60 ]; do {sleep} 5; waited=$((waited + 5)); done
    {tail} -n 30 {log}; kill "$VLLM_PID" 2>/dev/null
    echo "vLLM server did not come up: another process answers on port {port}, not the server this launch started"
    rc={down}; {record} exit $rc
  fi
  if ! kill -0 "$VLLM_PID" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
    echo "vLLM server did not come up: see {log}"; {tail} -n 30 {log}
    kill "$VLLM_PID" 2>/dev/null; rc={down}; {record} exit $rc
  fi
  {sleep} 5
done
echo "vLLM server is up"
"""
VLLM_TRAIN_GPUS = """\
export CUDA_VISIBLE_DEVICES={train_gpus}
"""
TRAIN = """\
# Training; the exit code is recorded for training_status.
{command}
rc=$?
[ -n "$VLLM_PID" ] && kill "$VLLM_PID" 2>/dev/null
{record}
exit $rc
"""


@dataclass(frozen=True)
class VllmServer:
    """The vLLM server process of server mode (`vllm serve` as TRL builds it): its GPUs (after the training
    processes' GPUs) and sizes."""

    model: str
    port: int
    first_gpu: int  # the training processes use GPUs 0..first_gpu-1
    gpus: int
    tensor_parallel_size: int
    data_parallel_size: int
    gpu_memory_utilization: float
    log: str = "train/logs/vllm-serve.log"
    cpu: bool = False  # on the host's CPU beside the trainer (gpus is 0)
    max_model_len: int | None = None

    @property
    def gpu_ids(self) -> str:
        return ",".join(str(i) for i in range(self.first_gpu, self.first_gpu + self.gpus))

    def record(self) -> dict:
        """What run.json and the launch result say of the server."""
        return {"gpus": self.gpu_ids, "port": self.port, "url": f"http://127.0.0.1:{self.port}", "log": self.log,
                "tensor_parallel_size": self.tensor_parallel_size, "data_parallel_size": self.data_parallel_size,
                "gpu_memory_utilization": self.gpu_memory_utilization}


def vllm_server(target, processes: int, layout) -> VllmServer | None:
    """Server mode's vLLM server for `target` (a LaunchTarget) beside `processes` training processes, sized by the
    memory plan's layout when there is one; None when the config does not use server mode."""
    if not target.server_mode:
        return None
    if target.cpu:
        max_len = target.config.get("vllm_max_model_length")
        return VllmServer(
            model=str(target.config.get("model_name_or_path")), port=int(target.config.get("vllm_server_port") or 8000),
            first_gpu=0, gpus=0, tensor_parallel_size=1, data_parallel_size=1,
            gpu_memory_utilization=VLLM_CPU_MEMORY_SHARE,
            cpu=True, max_model_len=int(max_len) if max_len else None)
    server = layout.vllm_server if layout is not None and layout.vllm_server else None
    return VllmServer(
        model=str(target.config.get("model_name_or_path")), port=int(target.config.get("vllm_server_port") or 8000),
        first_gpu=processes, gpus=target.vllm_gpus,
        tensor_parallel_size=server.tensor_parallel_size if server else target.vllm_gpus,
        data_parallel_size=server.data_parallel_size if server else 1,
        gpu_memory_utilization=server.gpu_memory_utilization if server else VLLM_SERVE_GPU_MEMORY_UTILIZATION)


def copy_text(text: str, run_dir: str) -> str:
    """The copy of train/launch.sh's `text` that launch_training runs (outside the workspace, launchers.local): the
    same script, its cd naming the run directory, and the copy removed once bash has it open (bash reads on from
    the open file; issue 48, round 9, F1: bash read the workspace's train/launch.sh as it ran, and a tail rewritten
    there during training ran with the user's key)."""
    cd = CD_LINE.format(**tools())
    if text.count(cd) != 1:
        raise ValueError("train/launch.sh's text has no single cd line to replace")
    return text.replace(cd, f"cd -- {shlex.quote(run_dir)} || exit 1\n"
                            f"{tools()['rm']} -f -- \"$0\"  # this copy: bash has it open\n", 1)


def render_launch_sh(run_name: str, python: str, command: list[str], cpu: bool, server: VllmServer | None) -> str:
    """The text of train/launch.sh."""
    path, t = trainer_pythonpath(), tools()  # every command by absolute path, resolved now (commands.py)
    # The name goes on a comment line, escaped: a newline in a copied run's name would end the comment and run the
    # rest as a command. Everything else written into the script is quoted (shlex) or fixed text.
    # train.py imports this package: from the plugin folder (through a folder linking to it alone) when the training
    # interpreter does not have it installed, and nothing else the launching shell had (base.PYTHON_ENV)
    text = HEADER.format(bash=BASH, name=one_line(run_name), mark=RUN_MARK, python_env=python_env(path), **t) + \
        PYTHON_PIN_LINE + "\n"
    if cpu:
        text += CPU_LINE
    auth = {"key_env": KEY_ENV, "auth": AUTH_MODULE, "middleware": MIDDLEWARE}
    if server is not None and server.cpu:
        text += VLLM_SERVE_CPU.format(
            py=shlex.quote(python), module=SERVE_MODULE, model=shlex.quote(server.model), port=server.port,
            util=server.gpu_memory_utilization, log=server.log, extension=WORKER_EXTENSION, **auth,
            max_len=f" --max_model_len {server.max_model_len}" if server.max_model_len else "")
    elif server is not None:
        text += VLLM_SERVE.format(
            gpus=server.gpu_ids, py=shlex.quote(python), module=SERVE_MODULE, model=shlex.quote(server.model),
            tp=server.tensor_parallel_size, dp=server.data_parallel_size, util=server.gpu_memory_utilization,
            port=server.port, log=server.log, **auth)
    if server is not None:  # one wait for either server: its health, its process, its deadline
        text += VLLM_WAIT.format(py=shlex.quote(python), port=server.port, log=server.log,
                                 timeout=VLLM_HEALTH_TIMEOUT_S, down=VLLM_DOWN_EXIT, impostor=IMPOSTOR_EXIT,
                                 auth=AUTH_MODULE,
                                 record=RECORD_EXIT.format(py=shlex.quote(python), **t) + ";", **t)
    if server is not None and not server.cpu:  # the trainer keeps the GPUs before the server's
        text += VLLM_TRAIN_GPUS.format(train_gpus=",".join(str(i) for i in range(server.first_gpu)))
    line = shlex.join(command)
    if ACCELERATE_ARG in line:  # accelerate launch: on the text the launch wrote to train/accelerate.yaml
        text += ACCELERATE_LINE.format(env=ACCELERATE_TEXT_ENV, **t) + "\n"
        line = accelerate_config_arg(line)
    return text + TRAIN.format(command=line, record=RECORD_EXIT.format(py=shlex.quote(python), **t))
