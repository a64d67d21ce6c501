"""examples/ holds emitted runs (scripts/make_examples.py): each is what `emit-config` writes today for the line
examples/README.md gives, so an emitter change that alters one fails here until `make_examples.py --write`
regenerates them (an intended change, reviewed in its diff)."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import make_examples  # noqa: E402  (scripts/ is no package)


def test_examples_are_what_the_emitter_writes_now():
    now = make_examples.emit_all()
    assert len([name for name in now if name.endswith("config.yaml")]) == len(make_examples.RUNS) >= 3
    diff = make_examples.differences(now)
    assert not diff, "the emitter drifted from examples/ (python scripts/make_examples.py --write after an " \
        "intended change):\n" + "\n".join(diff[:60])


def test_the_comparison_sees_a_changed_value():
    """The check itself: one emitted value changed is a difference, naming the file."""
    name = f"{make_examples.RUNS[0][0]}/train/config.yaml"
    now = {path.relative_to(make_examples.EXAMPLES).as_posix(): path.read_text(encoding="utf-8")
           for path in make_examples.EXAMPLES.rglob("*") if path.is_file() and "data" not in path.parts}
    assert not make_examples.differences(now)
    now[name] = now[name].replace("num_generations: 8", "num_generations: 4")
    diff = make_examples.differences(now)
    assert any(line.startswith("-num_generations: 8") for line in diff) and any(name in line for line in diff)
