"""JSON-Schema reward: 1.0 when the completion is JSON that validates against its schema, else 0.0.

The schema is one for the whole batch (a dict) or one per example (a list, or a data set column): a
list must have exactly one schema per completion, and a dict is never zipped against completions
(iterating a dict gives its keys: that silent bug scores every completion against a key string).
"""

from __future__ import annotations

import json

from mcp_server.errors import UserInputError
from mcp_server.rewards.declared import Column
from mcp_server.rewards.named import NamedReward
from mcp_server.rewards.text import completion_texts, fenced_blocks, single_tag

# The fenced blocks that are JSON (text.fenced_blocks): those tagged json or not at all.
JSON_TAGS = ("", "json")


def _schema_from(value, where: str) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise UserInputError(where, f"schema is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UserInputError(where, f"expected a JSON Schema object, got {type(value).__name__}")
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(value).check_schema(value)
    except SchemaError as exc:
        raise UserInputError(where, f"not a valid JSON Schema: {exc.message}") from None
    return value


def schemas_for_batch(schema, n: int, where: str) -> list[dict]:
    """One schema per completion: a dict (or JSON string) is the batch's schema, a list must have length n."""
    if isinstance(schema, (dict, str)):
        return [_schema_from(schema, where)] * n
    if isinstance(schema, (list, tuple)):
        if len(schema) != n:
            raise UserInputError(where, f"got {len(schema)} schemas for {n} completions: give one per completion or "
                                        "one dict for all")
        return [_schema_from(s, f"{where}[{i}]") for i, s in enumerate(schema)]
    raise UserInputError(where, f"expected a schema dict, a JSON string or a list of them, got {type(schema).__name__}")


def extract_json(text: str, tag: str | None = None) -> str:
    """The JSON text of a completion: the tag block when set, else the last complete ```json (or untagged) block
    (JSON_TAGS), else the text."""
    if tag:
        return single_tag(text, tag) or ""
    blocks = fenced_blocks(text, JSON_TAGS)
    return (blocks[-1] if blocks else text).strip()


def score_json_schema(completions: list, columns: dict, schema=None, schema_column: str = "schema",
                      tag: str | None = None, value: float = 1.0) -> list[float]:
    from jsonschema.validators import validator_for

    texts = completion_texts(completions)
    if schema is None:
        if schema_column not in columns:
            raise UserInputError(
                "params.schema", f"no schema given and the data set has no '{schema_column}' column; set params.schema "
                "(one for all) or params.schema_column (one per example)",
            )
        schemas = schemas_for_batch(columns[schema_column], len(texts), f"column '{schema_column}'")
    else:
        schemas = schemas_for_batch(schema, len(texts), "params.schema")
    scores = []
    for text, one in zip(texts, schemas, strict=True):
        try:
            instance = json.loads(extract_json(text, tag))
        except (json.JSONDecodeError, RecursionError):
            scores.append(0.0)
            continue
        scores.append(value if validator_for(one)(one).is_valid(instance) else 0.0)
    return scores


def make_json_schema_reward(schema: dict | None = None, schema_column: Column = "schema", tag: str | None = None,
                            value: float = 1.0) -> NamedReward:
    """`value` (1.0) when the completion (its tag block, else its last ```json block, else all of it) parses as JSON
    and validates against its JSON Schema, else 0.0. One schema for the batch (params.schema) or one per example (a
    data set column of schemas, best stored as JSON strings).

    Role: task, scores 0 to value

    Args:
        schema: One JSON Schema for every example; null: read per-example schemas from schema_column.
        schema_column: Data set column with one schema per example (dict or JSON string).
        tag: Tag whose body is the JSON; null: last ```json block, else the whole completion.
        value: Reward for valid JSON.

    Example: {"schema": {"type": "object", "required": ["name"]}}
    """
    if schema is not None:
        if isinstance(schema, (list, tuple)):
            raise UserInputError(
                "params.schema", "one fixed schema (a dict) in params; per-example schemas come from a column "
                                 "(params.schema_column)"
            )
        schema = _schema_from(schema, "params.schema")
    if tag is not None and (not isinstance(tag, str) or not tag.isidentifier()):
        raise UserInputError("params.tag", f"expected a tag name or null, got {tag!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise UserInputError("params.value", f"expected a positive number, got {value!r}")
    return NamedReward("json_schema_reward", score_json_schema, schema=schema, schema_column=schema_column, tag=tag,
                       value=float(value))
