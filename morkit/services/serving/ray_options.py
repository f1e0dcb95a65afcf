"""How `morkit serve --ray` places and scales its deployments on Ray Serve: `RayServeOptions`, the replicas of each
RM deployment (fixed, or Ray Serve's autoscaling between a minimum and a maximum), their resources and health check,
and the ingress's. Plain data: reading it imports no Ray (the CLI shows its defaults in --help).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from morkit.core.errors import InputError

SHUTDOWN_S = 20.0
"""Ray Serve's own default wait for a stopping replica's calls (`graceful_shutdown_timeout_s`)."""


@dataclass(frozen=True)
class RayServeOptions:
    """How the deployments are placed and scaled: each model RM a deployment of `rm_replicas` replicas, or Ray Serve's
    own autoscaling up to `max_rm_replicas`; a replica takes one call at a time, so one that hangs takes no other,
    and Serve's health check (every `health_check_s`) replaces it once a call has run past the request timeout.

    Args:
        rm_replicas: Replicas of each RM deployment; with autoscaling, the fewest.
        max_rm_replicas: The most replicas of each RM deployment; None (or `rm_replicas`): no autoscaling.
        target_ongoing: Calls in flight or waiting per replica that the autoscaler aims at
            (`target_ongoing_requests`).
        upscale_delay_s: Seconds the load must stay above the target before replicas are added.
        downscale_delay_s: Seconds the load must stay below the target before replicas are removed.
        autoscaling_extra: More fields of Ray Serve's AutoscalingConfig, as given (e.g. `look_back_period_s`).
        rm_gpus: GPUs per RM replica.
        rm_cpus: CPUs per RM replica.
        ingress_replicas: Replicas of the ingress (router, embedder, the app).
        ingress_cpus: CPUs per ingress replica.
        health_check_s: Seconds between Serve's health checks of an RM replica.
        host: Where Serve's HTTP proxy listens.
        port: The proxy's port.

    Raises:
        InputError: A count, delay or share is out of range (named by its `morkit serve` flag).
    """

    rm_replicas: int = 1
    max_rm_replicas: int | None = None
    target_ongoing: float = 2.0
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    autoscaling_extra: Mapping[str, Any] = field(default_factory=dict)
    rm_gpus: float = 0.0
    rm_cpus: float = 1.0
    ingress_replicas: int = 1
    ingress_cpus: float = 1.0
    health_check_s: float = 10.0
    host: str = "127.0.0.1"
    port: int = 8000

    def __post_init__(self) -> None:
        if self.rm_replicas < 1 or self.ingress_replicas < 1:
            raise InputError("--ray-workers: each deployment needs at least one replica")
        if self.max_rm_replicas is not None and self.max_rm_replicas < self.rm_replicas:
            raise InputError(f"--ray-max-replicas {self.max_rm_replicas} is below --ray-workers {self.rm_replicas}")
        if self.rm_gpus < 0 or self.rm_cpus < 0 or self.ingress_cpus < 0:
            raise InputError("--ray-gpus: GPUs and CPUs per replica must not be negative")
        if not self.target_ongoing > 0:
            raise InputError(f"--ray-target-ongoing must be above 0, got {self.target_ongoing!r}")
        for flag, value in (("--ray-upscale-delay", self.upscale_delay_s),
                            ("--ray-downscale-delay", self.downscale_delay_s)):
            if not value >= 0:
                raise InputError(f"{flag} must be 0 or more seconds, got {value!r}")
        if not self.health_check_s > 0:
            raise InputError(f"health_check_s must be above 0, got {self.health_check_s!r}")

    @property
    def autoscales(self) -> bool:
        """Whether each RM deployment autoscales (a maximum above the minimum)."""
        return self.max_rm_replicas is not None and self.max_rm_replicas > self.rm_replicas

    def replicas_text(self) -> str:
        """What each RM deployment runs, for the start-up line: "2 replicas" or "1-4 replicas, autoscaling"."""
        if self.autoscales:
            return f"{self.rm_replicas}-{self.max_rm_replicas} replicas, autoscaling at {self.target_ongoing:g} " \
                   "calls per replica"
        return f"{self.rm_replicas} replica{'s' * (self.rm_replicas != 1)}"

    def rm_deployment(self, stall_s: float) -> dict[str, Any]:
        """serve.deployment options of one RM: its replicas (or Serve's autoscaling), actor resources, one call per
        replica at a time, and the health check. A replica stopping waits for its call at most Serve's usual
        SHUTDOWN_S, or `stall_s` (the request timeout) where that is shorter: past it no caller waits for the call."""
        scale: dict[str, Any] = {"num_replicas": self.rm_replicas}
        if self.autoscales:
            scale = {"autoscaling_config": {
                "min_replicas": self.rm_replicas, "max_replicas": self.max_rm_replicas,
                "target_ongoing_requests": self.target_ongoing, "upscale_delay_s": self.upscale_delay_s,
                "downscale_delay_s": self.downscale_delay_s, **self.autoscaling_extra}}
        return {**scale, "ray_actor_options": {"num_gpus": self.rm_gpus, "num_cpus": self.rm_cpus},
                "max_ongoing_requests": 1, "health_check_period_s": self.health_check_s,
                "graceful_shutdown_timeout_s": min(stall_s, SHUTDOWN_S)}
