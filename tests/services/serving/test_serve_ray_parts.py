"""The parts of `morkit serve --ray` that need no Ray cluster: the deployments' options (Ray Serve's own autoscaling
config), the flags, a replica's health check, how the ingress sends an RM's pairs and gives up at the deadline, and
the metrics that show replicas and timeouts. tests/services/serving/test_serve_ray.py runs them on a local Ray."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from fakes import scripted_rm

from morkit.core import budget
from morkit.core.errors import InputError, ScoreError
from morkit.reward_models.options import ScoringOptions
from morkit.services.serving.metrics import ServerMetrics
from morkit.services.serving.ray_options import RayServeOptions


@pytest.fixture
def scripted():
    scripted_rm.register(cost_s=0.0, hang_s=0.6)
    try:
        from morkit.reward_models.catalog import REWARD_MODELS

        yield REWARD_MODELS.get(scripted_rm.NAME)
    finally:
        scripted_rm.unregister()


def test_rm_deployments_are_fixed_or_scaled_by_ray_serves_autoscaling_config():
    fixed = RayServeOptions(rm_replicas=2, rm_cpus=0.5).rm_deployment(30.0)
    assert fixed == {"num_replicas": 2, "ray_actor_options": {"num_gpus": 0.0, "num_cpus": 0.5},
                     "max_ongoing_requests": 1, "health_check_period_s": 10.0, "graceful_shutdown_timeout_s": 20.0}
    assert RayServeOptions().rm_deployment(5.0)["graceful_shutdown_timeout_s"] == 5.0
    assert RayServeOptions(rm_replicas=3, max_rm_replicas=3).rm_deployment(30.0)["num_replicas"] == 3
    scaled = RayServeOptions(max_rm_replicas=4, target_ongoing=1.5, upscale_delay_s=5,
                             autoscaling_extra={"look_back_period_s": 40.0}).rm_deployment(30.0)
    assert "num_replicas" not in scaled
    assert scaled["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 1.5,
                                            "upscale_delay_s": 5, "downscale_delay_s": 600.0,
                                            "look_back_period_s": 40.0}
    assert RayServeOptions(max_rm_replicas=4).replicas_text() == "1-4 replicas, autoscaling at 2 calls per replica"
    assert RayServeOptions(rm_replicas=2).replicas_text() == "2 replicas"

    serve = pytest.importorskip("ray.serve")  # Ray Serve takes them as they are
    from morkit.services.serving.ray_serve import RMReplica

    for options in (fixed, scaled):
        config = serve.deployment(RMReplica, name="rm-x", **options)._deployment_config
        assert (config.max_ongoing_requests, config.health_check_period_s) == (1, 10.0)
    config = serve.deployment(RMReplica, name="rm-x", **scaled)._deployment_config.autoscaling_config
    assert (config.min_replicas, config.max_replicas, config.target_ongoing_requests) == (1, 4, 1.5)
    assert (config.upscale_delay_s, config.look_back_period_s) == (5, 40.0)


@pytest.mark.parametrize("options, flag", [
    ({"rm_replicas": 0}, "--ray-workers"),
    ({"rm_replicas": 3, "max_rm_replicas": 2}, "--ray-max-replicas 2 is below --ray-workers 3"),
    ({"rm_gpus": -1}, "--ray-gpus"),
    ({"target_ongoing": 0}, "--ray-target-ongoing"),
    ({"upscale_delay_s": -1}, "--ray-upscale-delay"),
    ({"downscale_delay_s": float("nan")}, "--ray-downscale-delay"),
    ({"health_check_s": 0}, "health_check_s"),
])
def test_bad_ray_serve_options_are_one_line_naming_their_flag(options, flag):
    with pytest.raises(InputError, match=flag):
        RayServeOptions(**options)


def test_the_autoscaling_flags_need_a_maximum_and_show_their_defaults(capsys, tmp_path):
    from morkit.cli import main

    for flags in (["--ray", "--ray-target-ongoing", "3"], ["--ray-upscale-delay", "1"]):
        assert main(["serve", "--pool", str(tmp_path), *flags]) == 2
        assert "applies only with --ray-max-replicas" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for text in ("--ray-target-ongoing R with --ray-max-replicas", "(default 2;", "(default 30)", "(default 600:"):
        assert text in shown


def test_a_replica_fails_serves_health_check_while_a_call_runs_past_the_timeout(scripted):
    from morkit.services.serving.ray_serve import RMReplica

    replica = RMReplica(scripted, ScoringOptions(device="cpu", cache=None), stall_s=0.2)
    asyncio.run(replica.check_health())  # nothing running
    assert [s.value for s in replica.score([("q", "four")])] == [0.4]
    call = threading.Thread(target=replica.score, args=([("q", "HANG")],))
    call.start()
    time.sleep(0.05)
    asyncio.run(replica.check_health())  # running, but not past the timeout yet
    time.sleep(0.3)
    with pytest.raises(ScoreError, match=r"'scripted-rm': a scoring call has run 0 s, past the request timeout of "
                                         r"0.2 s \(--timeout\); this replica is stalled"):
        asyncio.run(replica.check_health())
    call.join()
    asyncio.run(replica.check_health())  # the call ended: healthy again


class Deployment:
    """A DeploymentHandle stand-in (control flow only): records every call sent, waited for and cancelled; a part
    with an answer that says HANG is never answered (its wait ends in TimeoutError at its timeout)."""

    def __init__(self):
        self.events: list[str] = []
        deployment = self

        class Response:
            def __init__(self, part):
                self.part = part

            def result(self, timeout_s):
                deployment.events.append(f"wait {self.part[0][1]}")
                if any("HANG" in a for _, a in self.part):
                    time.sleep(min(timeout_s, 0.05))
                    raise TimeoutError
                return [len(a) for _, a in self.part]

            def cancel(self):
                deployment.events.append(f"cancel {self.part[0][1]}")

        class Method:
            @staticmethod
            def remote(part):
                deployment.events.append(f"send {part[0][1]}")
                return Response(part)

        self.score = Method


def test_an_rms_parts_go_out_at_once_and_past_the_deadline_the_rest_are_cancelled(scripted):
    from morkit.core.budget import DeadlinePassed
    from morkit.services.serving.ray_serve import ServeRMHandle

    timed_out = []
    deployment = Deployment()
    handle = ServeRMHandle(scripted, ScoringOptions(device="cpu", cache=None), deployment, timeout_s=5.0,
                           on_timeout=timed_out.append)
    pairs = [("q", "a"), ("q", "bb"), ("q", "ccc"), ("q", "dddd"), ("q", "eeeee")]
    assert list(handle.score_batches(pairs, 2)) == [([("q", "a"), ("q", "bb")], [1, 2]),
                                                    ([("q", "ccc"), ("q", "dddd")], [3, 4]), ([("q", "eeeee")], [5])]
    assert deployment.events == ["send a", "send ccc", "send eeeee", "wait a", "wait ccc", "wait eeeee"]

    deployment.events.clear()
    hung = [("q", "a"), ("q", "HANG"), ("q", "ccc"), ("q", "dddd")]
    with budget.work_bounded(time.monotonic() + 0.02), pytest.raises(DeadlinePassed, match=(
            "'scripted-rm': its Ray Serve deployment did not answer by the request's deadline")):
        list(handle.score_batches(hung, 1))
    assert deployment.events == ["send a", "send HANG", "send ccc", "send dddd", "wait a", "wait HANG",
                                 "cancel HANG", "cancel ccc", "cancel dddd"]
    assert timed_out == ["scripted-rm"]
    with pytest.raises(ScoreError, match="did not answer within 5 s"):  # no deadline: the handle's own timeout
        handle.score([("q", "HANG")])
    assert timed_out == ["scripted-rm"] * 2


def test_a_failing_ray_serve_rm_is_a_one_line_score_error():
    """A replica's error reaches the client as one line naming the RM, not Ray's multi-line traceback."""
    from morkit.services.serving.ray_serve import ServeRMHandle

    class Traceback(Exception):
        cause = RuntimeError("CUDA out of memory\n  File replica.py, line 3\n  ...")

    class Deployment:
        class score:  # noqa: N801 - the DeploymentHandle's method
            @staticmethod
            def remote(pairs):
                class Response:
                    def result(self, timeout_s):
                        raise Traceback("RayTaskError(RuntimeError): ray::ServeReplica\n  Traceback ...")
                return Response()

    handle = object.__new__(ServeRMHandle)
    handle.name, handle.deployment, handle.timeout_s = "skywork", Deployment, 5.0
    with pytest.raises(ScoreError) as raised:
        handle.score([("q", "a")])
    assert str(raised.value) == ("reward model 'skywork': its Ray Serve deployment failed: RuntimeError: CUDA out of "
                                 "memory")


def test_metrics_show_each_rms_replicas_and_its_timeouts():
    metrics = ServerMetrics(None, lambda: 0)
    replicas = {"b": {"RUNNING": 1}, "a": {"RUNNING": 2, "STARTING": 1}}
    metrics.watch_replicas(lambda: replicas)
    metrics.rm_timeouts.labels("a").inc()
    text = metrics.render()[0].decode()
    for line in ('morkit_rm_replicas{rm="a",state="RUNNING"} 2.0', 'morkit_rm_replicas{rm="a",state="STARTING"} 1.0',
                 'morkit_rm_replicas{rm="b",state="RUNNING"} 1.0', 'morkit_rm_timeouts_total{rm="a"} 1.0'):
        assert line in text.splitlines()

    def unreachable():
        raise ConnectionError("the Serve controller is gone")

    broken = ServerMetrics(None, lambda: 0)
    broken.watch_replicas(unreachable)
    text = broken.render()[0].decode()  # the scrape still answers, the gauge without samples
    assert "# TYPE morkit_rm_replicas gauge" in text and "morkit_rm_replicas{" not in text
    assert "morkit_requests_total" in text
