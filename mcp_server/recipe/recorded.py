"""train/request.json, typed: the emit_grpo_config request as the run recorded it, with what emission chose.

Emission writes it through `RecordedRequest` (`record`) and every reader reads it through `read_recorded`: the
launchers and the launch gates (the target: gpu, num_gpus, finetune), training_status and list_runs (the model),
the guard in the trainer process (its mode), validation and the memory plan of a config with its sidecars (the
target, override_reason), diagnosis (the target), sampling (the prompt column).

Old and hand-written records. A field this version does not know is refused, naming it (and the closest known
name); a value of the wrong type is refused, naming its field. A missing field takes the default written below,
which is what a reader assumed before the record was typed:
- `model`, `dataset`, `gpu`: None (not recorded). A config copied with a request.json that holds only its target
  ({"gpu": "L4", "num_gpus": 1}) is a record; each reader says what it does without the rest (validation and the
  memory plan: 1x H100; diagnosis: the CPU when the config says use_cpu, else 1x H100).
- `num_gpus`: 1; every other request field: emit_grpo_config's own default (recipe/models.py).
- `variant_chosen`, `is_moe`: None (not recorded); `trainer`: "grpo" (runs emitted before agentic GRPO, whose
  train.py is the single-turn template).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from mcp_server.errors import UserInputError, short, validation_message
from mcp_server.inputs import Name, PathText
from mcp_server.recipe.models import GRPORecipeRequest, Variant
from mcp_server.userfiles import read_json

# train/request.json's sha256 in the verdict's pin, passed by the launchers to the trainer (launchers.base
# verdict_env): the trainer reads its guard mode and target from it after the gate.
REQUEST_SHA_ENV = "LLM_FINETUNING_REQUEST_SHA256"


class RequestChanged(RuntimeError):
    """train/request.json is not the file the gate checked: not a bad request to train past (UserInputError)."""

Trainer = Literal["grpo", "grpo_tools"]  # emission.agentic.TRAINER_TEMPLATES' keys


class RecordedRequest(GRPORecipeRequest):
    """train/request.json: the request's fields (unknown ones refused) and emission's choices."""

    model: PathText | None = Field(default=None, description="The policy model as requested (None: not recorded).")
    dataset: PathText | None = Field(default=None, description="The prompt data set (None: not recorded).")
    gpu: Name | None = Field(default=None, description="The target GPU, or 'cpu' (None: not recorded).")
    variant_chosen: Variant | None = Field(default=None, description="The loss variant emission chose.")
    is_moe: bool | None = Field(default=None, description="Whether emission found a mixture-of-experts model.")
    trainer: Trainer = Field(default="grpo", description="Which trainer template train/train.py is.")

    @property
    def cpu(self) -> bool:
        return str(self.gpu or "").lower() == "cpu"

    def fields_given(self) -> dict:
        """The fields the file holds, as written (a reader that merges them over other values)."""
        return self.model_dump(exclude_unset=True)


def record(request: GRPORecipeRequest, *, variant_chosen: str, is_moe: bool, trainer: str) -> dict:
    """What emission writes to train/request.json for `request` (checked against the model before it is written)."""
    return RecordedRequest(**request.model_dump(), variant_chosen=variant_chosen, is_moe=is_moe,
                           trainer=trainer).model_dump()


def read_recorded(path: str | Path, field: str = "run") -> RecordedRequest:
    """The record at `path` (a run's train/request.json, or one beside a config); an empty record when there is
    none. UserInputError(`field`) naming the file and the field when it is not a record this version reads."""
    return read_recorded_sha256(path, field)[0]


def read_recorded_sha256(path: str | Path, field: str = "run") -> tuple[RecordedRequest, str | None]:
    """read_recorded, with the sha256 of the bytes it parsed (None: no file). In a trainer (REQUEST_SHA_ENV set by
    the launch), train/request.json whose bytes are not the ones the gate checked is refused (RequestChanged)."""
    path = Path(path)
    pinned = os.environ.get(REQUEST_SHA_ENV) if path.name == "request.json" else None
    if not path.is_file() and not pinned:
        return RecordedRequest(), None
    data, sha256 = read_json(path, field, dict, with_sha256=True)
    if pinned and sha256 != pinned:  # in a trainer: the bytes read, not the file the gate saw (issue 48, round 19)
        raise RequestChanged(f"{short(path)} changed after the inspection verdict (its sha256 is not the one the "
                             "launch's gate checked): refusing to train with it")
    try:
        return RecordedRequest.model_validate(data), sha256
    except ValidationError as exc:
        raise UserInputError(field, f"{short(path)} is not a recorded recipe request (train/request.json): "
                             f"{validation_message(exc, RecordedRequest)}") from None