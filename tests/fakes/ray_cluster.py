"""What the Ray tests check of the local cluster after a run: that a run's actors are gone and every CPU is free."""

from __future__ import annotations

import time


def alive(ray, names) -> list[str]:
    """Which of the named actors are still alive (a dead or never-started one is not found by name)."""
    found = []
    for name in names:
        try:
            ray.get_actor(name)
        except ValueError:
            continue
        found.append(name)
    return found


def seconds_until_free(ray, names, wait_s: float = 10.0) -> float:
    """Seconds until none of `names` is alive and the cluster's CPUs are all free; AssertionError after `wait_s`."""
    started = time.perf_counter()
    while True:
        left, total, free = alive(ray, names), ray.cluster_resources(), ray.available_resources()
        if not left and free.get("CPU", 0.0) >= total.get("CPU", 0.0):
            return time.perf_counter() - started
        if time.perf_counter() - started > wait_s:
            raise AssertionError(f"after {wait_s:g}s actors {left} still alive, CPUs free "
                                 f"{free.get('CPU', 0.0):g} of {total.get('CPU', 0.0):g}")
        time.sleep(0.05)
