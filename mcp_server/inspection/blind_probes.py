"""The review's blind probes (rewards.blind_texts holds the design and its limits): completions derived from the
evidence key, scored at review and again at every replay of the trainer (inspection.replay). At review the process
that holds the key derives COUNT probes from the reviewed samples (each a sample's prompt and columns with a derived
completion) and has the rewards score them: in the same process when inspect_rewards runs there, else the keyless
worker scores them as data (review.score_blind_probes: its rewards are imported where the key cannot be read). Each
probe is scored alone: a reward that raises on one records that it raised. Only their scores are kept, in
inspection/blind_probes.json, signed (evidence.py) and bound to the verdict's samples.jsonl and review.json hashes.
The trainer derives the same probes with the key and scores them with the rewards it trains with, before the first
step, at every logging step and after the last (replay.replay_review): a reward that scores one otherwise than
recorded is refused (exit 3), naming it and the probe's kind. Probed: the rewards the row probes probe
(row_probes.probed); the project's other built-ins read only the completion and row.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mcp_server import evidence
from mcp_server.errors import UserInputError
from mcp_server.inspection.row_probes import probed, same, shown
from mcp_server.rewards import blind_texts
from mcp_server.runs import Run
from mcp_server.workspace import atomic_write_json, sha256_file

LABEL = "review"


def path(run: Run) -> Path:
    return run.inspection / "blind_probes.json"


def _text(completion) -> str:
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    return completion if isinstance(completion, str) else str(completion)


def _with(completion, text: str):
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return [*completion[:-1], {**completion[-1], "content": text}]
    return text


def probes(secret: bytes, run: Run, samples: list[dict], samples_sha256: str) -> list[dict]:
    """The probes of the review of `samples` (samples.jsonl's, whose sha256 is given): samples with derived
    completions (their `kind` names how each was derived)."""
    seed = blind_texts.seed(secret, LABEL, f"{Path(run.dir).resolve()}\0{samples_sha256}")
    out = []
    for k, (i, text) in enumerate(blind_texts.derive(seed, [_text(s["completion"]) for s in samples])):
        sample = samples[i]
        out.append({**{key: v for key, v in sample.items() if key != "completion_ids"}, "id": f"probe {k}",
                    "kind": blind_texts.KINDS[k % len(blind_texts.KINDS)],
                    "completion": _with(sample["completion"], text), "completion_ids": []})
    return out


def scored(funcs: list, specs: list, names: list[str], probe_samples: list[dict], score) -> dict[str, list]:
    """Each probed reward's scores on the probes (`score`: review._score), rounded as review.jsonl's."""
    return {name: _each(score, func, spec, probe_samples) for func, spec, name in zip(funcs, specs, names)
            if probed(spec) and probe_samples}


def _each(score, func, spec, probe_samples: list[dict]) -> list:
    """A reward's score on each probe alone (a reward may raise on a text it never met: that probe records "raised
    <error>", and the replay expects the same; the others keep their scores)."""
    out: list = []
    for sample in probe_samples:
        try:
            value = score([func], [spec], [sample])[0][0]
        except UserInputError as exc:
            out.append(f"raised {str(exc).split(' raised ', 1)[-1].split(' ', 1)[0]}")
            continue
        out.append(None if value != value else round(value, 6))
    return out


def _samples_bytes(run: Run) -> tuple[list[dict], str]:
    from mcp_server.inspection.files import read_samples

    samples, data = read_samples(run, with_bytes=True)  # the sha256 of the bytes the probes come from (one read)
    return samples, hashlib.sha256(data).hexdigest()


def record_review(run: Run, score_probes, review_sha256: str | None = None) -> None:
    """At review, in the process that holds the key: derive the probes, have `score_probes(probes)` score them
    (`scored` here, or the keyless worker: review.score_blind_probes), write the signed record. `review_sha256`:
    review.json's as the caller wrote it (never read back), else the file's (the keyless worker wrote it)."""
    secret = evidence.key(create=True)
    samples, samples_sha = _samples_bytes(run)
    probe_samples = probes(secret, run, samples, samples_sha)
    record = {"samples_sha256": samples_sha, "review_sha256": review_sha256 or sha256_file(run.review),
              "count": len(probe_samples),
              "scores": score_probes(probe_samples)}
    atomic_write_json(run.inside(path(run)), evidence.sign_run(run, path(run), record))


def current(run: Run) -> bool:
    """Whether the record is signed and bound to the review and samples there now."""
    record = _read(run)
    return record is not None and run.review.is_file() and record.get("review_sha256") == sha256_file(run.review)


def _read(run: Run) -> dict | None:
    try:
        record = json.loads(path(run).read_bytes())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and evidence.valid_run(run, path(run), record) else None


def replay(run: Run, verdict: dict, funcs: list, specs: list, names: list[str], samples: list[dict],
           score) -> tuple[str, list[str]]:
    """The trainer's blind probes: (what it compared, a line per reward that scores a probe otherwise). UserInputError
    (field "blind_probes") when the record is missing, unsigned or of another review."""
    if not any(probed(s) for s in specs):
        return "", []
    record = _read(run)
    if record is None or record.get("samples_sha256") != verdict.get("samples_sha256") or \
            record.get("review_sha256") != verdict.get("review_sha256") or not isinstance(record.get("scores"), dict):
        raise UserInputError("blind_probes", f"{path(run).name} is missing, not signed here, or not of the review "
                             "the verdict signed, so the rewards cannot be scored on texts nobody in the workspace "
                             "knows: sample and inspect again and record a new verdict")
    # the samples are the verdict's (replay.reviewed checked their bytes against its samples_sha256)
    probe_samples = probes(evidence.key(), run, samples, verdict["samples_sha256"])
    lines = []
    for name, stored in record["scores"].items():
        if name not in names:
            raise UserInputError("blind_probes", f"the blind probes name the reward {name}, not one this process "
                                 "trains with: inspect again and record a new verdict")
        r = names.index(name)
        now = _each(score, funcs[r], specs[r], probe_samples)
        differ = [(p, s, v) for p, s, v in zip(probe_samples, stored, now)
                  if not (s == v if isinstance(s, str) or isinstance(v, str) else same(s, v))]
        if len(stored) != len(probe_samples) or differ:
            p, then, v = differ[0] if differ else (probe_samples[0], "none recorded", now[0])
            lines.append(f"the reward {name} scores {len(differ)} of the {len(probe_samples)} blind probes "
                         f"(completions derived from the evidence key, never stored: nobody in the workspace knows "
                         f"them) differently than at review ({p['id']}, {p['kind']}: reviewed {shown(then)}, now "
                         f"{shown(v)}): it pays texts it was not reviewed on otherwise than at review")
    return f"{len(probe_samples)} blind probes x {len(record['scores'])} rewards", lines
