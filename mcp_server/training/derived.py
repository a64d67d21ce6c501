"""A run's state as each launcher's `state` (launchers/process_state.py, slurm_launcher.slurm_state) reads it,
through derive_state (runstate.py), from the process, the scheduler and the run's files: a frozen value, never
the server's memory. training_status, stop_training, list_runs and the launch gates read its fields;
sync_run_json records it in run.json."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mcp_server.training.models import RunState


@dataclass(frozen=True)
class DerivedState:
    """What is known of a run now. `record` is run.json as read (or restored from the live process), `note` what
    was not as expected (run.json lost or wrong, a copied run, a write the disk refused) and so what is known."""

    state: RunState
    alive: bool
    pid: int | None = None
    exit_code: int | None = None  # None while alive: the exit code of an ended launch
    outcome: dict | None = None  # train/logs/outcome.json of the current launch
    stop_requested: bool = False
    record: dict | None = None
    note: str | None = None
    orphans: tuple[int, ...] = ()  # pids of the run's processes that outlived its launcher
    job: dict | None = None  # a SLURM run: the scheduler's view of its job (slurm_launcher.slurm_state)
    copied_record: dict | None = None  # a copied run: the launch record it was copied with (not its own)

    def noted(self, why: str) -> DerivedState:
        """This state with `why` added to its note."""
        return replace(self, note=f"{self.note}; {why}" if self.note else why)

    @property
    def job_id(self) -> str | None:
        """The SLURM job the scheduler reports for this run, None for a local run."""
        return (self.job or {}).get("job_id")
