"""The hardware a run trains on, and the one place its training world is decided (issue 46).

Validation, the memory plan and the launcher each need the training world (TRL's world_size: the processes that
train) and, in vLLM server mode, how many GPUs the run's own server holds. Decided in three places before, they
disagreed: validation assumed a one-GPU server while a launch with `vllm_server_gpus=2` trained on one GPU fewer,
so TRL's whole-groups rule was checked on a world the run never had and failed inside the trainer. A `Target` is
built from what the run records (its GPU and count) and what the launch asks (the server's GPUs, its nodes); every
caller asks it, not the arithmetic.

Over several nodes (a SLURM job) the GPUs are split evenly over the nodes and, in vLLM server mode, the last node
serves on all its GPUs while the others train (the open-r1 layout): 2 nodes x 8 GPUs train a world of 8, not 15.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mcp_server.config.batches import training_world

# `trl vllm-serve`'s default and the emitter's: one GPU serves, the rest train.
DEFAULT_SERVER_GPUS = 1


@dataclass(frozen=True)
class Target:
    gpu: str | None = "H100"  # a GPU name from the catalog, or "cpu" (None: a memory size given instead)
    num_gpus: int = 1
    vllm_server_gpus: int | None = None  # the launch's choice for a server-mode run; None: DEFAULT_SERVER_GPUS
    # the launch's distributed strategy (single, ddp, zero1, zero2, zero3, fsdp: launchers.machine), where a launch
    # chose it; None: what the config says (its `deepspeed` or `fsdp` fields). DeepSpeed ZeRO and FSDP under mixed
    # precision keep float32 master weights however the model was loaded (recipe.precision).
    strategy: str | None = None
    nodes: int = 1  # the machines the run spans (the launch's num_nodes; more than 1: a SLURM job)

    @property
    def cpu(self) -> bool:
        return str(self.gpu).strip().lower() == "cpu"

    @property
    def gpus_per_node(self) -> int:
        """GPUs on each node: the run's GPUs split evenly over its nodes (a remainder is not used); none on a CPU
        target."""
        return 0 if self.cpu else max(self.num_gpus // max(self.nodes, 1), 1)

    def training_nodes(self, serves_locally: bool) -> int:
        """Nodes that train: over several nodes a local vLLM server takes the last one; on one node the server
        shares it. Below 1 (server mode on one node of a job that needs a node to serve) is the caller's to refuse."""
        return self.nodes - 1 if serves_locally and self.nodes > 1 else self.nodes

    def server_gpus(self, serves_locally: bool) -> int:
        """GPUs the run's own vLLM server holds: none on a CPU target (it shares the host) or without a local
        server (colocate, or a server reached at another address); over several nodes, a whole node's."""
        if self.cpu or not serves_locally:
            return 0
        if self.nodes > 1:
            return self.gpus_per_node
        return DEFAULT_SERVER_GPUS if self.vllm_server_gpus is None else self.vllm_server_gpus

    def processes_per_node(self, serves_locally: bool, cpu_processes: int | None = None) -> int:
        """Training processes on each training node: its GPUs less a one-node server's; on a CPU target the
        launch's choice (`cpu_processes`), else one."""
        if self.cpu:
            return cpu_processes or 1
        return self.world(serves_locally) // max(self.training_nodes(serves_locally), 1)

    def world(self, serves_locally: bool) -> int:
        """Training processes: the GPUs (of whole nodes) less the local server's, at least one; one on a CPU
        target."""
        return training_world(self.gpus_per_node * self.nodes, self.server_gpus(serves_locally), cpu=self.cpu)

    def gpus_used(self, serves_locally: bool) -> int:
        """GPUs the run holds: its training world and its local server's (what the memory plan plans on)."""
        return self.world(serves_locally) + self.server_gpus(serves_locally)

    def pooled(self) -> Target:
        """The same world as one machine's GPUs, what the memory planner (which counts GPUs and the server's share
        of them, not nodes) plans on: over several nodes, the whole nodes' GPUs with one node's serving."""
        if self.nodes == 1 or self.cpu:
            return self
        return replace(self, num_gpus=self.gpus_per_node * self.nodes, vllm_server_gpus=self.gpus_per_node, nodes=1)
