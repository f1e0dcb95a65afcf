"""One error tree for all of morkit, rooted at MorkitError; `exit_code` is what the CLI exits with (InputError 2,
every other 1). Every expected failure is one of these, with a one-line message a user can act on; the tree is
drawn on the docs page Scoring and backends.
"""

from __future__ import annotations

from typing import Iterable


class MorkitError(Exception):
    """Base of every error morkit raises on purpose; `exit_code` is what the CLI exits with."""

    exit_code = 1


class InputError(MorkitError, ValueError):
    """Bad user input: names the file and line, flag, option or query id, so it can be fixed.

    Args:
        message: What is wrong, in one line.
        path: The file the input came from; the message is then prefixed with `path: ` (kept as `.path`).
        line: The 1-based line in `path`; with a path, the prefix becomes `path:line: ` (kept as `.line`).
    """

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class UnknownName(InputError):
    """A name that no registry holds (a reward model, a method, a loop, a data set); lists the known names."""

    def __init__(self, what: str, name: str, known: Iterable[str]):
        super().__init__(f"unknown {what} {name!r}; known: {', '.join(sorted(known)) or 'none'}")
        self.what = what
        self.name = name


class UnknownRewardModel(UnknownName):
    """An RM name that is neither registered nor cached in the input."""

    def __init__(self, name: str, known: Iterable[str]):
        super().__init__("reward model", name, known)


class UnavailableError(MorkitError):
    """A model whose weights, packages or files are not present on this machine."""


class ScoreError(MorkitError):
    """A model produced something unusable (e.g. a non-finite score) for a named query."""


class PartialScoreError(ScoreError):
    """A batch in which some pairs were scored and some were not.

    `scores` is aligned with the batch's pairs (None where a pair failed), so the scoring run can
    keep (cache) what succeeded before re-raising.
    """

    def __init__(self, message: str, scores: list):
        super().__init__(message)
        self.scores = scores


class LLMError(MorkitError):
    """A generation that failed after its retries (timeout, HTTP error, malformed reply)."""
