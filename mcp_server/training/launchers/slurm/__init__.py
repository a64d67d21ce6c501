"""The SLURM backend: a job on one or more nodes (docs/slurm.md).

- launcher.py   the Launcher on the seam; its plan's own part is a SlurmDetails (LaunchPlan.details)
- script.py     the typed SlurmLayout and its sbatch script, train/launch.slurm
- node_plan.py  the memory plan per node (in the script's head, run.json and training_status)
- job.py        submit, the run's own job read from the scheduler (its state), its stop
- scheduler.py  the scheduler's commands (sbatch, squeue, scontrol, sacct, scancel, sinfo), read into values
"""

from mcp_server.training.launchers.slurm.launcher import SlurmLauncher

LAUNCHER = SlurmLauncher()
