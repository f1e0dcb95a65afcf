"""A stand-in RM replica for Ray runs that fail, and what the Ray tests and bench/ray_scoring.py check of the local
cluster after a run: that its actors are gone and every CPU is free. Ship it to the actors by value
(`ray.cloudpickle.register_pickle_by_value`): the workers cannot import `fakes`."""

from __future__ import annotations

import os
import time


class FailingReplica:
    """A model-free replica (score = answer length) that fails on its second batch, in the first replica to get
    there (`marker` is made): `how` "kill" kills its own actor for good (ray.kill without restart), "input" raises
    a morkit error; with `how=None` it never fails."""

    def __init__(self, marker: str, how: str | None):
        self.marker, self.how, self.batches = marker, how, 0

    def score(self, pairs):
        from morkit.core.errors import InputError
        from morkit.core.types import Score

        self.batches += 1
        if self.how and self.batches == 2 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            if self.how == "kill":
                import ray

                ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
                time.sleep(60)
            raise InputError("query 'q1': no tests\nsecond line")
        return [Score(float(len(answer))) for _, answer in pairs]


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


def seconds_until_free(ray, names, wait_s: float = 10.0) -> float | None:
    """Seconds until none of `names` is alive and the cluster's CPUs are all free; None if not within `wait_s`."""
    started = time.perf_counter()
    while time.perf_counter() - started <= wait_s:
        if not alive(ray, names) and ray.available_resources().get("CPU", 0.0) >= ray.cluster_resources()["CPU"]:
            return time.perf_counter() - started
        time.sleep(0.02)
    return None
