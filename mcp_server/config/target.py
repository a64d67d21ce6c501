"""The hardware a run trains on, and the one place its training world is decided (issue 46).

Validation, the memory plan and the launcher each need the training world (TRL's world_size: the processes that
train) and, in vLLM server mode, how many GPUs the run's own server holds. Decided in three places before, they
disagreed: validation assumed a one-GPU server while a launch with `vllm_server_gpus=2` trained on one GPU fewer,
so TRL's whole-groups rule was checked on a world the run never had and failed inside the trainer. A `Target` is
built from what the run records (its GPU and count) and what the launch asks (the server's GPUs); every caller asks
it, not the arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def cpu(self) -> bool:
        return str(self.gpu).strip().lower() == "cpu"

    def server_gpus(self, serves_locally: bool) -> int:
        """GPUs the run's own vLLM server holds: none on a CPU target (it shares the host) or without a local
        server (colocate, or a server reached at another address)."""
        if self.cpu or not serves_locally:
            return 0
        return DEFAULT_SERVER_GPUS if self.vllm_server_gpus is None else self.vllm_server_gpus

    def world(self, serves_locally: bool) -> int:
        """Training processes: the GPUs less the local server's, at least one; one on a CPU target."""
        return training_world(self.num_gpus, self.server_gpus(serves_locally), cpu=self.cpu)
