"""A run as one value (issue 46): its config, the target it trains on, and what emission recorded beside the config.

A run directory holds the config (train/config.yaml, what TRL's parser reads) and the records beside it:
train/request.json (the request as emission recorded it, recipe.recorded), train/rewards.json (the reward specs),
train/agentic.json (an agentic run's tools and environment) and train/dynamic_sampling.json (DAPO's dynamic sampling
in the trainer). Emission builds a `RunSpec` and writes it
(`write`); a launch reads one once (`read`) and passes it, with its `Target`, to every gate; validation, the memory
plan and the launcher read what they need from it, never the files again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mcp_server.config import FIELD
from mcp_server.config.target import Target
from mcp_server.errors import UserInputError
from mcp_server.recipe.recorded import RecordedRequest, read_recorded, read_recorded_sha256
from mcp_server.rewards.spec import read_reward_specs
from mcp_server.runs import AGENTIC_FILE, DYNAMIC_SAMPLING_FILE, Run, sidecars
from mcp_server.userfiles import read_bytes, read_config_file, read_json
from mcp_server.workspace import atomic_write_json, atomic_write_text


@dataclass(frozen=True)
class RunSpec:
    values: dict  # train/config.yaml's mapping as written: what TRL's parser reads (validation sets `env:` aside)
    target: Target = Target()
    request: RecordedRequest = field(default_factory=RecordedRequest)  # train/request.json (empty: none)
    rewards: list[dict] | None = None  # train/rewards.json's specs (None: the config's reward_funcs alone)
    agentic: dict | None = None  # train/agentic.json (None: not an agentic run)
    dynamic_sampling: dict | None = None  # train/dynamic_sampling.json (None: TRL's batches as they come)
    base_dir: Path | None = None  # where relative data files resolve: the run directory train.py runs in
    is_moe: bool | None = None  # emission's finding; None: detected from the model when a rule asks
    config_sha256: str | None = None  # of the config file's bytes as read (None: built in memory)
    # of each record beside the config as read ({file name: sha256}; the trainer compares dynamic_sampling.json's
    # with the verdict's train/ file pin without reading it again)
    sidecar_sha256: dict = field(default_factory=dict)
    # inspection/verdict.json's text as the launch read it (of_run; None: none read): the inspection gate judges it
    # and the launcher passes its hash and pins to the trainer (launchers.base.verdict_env), never a second read
    verdict: str | None = None

    # ------------------------------------------------------------ reading
    @classmethod
    def read(cls, where: Run | str | Path, *, gpu: str | None = None, num_gpus: int | None = None,
             vllm_server_gpus: int | None = None, nodes: int = 1, field: str = "config_path",
             on_bad_request: Callable[[UserInputError], None] | None = None) -> RunSpec:
        """A run (its train/config.yaml) or a config file, with the records beside it; the target is the one
        given, else the recorded one, else the CPU for a config that says use_cpu, else 1x H100. `field` names
        the input in errors. `on_bad_request`: a request.json this version does not read is said to it and read
        as an empty record (the trainer: a broken record must not stop training), else refused."""
        config_path = where.config if isinstance(where, Run) else Path(where)
        request_path, rewards_path = sidecars(config_path)
        read, shas = {}, {}
        try:  # the target first: its error names the run's record
            request, shas[request_path.name] = read_recorded_sha256(request_path, field)
        except UserInputError as exc:
            if on_bad_request is None:
                raise
            on_bad_request(exc)
            request = RecordedRequest()
        values, sha = read_config_file(config_path, field, with_sha256=True)
        rewards = ([spec.model_dump() for spec in read_reward_specs(rewards_path, field)]
                   if rewards_path.is_file() else None)
        for name in (AGENTIC_FILE, DYNAMIC_SAMPLING_FILE):
            if (config_path.parent / name).is_file():
                read[name], shas[name] = read_json(config_path.parent / name, field, dict, with_sha256=True)
        target = Target(gpu or request.gpu or ("cpu" if values.get(FIELD.use_cpu) is True else "H100"),
                        num_gpus or request.num_gpus, vllm_server_gpus, nodes=nodes)
        return cls(values=values, target=target, request=request, rewards=rewards, agentic=read.get(AGENTIC_FILE),
                   dynamic_sampling=read.get(DYNAMIC_SAMPLING_FILE), base_dir=run_dir_of(config_path),
                   config_sha256=sha, sidecar_sha256={k: v for k, v in shas.items() if v})  # is_moe: from the model

    @classmethod
    def of_run(cls, run: Run, vllm_server_gpus: int | None = None, nodes: int = 1) -> RunSpec:
        """The run's spec, read once for a launch (`vllm_server_gpus`: its server GPUs, `nodes`: its num_nodes), a
        status or a gate; a run not emitted yet has no config values (the config gate says so)."""
        if run.config.is_file():
            spec = cls.read(run, vllm_server_gpus=vllm_server_gpus, nodes=nodes, field="run")
            return dataclasses.replace(spec, verdict=_verdict_text(run))
        request = read_recorded(run.request, "run")
        return cls(values={}, target=Target(request.gpu or "H100", request.num_gpus, vllm_server_gpus, nodes=nodes),
                   request=request, base_dir=run.dir, verdict=_verdict_text(run))

    # ------------------------------------------------------------ what the records say
    @property
    def fields(self) -> dict:
        """The config's TRL fields: its mapping without TrlParser's `env:` block (environment variables TRL's
        parser sets, not a field of any dataclass)."""
        return {k: v for k, v in self.values.items() if k != "env"}

    @property
    def override_reason(self) -> str | None:
        return self.request.override_reason

    @property
    def prompt_column(self) -> str | None:
        """The data set's prompt column as recorded (None: the record names none)."""
        return self.request.fields_given().get("prompt_column")

    def with_values(self, values: dict) -> RunSpec:
        """The same run with other config fields (a patch, a lever): the records and target unchanged, the file's
        hash no longer its."""
        return dataclasses.replace(self, values=dict(values), config_sha256=None)

    def with_target(self, target: Target) -> RunSpec:
        return dataclasses.replace(self, target=target)

    def launched_with(self, strategy: str | None) -> RunSpec:
        """The same run on the same target as a launch lays it out (`strategy`: its plan's, e.g. zero2), so the
        gates judge what depends on the strategy (weight precision) for the processes that will start."""
        return self.with_target(dataclasses.replace(self.target, strategy=strategy))

    # ------------------------------------------------------------ crossing to a worker (worker._encode)
    def to_wire(self) -> dict:
        """This value as JSON, for a call that runs where workspace code may run (worker.apart: the launch's
        inspection gate judges the files this launch read, not a second read of them)."""
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                "target": dataclasses.asdict(self.target), "request": self.request.model_dump(mode="json"),
                "base_dir": None if self.base_dir is None else str(self.base_dir)}

    @classmethod
    def from_wire(cls, data: dict) -> RunSpec:
        return cls(**{**data, "target": Target(**data["target"]),
                      "request": RecordedRequest.model_validate(data["request"]),
                      "base_dir": None if data["base_dir"] is None else Path(data["base_dir"])})

    # ------------------------------------------------------------ writing
    def write(self, run: Run, config_text: str) -> None:
        """Emission's writes: the config (`config_text`, these values rendered with their reasons) and the records
        beside it, each atomically. A sidecar this run has none of is removed: one an earlier emission into the
        same folder left (a DAPO run's dynamic_sampling.json) would make the trainer run what this config does not
        say (emission refuses a folder whose sidecars no emission wrote before it gets here)."""
        atomic_write_text(run.config, config_text)
        atomic_write_json(run.rewards, self.rewards or [])
        atomic_write_json(run.request, self.request.model_dump())
        for path, value in ((run.agentic, self.agentic), (run.dynamic_sampling, self.dynamic_sampling)):
            if value:
                atomic_write_json(path, value)
            else:
                path.unlink(missing_ok=True)


def run_dir_of(config_path: Path) -> Path:
    """Where the config's relative data_files resolve: the run directory of train/config.yaml (train.py runs
    there), else the config's own folder."""
    folder = config_path.expanduser().resolve().parent
    return folder.parent if folder.name == "train" else folder


def _verdict_text(run: Run) -> str | None:
    """inspection/verdict.json's text, one read (None: no regular file there); bytes that are no UTF-8 read as ""
    (no verdict: the gate closes on it)."""
    try:
        data = read_bytes(run.verdict, "run") if run.verdict.is_file() else None
    except UserInputError:
        return None
    try:
        return None if data is None else data.decode("utf-8")
    except UnicodeDecodeError:
        return ""


def verdict_json(text: str | None) -> dict | None:
    """RunSpec.verdict as a JSON object (None for none, or for text that is not one)."""
    try:
        value = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
