"""Blind probes: texts the workspace holder cannot know, derived from the evidence key (issue 48, round 17).

The replays (inspection.replay, inspection.row_probes, evaluation.grader_replay) score again texts that are stored
in the workspace: the reviewed completions, the baseline's replies. An input a reward reads outside every pin (a
file read by a process it starts, an environment variable) can be changed after the verdict so that every stored
text scores as stored and every other text otherwise (round 17, b01: a "bonus" regex matching anything but the 52
reviewed completions trained at 5.0 behind "same scores"; b04: a signed PROMOTE at +100 points). So each replay also
scores texts nobody outside this package can name: derived from HMAC(evidence key, label and the review's or
baseline's identity), deterministic, so the one who holds the key (the caller at review and baseline, the trainer,
promote) derives the same texts again; only their scores are kept (signed), never the texts.

`derive(seed, sources, count)`: `count` probes as (source index, text), in three kinds taken in turn, each mimicking
what the replay is there to protect: a stored text with a derived edit (a token inserted at a derived place: what a
model nearly wrote), a stored text put with another source's row (another prompt's reply: what an input keyed to the
row would move), and a derived string of words (what a model might write instead). A reward that pays them otherwise
after the verdict than at review is refused, naming it.

What it cannot prove: that a reward scores every unseen text as reviewed. A reward (or the input it reads) that tells
these probes from a model's completions (a feature the derivation does not copy), or that keeps its own record of
every text it was shown at review (its code is reviewed: that is what reading it is for) and pays all but those later,
passes. The probes make a post-verdict switch that pays "everything but the stored texts" visible; no black-box
replay shows a rule written to spare every text it was ever tested on.
"""

from __future__ import annotations

import hashlib
import hmac

COUNT = 12  # probes per replay (one reward call per reward on them: cheap beside the review's own scoring)
KINDS = ("edited", "crossed", "derived")
_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def seed(secret: bytes, label: str, identity: str) -> bytes:
    """The probes' seed for one review or baseline (`identity`): nothing without the key derives it."""
    return hmac.new(secret, f"llm-finetuning blind probes\0{label}\0{identity}".encode(), hashlib.sha256).digest()


def _stream(seed_bytes: bytes, k: int) -> bytes:
    return hmac.new(seed_bytes, f"probe {k}".encode(), hashlib.sha256).digest()


def _word(data: bytes, at: int, length: int) -> str:
    return "".join(_LETTERS[data[(at + i) % len(data)] % len(_LETTERS)] for i in range(length))


def derive(seed_bytes: bytes, sources: list[str], count: int = COUNT) -> list[tuple[int, str]]:
    """`count` probes (the row's source index, the text) from `sources` (the stored texts, in their order)."""
    if not sources:
        return []
    out = []
    for k in range(count):
        data = _stream(seed_bytes, k)
        i = int.from_bytes(data[:4], "big") % len(sources)
        kind = KINDS[k % len(KINDS)]
        if kind == "edited":
            text = sources[i]
            at = int.from_bytes(data[4:8], "big") % (len(text) + 1)
            out.append((i, text[:at] + f" {_word(data, 8, 3 + data[12] % 6)} " + text[at:]))
        elif kind == "crossed" and len(sources) > 1:
            j = (i + 1 + int.from_bytes(data[4:8], "big") % (len(sources) - 1)) % len(sources)
            out.append((i, sources[j]))
        else:
            words = [_word(data, 8 + 5 * w, 2 + data[w] % 7) for w in range(1 + data[31] % 5)]
            out.append((i, " ".join(words)))
    return out
