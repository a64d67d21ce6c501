"""A reward with fixed parameters and a name, in TRL's reward signature.

A small class rather than a closure because TRL's asynchronous rollout worker pickles reward
functions into a child process, and closures cannot be pickled. The dataset columns arrive as one
dict, so a column can never collide with a parameter name.
"""

from __future__ import annotations

from typing import Any, Callable


class NamedReward:
    def __init__(self, name: str, score: Callable[..., list[float]], **params: Any):
        self.__name__ = name  # TRL logs each reward under its function's __name__
        self.score = score
        self.params = params

    def __call__(self, completions: list, **columns: Any) -> list[float]:
        # None passes through: TRL reads it as "this reward does not apply to this example".
        scores = [None if s is None else float(s) for s in self.score(completions, columns, **self.params)]
        if len(scores) != len(completions):  # TRL would misalign rewards silently
            raise RuntimeError(f"{self.__name__} returned {len(scores)} scores for {len(completions)} completions")
        return scores

    def __repr__(self) -> str:
        return f"{self.__name__}({', '.join(f'{k}={v!r}' for k, v in self.params.items())})"
