"""What crosses between the sandbox's two processes (harness.py's tester and harness_solution.py's solution
process): values as JSON data (`encode`/`decode`), and the rlimits both set on themselves.

Values cross as data: None, bool, int, float, str, bytes, bytearray, list, tuple, dict, set, frozenset, complex,
Fraction, Decimal. Any other object stays in the solution process; `encode` hands it to `ref` (the solution
side keeps it and sends a {"$": "ref"} node), and `decode` hands such a node to `deref` (the tester makes a
`Remote` handle of it).

Stdlib only, and no import of this package: sandbox.py ships it into the sandbox as the module `harness_wire`.
"""

from __future__ import annotations

import math
import resource
import sys

# decimal and fractions are imported only when needed: start-up time is most of a run's cost.

MAX_MESSAGE = 16 * 1024 * 1024  # one JSON line between the processes
MAX_DEPTH = 256  # nesting of data that crosses
MUTABLE = (list, dict, set, bytearray)  # arguments whose state after a call is copied back to the tester


# ------------------------------------------------------------------ data that crosses
def encode(value, ref, depth=0):
    """`value` as JSON: plain data as itself or a tagged object; anything else as `ref(value)`. A subclass of
    a data type crosses as its base type (a Counter as a dict, a namedtuple as a tuple, an IntEnum as an int)."""
    if value is None or value is True or value is False:
        return value
    kind = type(value)
    if kind is int or kind is str:
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$": "float", "v": repr(value)}
    if depth >= MAX_DEPTH:
        raise ValueError(f"data nested over {MAX_DEPTH} levels")
    deeper = depth + 1
    if kind is list:
        return [encode(v, ref, deeper) for v in value]
    if kind is tuple or kind is set or kind is frozenset:
        return {"$": kind.__name__, "v": [encode(v, ref, deeper) for v in value]}
    if kind is dict:
        return {"$": "dict", "v": [[encode(k, ref, deeper), encode(v, ref, deeper)] for k, v in value.items()]}
    if kind is bytes or kind is bytearray:
        return {"$": kind.__name__, "v": value.hex()}
    if kind is complex:
        return {"$": "complex", "v": [repr(value.real), repr(value.imag)]}
    if kind.__name__ == "Fraction" and kind is getattr(sys.modules.get("fractions"), "Fraction", None):
        return {"$": "fraction", "v": [value.numerator, value.denominator]}
    if kind.__name__ == "Decimal" and kind is getattr(sys.modules.get("decimal"), "Decimal", None):
        return {"$": "decimal", "v": str(value)}
    for base in (int, float, str, bytes, tuple, list, dict, set, frozenset):
        if isinstance(value, base):
            return encode(base(value), ref, depth)
    return ref(value)


def decode(node, deref, depth=0):
    """The data a JSON value stands for; a {"$": "ref"} node through `deref`. Anything else is refused."""
    kind = type(node)
    if node is None or kind is bool or kind is int or kind is float or kind is str:
        return node
    if depth >= MAX_DEPTH:
        raise ValueError(f"data nested over {MAX_DEPTH} levels")
    deeper = depth + 1
    if kind is list:
        return [decode(v, deref, deeper) for v in node]
    if kind is not dict:
        raise ValueError(f"not data: {kind.__name__}")
    tag, value = node.get("$"), node.get("v")
    if tag == "ref":
        return deref(node)
    if tag in ("tuple", "set", "frozenset") and type(value) is list:
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](decode(v, deref, deeper) for v in value)
    if tag == "dict" and type(value) is list and all(type(p) is list and len(p) == 2 for p in value):
        return {decode(k, deref, deeper): decode(v, deref, deeper) for k, v in value}
    if tag in ("bytes", "bytearray") and type(value) is str:
        return (bytes if tag == "bytes" else bytearray).fromhex(value)
    if tag == "float" and value in ("nan", "inf", "-inf"):
        return float(value)
    if tag == "complex" and type(value) is list and len(value) == 2 and all(type(v) is str for v in value):
        return complex(float(value[0]), float(value[1]))
    if tag == "fraction" and type(value) is list and len(value) == 2 and all(type(v) is int for v in value):
        import fractions

        return fractions.Fraction(value[0], value[1])
    if tag == "decimal" and type(value) is str:
        import decimal

        return decimal.Decimal(value)
    raise ValueError(f"not data: {str(tag)[:40]}")


def set_limits(limits: dict) -> None:
    """The payload's rlimits on this process (each process of the sandbox sets its own)."""
    for name, value in (("RLIMIT_NPROC", limits["nproc"]), ("RLIMIT_AS", limits["as"]), ("RLIMIT_CPU", limits["cpu"]),
                        ("RLIMIT_FSIZE", limits["fsize"]), ("RLIMIT_NOFILE", limits["nofile"]), ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))

