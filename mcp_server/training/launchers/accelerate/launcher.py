"""The accelerate launcher: several GPUs on this machine through `accelerate launch` with one of TRL's bundled
accelerate configs (train/accelerate.yaml: multi_gpu for DDP, DeepSpeed ZeRO-2 / ZeRO-3, FSDP2), sized for the
run (processes, mixed precision). It starts, is read and is stopped as the local launcher's process is."""

from __future__ import annotations

from mcp_server.training.launchers.base import (
    TRAIN_ARGS,
    TRL_ACCELERATE_CONFIGS,
    LaunchPlan,
    LaunchTarget,
    mixed_precision,
    trl_accelerate_config,
)
from mcp_server.training.launchers.local.launcher import LocalLauncher


class AccelerateLauncher(LocalLauncher):
    name = "accelerate"

    def accepts(self, target: LaunchTarget) -> bool:
        return target.request.num_nodes == 1 and not target.cpu and target.machine.strategy != "single"

    def plan(self, target: LaunchTarget) -> LaunchPlan:
        machine = target.machine
        accel = trl_accelerate_config(TRL_ACCELERATE_CONFIGS[machine.strategy])
        accel.update(num_processes=machine.processes, num_machines=1, machine_rank=0,
                     mixed_precision=mixed_precision(target.config))
        command = [target.python, "-m", "accelerate.commands.launch", "--config_file", "train/accelerate.yaml",
                   *TRAIN_ARGS, *target.extra]
        return self._plan(target, command, list(machine.notes), accelerate_config=accel)
