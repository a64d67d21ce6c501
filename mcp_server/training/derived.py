"""A run's state as each launcher's `state` (launchers/local/process_state.py, launchers/slurm/job.py) reads it,
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
    # The backend's own view of the run, shown as training_status's `job` (slurm: the scheduler's job); its
    # launcher also keeps it in the record it returns, so run.json holds it.
    view: dict | None = None
    running_as: str | None = None  # the live run in words when it is not a process here (slurm: "SLURM job 12")
    copied_record: dict | None = None  # a copied run: the launch record it was copied with (not its own)

    def noted(self, why: str) -> DerivedState:
        """This state with `why` added to its note."""
        return replace(self, note=f"{self.note}; {why}" if self.note else why)
