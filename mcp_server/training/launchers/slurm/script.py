"""The SLURM launcher's plan and its sbatch script: a typed layout in, one readable bash script out.

The layout is what the script asks the scheduler for (nodes, GPUs per node through `gres`, partition, account,
time) and how the nodes are used: the open-r1 layout, where in vLLM server mode the last node serves (`vllm serve`
with TRL's flags: trainer/vllm_serve.py) and the others train; on a CPU target every node trains (torchrun over gloo).

What the script does, in order (each step is a line a person can read and run):
- `#SBATCH` lines: job name = run name, comment = the run's ownership token (stop_training checks it before
  touching a job), --chdir = the run directory, --requeue, --signal=USR1@<s> before the time limit;
- batch output appended to train/logs/stdout.log, each node's output to train/logs/node-<node>.log
  (<node> is the SLURM node name, SLURMD_NODENAME);
- the rendezvous port is a free port picked on the first node at start (no fixed 29500 to clash on);
- a requeued job (SLURM_RESTART_COUNT > 0) resumes from the latest complete checkpoint by itself;
- the vLLM server is waited for with a deadline and a clear failure (exit code 97);
- `srun --kill-on-bad-exit=1`: one dead rank ends the step instead of leaving the others hanging;
- each node's launcher ignores USR1 (the trainer turns USR1/SIGTERM into a checkpoint and a stop, see
  training/trainer/progress.py), and writes train/logs/node-<node>.exit;
- the run's exit code is written to train/logs/exit-code, as train/launch.sh does.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from mcp_server.kernel_sets import KERNEL_SET_CACHE_LINE
from mcp_server.training.launchers.base import (ACCELERATE_ARG, ACCELERATE_LINE, ACCELERATE_TEXT_ENV, PYTHON_PIN_LINE,
                                                TRAIN_ARGS, accelerate_config_arg, python_env)
from mcp_server.training.launchers.commands import tools
from mcp_server.training.launchers.slurm import scheduler
from mcp_server.training.processes import BASH
from mcp_server.training.trainer.vllm_auth import AUTH_MODULE, IMPOSTOR_EXIT, KEY_ENV, MIDDLEWARE
from mcp_server.training.trainer.vllm_serve import SERVE_MODULE

VLLM_WAIT_S = 900  # loading a large model into vLLM takes minutes
WARN_BEFORE_LIMIT_S = 120  # USR1 this long before the time limit: time to save a checkpoint
EXIT_RECORD = "mcp_server.evidence exit"
VLLM_DOWN_EXIT = 97  # the exit code for "the vLLM server did not come up" (as train/launch.sh)

LATEST_CHECKPOINT = (
    "import pathlib, sys; d = pathlib.Path(sys.argv[1]); "
    "c = [p for p in d.glob('checkpoint-*') if p.name[11:].isdigit() and (p / 'trainer_state.json').exists()]; "
    "print(max(c, key=lambda p: int(p.name[11:])) if c else '')"
)
FREE_PORT = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


@dataclass(frozen=True)
class SlurmLayout:
    """What a SLURM job of a run asks for and how its nodes are used."""

    run_dir: str
    job_name: str
    comment: str  # the run's ownership token, checked before a job is stopped
    python: str
    nodes: int
    train_nodes: int  # nodes - 1 in vLLM server mode (the last node serves)
    processes_per_node: int  # training processes on each training node
    gpus_per_node: int  # 0: a CPU target (no gres)
    strategy: str  # ddp | zero2 | zero3 | fsdp (accelerate) ; cpu: torchrun over gloo
    output_dir: str  # where checkpoints go (relative to the run directory), for the auto-resume
    pythonpath: str | None = None
    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None
    vllm_port: int | None = None  # vLLM server mode
    resume_from: str | None = None  # resume_training's checkpoint
    requeue: bool = True  # --requeue: a preempted or node-failed job is requeued and resumes by itself
    extra_sbatch: tuple[str, ...] = field(default_factory=tuple)
    # the scheduler's commands by absolute path, resolved once when the job is planned (scheduler.commands): the
    # sbatch that submits it, the srun and scontrol its script runs; recorded in run.json
    scheduler: dict[str, str] = field(default_factory=scheduler.commands, compare=False)

    @property
    def cpu(self) -> bool:
        return self.gpus_per_node == 0

    @property
    def processes(self) -> int:
        return self.processes_per_node * self.train_nodes

    def sbatch_options(self) -> list[str]:
        """The scheduler options, as `#SBATCH` lines and as `sbatch --test-only` checks them."""
        options = [f"--job-name={self.job_name}", f"--comment={self.comment}", f"--chdir={self.run_dir}",
                   f"--nodes={self.nodes}", "--ntasks-per-node=1", "--exclusive",
                   "--requeue" if self.requeue else "--no-requeue",
                   f"--signal=USR1@{WARN_BEFORE_LIMIT_S}", f"--output={self.run_dir}/train/logs/stdout.log",
                   "--open-mode=append"]
        if self.gpus_per_node:
            options.append(f"--gres=gpu:{self.gpus_per_node}")
        options += [f"--partition={self.partition}"] if self.partition else []
        options += [f"--account={self.account}"] if self.account else []
        options += [f"--time={self.time_limit}"] if self.time_limit else []
        return options + list(self.extra_sbatch)


# Where launch_training writes, after its gates, the hashes the trainer checks what it runs against (the verdict's
# bytes, its train.py and reward-code pins: SlurmLauncher.write), as the local launcher passes them (issue 48).
PINS_LINE = "# the inspection verdict's pins, written by launch_training after its gates"


def with_pins(script: str, pins: dict[str, str]) -> str:
    """The script with `pins` (environment variable -> value) exported where PINS_LINE stands."""
    lines = [PINS_LINE, *(f"export {name}={shlex.quote(value)}" for name, value in sorted(pins.items()))]
    return script.replace(PINS_LINE + "\n", "\n".join(lines) + "\n", 1)


def _launch_line(layout: SlurmLayout, py: str) -> str:
    """The training launcher one node runs (inside node_main; $PORT, $MAIN_NODE, $SLURM_PROCID from the job):
    train/train.py through verified_script, as every launcher runs it (launchers.base.TRAIN_ARGS)."""
    args = shlex.join(TRAIN_ARGS)
    if layout.cpu:
        return (f"{py} -m torch.distributed.run --nnodes {layout.train_nodes} --nproc_per_node "
                f"{layout.processes_per_node} --node_rank \"$SLURM_PROCID\" --master_addr \"$MAIN_NODE\" "
                f"--master_port \"$PORT\" {args} \"${{EXTRA[@]}}\"")
    return accelerate_config_arg(  # on the text the launch wrote to train/accelerate.yaml (launchers.base)
        f"{py} -m accelerate.commands.launch {ACCELERATE_ARG} --num_machines {layout.train_nodes} "
        f"--num_processes {layout.processes} --machine_rank \"$SLURM_PROCID\" "
        f"--main_process_ip \"$MAIN_NODE\" --main_process_port \"$PORT\" {args} \"${{EXTRA[@]}}\"")


def _vllm_lines(layout: SlurmLayout, py: str, model: str, t: dict[str, str]) -> list[str]:
    port, srun = layout.vllm_port, shlex.quote(layout.scheduler.get("srun") or "srun")
    return [
        "# vLLM server mode: the last node serves, started first and waited for (bounded).",
        f"VLLM_NODE=${{NODES[{layout.nodes - 1}]}}",
        "VLLM_ADDR=$(node_addr \"$VLLM_NODE\")",
        f"TRAIN_NODES=$(IFS=,; echo \"${{NODES[*]:0:{layout.train_nodes}}}\")",
        "# A secret the server and the trainers share in their environment only (trainer/vllm_auth.py): the server",
        "# answers only requests carrying it and signs each answer; any other server answering is refused.",
        f"export {KEY_ENV}=\"$({py} -m {AUTH_MODULE} new-key)\" || record_exit {VLLM_DOWN_EXIT}",
        f"{srun} --nodes=1 --ntasks=1 --nodelist=\"$VLLM_NODE\" {py} -m {SERVE_MODULE} --model "
        f"{shlex.quote(model)} --tensor_parallel_size {layout.gpus_per_node} --port {port} --host 0.0.0.0 "
        f"--middleware {MIDDLEWARE} > \"$LOGS/vllm-serve.log\" 2>&1 &",
        "VLLM_PID=$!",
        f"deadline=$((SECONDS + {VLLM_WAIT_S}))",
        f"until {py} -m {AUTH_MODULE} \"http://$VLLM_ADDR:{port}\" 2>/dev/null; up=$?; [ $up -eq 0 ]; do",
        f"  if [ $up -eq {IMPOSTOR_EXIT} ]; then",
        f"    {t['tail']} -n 30 \"$LOGS/vllm-serve.log\"; kill \"$VLLM_PID\" 2>/dev/null",
        f"    echo \"vLLM server did not come up: another process answers at $VLLM_ADDR:{port}, not the job's\"",
        f"    record_exit {VLLM_DOWN_EXIT}",
        "  fi",
        "  if ! kill -0 \"$VLLM_PID\" 2>/dev/null || [ $SECONDS -ge $deadline ]; then",
        f"    echo \"vLLM server on $VLLM_NODE did not come up within {VLLM_WAIT_S} s: see $LOGS/vllm-serve.log\"",
        f"    {t['tail']} -n 30 \"$LOGS/vllm-serve.log\"; kill \"$VLLM_PID\" 2>/dev/null",
        f"    record_exit {VLLM_DOWN_EXIT}",
        "  fi",
        f"  {t['sleep']} 5",
        "done",
        f"EXTRA+=(--vllm_server_host \"$VLLM_ADDR\" --vllm_server_port {port})",
    ]


def render_sbatch(layout: SlurmLayout, model: str, extra_args: list[str], head: list[str] | None = None) -> str:
    """The whole sbatch script for `layout`; `head`: comment lines at its top (the memory plan per node). Every
    command by absolute path (commands.tools, the scheduler's as layout.scheduler resolved them): none is looked up
    on the job's PATH."""
    py, t = shlex.quote(layout.python), tools()
    srun, scontrol = (shlex.quote(layout.scheduler.get(name) or name) for name in ("srun", "scontrol"))
    out = shlex.quote(layout.output_dir)
    resume = ["--resume_from_checkpoint", layout.resume_from] if layout.resume_from else []
    lines = [f"#!{BASH}", *(head or []), *[f"#SBATCH {o}" for o in layout.sbatch_options()],
             f"# GRPO run {layout.job_name} on SLURM, written and submitted by llm-finetuning launch_training.",
             "# By hand, from the run directory: sbatch train/launch.slurm",
             *([f"# {srun} and {scontrol} were not found where this was written: they come from the job's PATH"]
               if not srun.startswith("/") or not scontrol.startswith("/") else []),
             f"cd {shlex.quote(layout.run_dir)} || exit 1",
             "trap '' USR1  # USR1 is for the trainers (a checkpoint, then a stop): this shell lives on",
             "# Caches a library would write under your home (an arrow copy of the data) stay in the run.",
             '[ -n "$HF_DATASETS_CACHE$HF_HOME" ] || export HF_DATASETS_CACHE="$PWD/cache/datasets"',
             'export MPLCONFIGDIR="${MPLCONFIGDIR:-$PWD/cache/matplotlib}"',
             *python_env(layout.pythonpath).splitlines(), PINS_LINE]
    lines += [
        "LOGS=train/logs",
        f'{t["mkdir"]} -p "$LOGS"',
        f'record_exit() {{ {t["rm"]} -f "$LOGS/.exit-code.tmp"; (set -C; echo "$1" > "$LOGS/.exit-code.tmp") && '
        f'{t["mv"]} -fT "$LOGS/.exit-code.tmp" "$LOGS/exit-code"; '
        f'{shlex.quote(layout.python)} -m {EXIT_RECORD} "$1"; '  # the signed record readers trust (evidence.py)
        'exit "$1"; }',
        PYTHON_PIN_LINE,
        # each torchrun rank joins the gloo group only when transformers is told it is on CPU; after the check of
        # the launch environment (ACCELERATE_* is pinned), as train/launch.sh
        *(["export ACCELERATE_USE_CPU=1", KERNEL_SET_CACHE_LINE] if layout.cpu else []),
        'echo "==== llm-finetuning job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, restart ${SLURM_RESTART_COUNT:-0}, '
        f'at $({t["date"]} -u +%FT%TZ)"',
        f'{t["rm"]} -f "$LOGS"/node-*.exit "$LOGS/exit-code" "$LOGS/exit.json"',
        f'NODES=($({scontrol} show hostnames "$SLURM_JOB_NODELIST"))',
        "# a node's address (NodeAddr; the node name where none is set), for the rendezvous and the vLLM server",
        f'node_addr() {{ local a; a=$({scontrol} show node "$1" -o | {t["grep"]} -o "NodeAddr=[^ ]*" | '
        f'{t["cut"]} -d= -f2); echo "${{a:-$1}}"; }}',
        "MAIN_NODE=$(node_addr \"${NODES[0]}\")",
        f'PORT=$({py} -c "{FREE_PORT}")  # picked free on this (the first) node: no fixed port to clash on',
        f"EXTRA=({shlex.join([*resume, *extra_args])})",
        'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then  # requeued (preempted, node failure): resume by itself',
        f'  {t["rm"]} -f "$LOGS/stopped.json" "$LOGS/outcome.json"  # the last incarnation\'s end is not this one\'s',
        f'  latest=$({py} -c "{LATEST_CHECKPOINT}" {out})',
        f'  [ -n "$latest" ] && EXTRA=(--resume_from_checkpoint "$latest" {shlex.join(extra_args)}) && '
        'echo "resuming from $latest"',
        "fi",
        "VLLM_PID=",
    ]
    if layout.vllm_port:
        lines += _vllm_lines(layout, py, model, t)
    else:
        lines.append(f"TRAIN_NODES=$(IFS=,; echo \"${{NODES[*]:0:{layout.train_nodes}}}\")")
    lines += [
        "node_main() {  # on every training node: the launcher ignores USR1, the trainer turns it into a save",
        "  trap '' USR1",
        f'  echo "node $SLURMD_NODENAME (rank $SLURM_PROCID) at $({t["date"]} -u +%FT%TZ)"',
        *([] if layout.cpu else ["  " + ACCELERATE_LINE.format(env=ACCELERATE_TEXT_ENV, **t)]),
        f"  {_launch_line(layout, py)}",
        '  local rc=$?; echo "$rc" > "$LOGS/node-$SLURMD_NODENAME.exit"; return "$rc"',
        "}",
        "export -f node_main; export LOGS MAIN_NODE PORT",
        'export EXTRA_ARGS="${EXTRA[*]@Q}"  # the arguments, quoted, for each node\'s shell',
        f"{srun} --kill-on-bad-exit=1 --nodes={layout.train_nodes} --ntasks={layout.train_nodes} "
        f"--ntasks-per-node=1 --nodelist=\"$TRAIN_NODES\" {BASH} "
        "-c 'eval \"EXTRA=($EXTRA_ARGS)\"; node_main >> \"$LOGS/node-$SLURMD_NODENAME.log\" 2>&1'",
        "rc=$?",
        '[ -n "$VLLM_PID" ] && kill "$VLLM_PID" 2>/dev/null',
        f'echo "==== training step ended with exit code $rc at $({t["date"]} -u +%FT%TZ)"',
        "record_exit $rc",
    ]
    return "\n".join(lines) + "\n"
