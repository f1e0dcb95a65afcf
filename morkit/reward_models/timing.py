"""How long an RM takes per scored pair, as scoring runs measure it: a small JSON ledger in morkit's cache folder
(`ledger_path()`), one running mean per RM, placement and device, read by `morkit rms NAME` and by cost tables in
seconds. Only pairs an RM computed count (cache hits cost nothing), and writing it never fails a run.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger(__name__)

LEDGER_NAME = "rm_seconds.json"
"""The ledger's file name in morkit's cache folder (beside the default score cache)."""
LEDGER_FORMAT = 1


def ledger_path() -> Path:
    """The ledger: rm_seconds.json in morkit's cache folder ($MORKIT_CACHE_DIR, else $XDG_CACHE_HOME/morkit, else
    ~/.cache/morkit), read from the environment now."""
    from morkit.core.settings import cache_dir

    return cache_dir() / LEDGER_NAME


def cpu_clock() -> float:
    """CPU seconds of this process and of its finished children (a rule's sandboxed subprocesses count), to the
    microsecond where the OS says (os.times counts in clock ticks)."""
    try:
        import resource
    except ImportError:  # not POSIX
        t = os.times()
        return time.process_time() + t.children_user + t.children_system
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def device_label(device: str) -> str:
    """A device as the ledger names it: "cpu", or a GPU with its model ("cuda:0 (NVIDIA H200)") where torch is
    already loaded and can say."""
    if not device.startswith("cuda") or "torch" not in sys.modules:
        return device
    try:
        import torch

        index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
        return f"{device} ({torch.cuda.get_device_name(index)})"
    except Exception:  # noqa: BLE001 - a label only: the plain device string will do
        return device


@dataclass(frozen=True)
class Measurement:
    """One RM's measured time per scored pair on one placement and device: running means over `pairs` pairs.

    Args:
        name: The RM's registered name.
        placement: Where it ran (`python` for rules; transformers, vllm, servers, ray for models).
        device: The device in this process ("cpu", "cuda:0 (NVIDIA H200)"); "" where it ran elsewhere.
        seconds_per_pair: Wall seconds per computed pair.
        cpu_seconds_per_pair: CPU seconds of this process and its children per computed pair.
        pairs: The computed pairs the means are over.
        updated: When it was last measured (UTC, ISO 8601).
    """

    name: str
    placement: str
    device: str
    seconds_per_pair: float
    cpu_seconds_per_pair: float
    pairs: int
    updated: str

    def on(self, placement: str, device: str | None = None) -> bool:
        """Whether it was measured on `placement` and, where given, on `device` ("cuda" matches "cuda (NVIDIA ...)",
        "cuda:0" matches "cuda:0 (...)")."""
        if self.placement != placement:
            return False
        return device is None or self.device == device or self.device.split(" (", 1)[0] == device

    def describe(self) -> str:
        """One line for `morkit rms NAME`: "transformers on cpu: 12 ms/pair (CPU 40 ms) over 48 pairs, 2026-11-29"."""
        where = f"{self.placement} on {self.device}" if self.device else self.placement
        return (f"{where}: {seconds_text(self.seconds_per_pair)}/pair (CPU {seconds_text(self.cpu_seconds_per_pair)}) "
                f"over {self.pairs:,} pairs, {self.updated[:10]}")

    def to_json(self) -> dict[str, Any]:
        """Its fields as JSON (`morkit rms --json`)."""
        return asdict(self)


def short_number(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits without an exponent: "0.029", "16.1", "137", "2,054"."""
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def seconds_text(seconds: float) -> str:
    """A duration the way `morkit rms` shows it: "850 us", "12.3 ms", "1.3 s"."""
    if seconds < 1e-3:
        return f"{short_number(seconds * 1e6)} us"
    if seconds < 1:
        return f"{short_number(seconds * 1e3)} ms"
    return f"{short_number(seconds)} s"


class Meter:
    """Wall and CPU seconds spent computing pairs in one run of one RM (a scoring run's RMRun keeps one)."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self.pairs = 0

    def add(self, wall: float, cpu: float, pairs: int) -> None:
        self.wall += wall
        self.cpu += cpu
        self.pairs += pairs

    @contextmanager
    def timing(self, pairs: int) -> Iterator[None]:
        """Time the block as computing `pairs` pairs (not counted if it raises)."""
        wall, cpu = time.perf_counter(), cpu_clock()
        yield
        self.add(time.perf_counter() - wall, cpu_clock() - cpu, pairs)

    def timed(self, batches: Iterator[tuple[list, list]], skip_first: bool = False) -> Iterator[tuple[list, list]]:
        """The (pairs, scores) batches of `batches`, each timed from asking for it to having it; `skip_first`
        leaves the first out (a cluster's first batch waits for its replicas to load). Closing this closes
        `batches` at once."""
        try:
            while True:
                wall, cpu = time.perf_counter(), cpu_clock()
                try:
                    part, raw = next(batches)
                except StopIteration:
                    return
                if skip_first:
                    skip_first = False
                else:
                    self.add(time.perf_counter() - wall, cpu_clock() - cpu, len(part))
                yield part, raw
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()


def read_ledger(path: Path | None = None) -> list[Measurement]:
    """Every measurement in the ledger (none where it is absent; an unreadable or malformed one warns).

    Args:
        path: The ledger; None: `ledger_path()`.

    Returns:
        The measurements, by RM name then placement and device.
    """
    path = ledger_path() if path is None else Path(path)
    out = []
    for name, rows in sorted(_load(path).items()):
        for row in rows.values():
            try:
                out.append(Measurement(name=name, **row))
            except TypeError:
                log.warning("%s: skipped a malformed measurement of %s", path, name)
    return out


def measured(name: str, path: Path | None = None) -> list[Measurement]:
    """RM `name`'s measured seconds per pair, one per placement and device where a scoring run measured it.

    Args:
        name: The RM's registered name.
        path: The ledger; None: `ledger_path()`.

    Returns:
        Its measurements, latest first.
    """
    return sorted((m for m in read_ledger(path) if m.name == name), key=lambda m: m.updated, reverse=True)


def record(name: str, placement: str, device: str, meter: Meter, path: Path | None = None) -> None:
    """Add a run's timing of RM `name` to the ledger's running means; nothing when it computed no pair. Never raises:
    an unwritable ledger logs a warning. Two processes may record at once: the update is made under a lock file
    where the OS has one, and the file is replaced whole (a temporary file renamed over it).

    Args:
        name: The RM's registered name.
        placement: Where it ran.
        device: The device label (`device_label`); "" where it ran elsewhere.
        meter: What the run measured.
        path: The ledger; None: `ledger_path()`.
    """
    if meter.pairs <= 0:
        return
    try:
        path = ledger_path() if path is None else Path(path)
        with _locked(path):
            data = _load(path)
            key = f"{placement}@{device}"
            row = data.setdefault(name, {}).get(key, {})
            pairs = int(row.get("pairs", 0))
            total = pairs + meter.pairs
            data[name][key] = {
                "placement": placement, "device": device,
                "seconds_per_pair": (float(row.get("seconds_per_pair", 0.0)) * pairs + meter.wall) / total,
                "cpu_seconds_per_pair": (float(row.get("cpu_seconds_per_pair", 0.0)) * pairs + meter.cpu) / total,
                "pairs": total, "updated": datetime.now(timezone.utc).isoformat(timespec="seconds")}
            _write(path, {"format": LEDGER_FORMAT, "measurements": data})
    except Exception as exc:  # noqa: BLE001 - a measurement must never fail the scoring run that made it
        log.warning("could not record %s's seconds per pair in %s: %s", name, path, exc)


def _load(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.warning("%s: cannot read the RM timing ledger: %s", path, exc.strerror or exc)
        return {}
    try:
        data = json.loads(text)["measurements"]
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise ValueError("not a table of RMs")
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("%s: not an RM timing ledger (%s); it is started afresh on the next record", path, exc)
        return {}
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    """Write `data` to `path` whole: a temporary file beside it, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1, sort_keys=True)
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`'s lock file where the OS has one (POSIX), so updates do not interleave."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks: the renamed file is never torn, an update may be lost
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
