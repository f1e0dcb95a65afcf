"""Errors that carry what a user needs to fix their input, and the exit code the CLI uses."""

from __future__ import annotations


class MorkitError(Exception):
    """Base class; `exit_code` is what the CLI exits with (2 = bad input, 1 = runtime failure)."""

    exit_code = 1


class InputError(MorkitError):
    """Bad user input: names the file and line (or query id) so it can be fixed."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class UnknownRewardModel(InputError):
    """An RM name that is not registered; lists the known ones."""

    def __init__(self, name: str, known: list[str]):
        super().__init__(f"unknown reward model {name!r}; known: {', '.join(sorted(known))}")
        self.name = name


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


class UnavailableError(MorkitError):
    """An RM whose weights or packages are not present here."""
