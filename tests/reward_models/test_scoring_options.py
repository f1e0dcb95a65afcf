"""ScoringOptions by concern: each field's home, the flat flags (from_flags/with_flags) that build it, and the
errors for a flag given where it does not apply, in Python and on the command line."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest

from morkit.core.errors import InputError
from morkit.reward_models.options import (
    FLAGS,
    MAX_REQUEST_PAIRS,
    RayOptions,
    ScoringOptions,
    ServerOptions,
    TransformersOptions,
    VLLMOptions,
)

URL = "http://127.0.0.1:9"

# flat flag -> (a value away from its default, where it lands: (sub-object or None, field))
HOMES = {
    "device": ("cpu", (None, "device")), "dtype": ("bf16", (None, "dtype")), "max_tokens": (512, (None, "max_tokens")),
    "truncation": ("left", (None, "truncation")), "reduction": ("last", (None, "reduction")),
    "prefix_reuse": (False, (None, "prefix_reuse")), "check_fit": (False, (None, "check_fit")),
    "chunk": (8, (None, "chunk")), "cache": ("c.sqlite", (None, "cache")), "progress": (True, (None, "progress")),
    "placement": ("vllm", (None, "placement")), "batch_size": (4, ("transformers", "batch_size")),
    "device_map": ("auto", ("transformers", "device_map")),
    "tensor_parallel_size": (2, ("vllm", "tensor_parallel_size")), "max_model_len": (256, ("vllm", "max_model_len")),
    "gpu_memory_utilization": (0.5, ("vllm", "gpu_memory_utilization")), "urls": ((URL,), ("servers", "urls")),
    "ray": ("auto", ("ray", "address")), "ray_workers": (2, ("ray", "workers")),
}
NEEDS = {"tensor_parallel_size": {"placement": "vllm"}, "max_model_len": {"placement": "vllm"},
         "gpu_memory_utilization": {"placement": "vllm"}, "ray_workers": {"ray": "auto"}}


def _at(options: ScoringOptions, home: tuple[str | None, str]):
    part, name = home
    return getattr(options if part is None else getattr(options, part), name)


def test_every_field_has_one_flat_flag_and_one_home():
    nested = {"transformers": TransformersOptions, "vllm": VLLMOptions, "servers": ServerOptions, "ray": RayOptions}
    homes = {(None, f.name) for f in fields(ScoringOptions) if f.name not in nested}
    homes |= {(part, f.name) for part, kind in nested.items() for f in fields(kind)}
    assert set(HOMES) == set(FLAGS)
    # every field is some flag's home; servers.batch_size is batch_size's second one
    assert {home for _, home in HOMES.values()} | {("servers", "batch_size")} == homes


@pytest.mark.parametrize("flag", FLAGS)
def test_each_flag_lands_in_its_home(flag):
    value, home = HOMES[flag]
    options = ScoringOptions.from_flags(**NEEDS.get(flag, {}), **{flag: value})
    assert _at(options, home) == value
    assert _at(ScoringOptions().with_flags(**NEEDS.get(flag, {}), **{flag: value}), home) == value


def test_batch_size_is_each_backends_own_unit():
    options = ScoringOptions.from_flags(batch_size=8, urls=[URL])
    assert (options.transformers.batch_size, options.servers.batch_size) == (8, 8)
    assert options.servers.urls == (URL,)  # a list or a single text becomes a tuple
    assert ScoringOptions.from_flags(urls=URL).servers.urls == (URL,)
    # without servers the forward pass may be larger than a server request may be
    assert ScoringOptions.from_flags(batch_size=32).transformers.batch_size == 32
    # the offline engine schedules its own batches, but servers beside it take the flag
    assert ScoringOptions.from_flags(placement="vllm", urls=[URL], batch_size=4).servers.batch_size == 4


def test_with_flags_changes_only_the_flags_given():
    base = ScoringOptions.from_flags(placement="vllm", tensor_parallel_size=2, ray="auto", ray_workers=3, chunk=8)
    changed = base.with_flags(max_model_len=512, ray="ray://head:10001")
    assert changed.vllm == VLLMOptions(tensor_parallel_size=2, max_model_len=512)
    assert changed.ray == RayOptions("ray://head:10001", 3) and changed.chunk == 8
    assert base.with_flags() is base
    # None for a flag whose field cannot be None is "not given" (argparse's default), never a choice
    assert base.with_flags(batch_size=None, tensor_parallel_size=None, placement=None) == base
    assert base.with_flags(ray_workers=None).ray == RayOptions("auto", None)
    assert base.with_flags(ray=None).ray is None
    assert ScoringOptions.from_flags(device="cpu", dtype="bf16") == ScoringOptions(device="cpu", dtype="bf16")


def test_the_python_api_takes_flat_flags_through_with_flags(monkeypatch):
    import morkit
    from morkit.services import scoring

    seen = []

    class Stop(Exception):
        pass

    def capture(options, **_):
        seen.append(options)
        raise Stop

    monkeypatch.setattr(scoring, "ScoringSession", capture)
    for call in (lambda: morkit.score([], ["math-consensus"], batch_size=32),
                 lambda: morkit.score([], ["math-consensus"], options=ScoringOptions(chunk=8), batch_size=32)):
        with pytest.raises(Stop):
            call()
    assert [o.transformers.batch_size for o in seen] == [32, 32] and seen[1].chunk == 8
    with pytest.raises(InputError, match="--tensor-parallel-size applies only"):
        morkit.score([], ["math-consensus"], tensor_parallel_size=2)


INAPPLICABLE = [
    ({"tensor_parallel_size": 2}, "--tensor-parallel-size applies only to the offline vLLM engine (--placement vllm)"),
    ({"max_model_len": 512}, "--max-model-len applies only to the offline vLLM engine (--placement vllm)"),
    ({"gpu_memory_utilization": 0.5}, "--gpu-memory-utilization applies only to the offline vLLM engine"),
    ({"tensor_parallel_size": 2, "urls": [URL]}, "--tensor-parallel-size applies only"),
    ({"placement": "vllm", "device_map": "auto"}, "--device-map applies only to the transformers placement"),
    ({"placement": "vllm", "batch_size": 16}, "--batch-size applies to the transformers placement and to vLLM servers"),
    ({"ray_workers": 2}, "ray_workers (--ray-workers) applies only with ray (--ray)"),
    ({"ray": "auto", "urls": [URL]}, "ray (--ray) and urls (--url, vLLM servers) are two ways to spread scoring"),
    ({"bogus": 1}, "unknown scoring option 'bogus'"),
]


@pytest.mark.parametrize("flags,message", INAPPLICABLE, ids=[" ".join(f) for f, _ in INAPPLICABLE])
def test_a_flag_that_does_not_apply_is_an_error_naming_it(flags, message):
    with pytest.raises(InputError, match=re.escape(message)):
        ScoringOptions.from_flags(**flags)
    with pytest.raises(InputError, match=re.escape(message)):
        ScoringOptions(chunk=8).with_flags(**flags)


def test_applicability_is_judged_on_the_resulting_backend():
    on_engine = ScoringOptions.from_flags(placement="vllm")
    assert on_engine.with_flags(tensor_parallel_size=4).vllm.tensor_parallel_size == 4
    assert ScoringOptions.from_flags(tensor_parallel_size=1).vllm.tensor_parallel_size == 1  # the default is no choice
    with pytest.raises(InputError, match="--batch-size"):
        on_engine.with_flags(batch_size=8)
    with pytest.raises(InputError, match="--max-model-len"):
        on_engine.with_flags(placement="transformers", max_model_len=512)
    with pytest.raises(InputError, match="--ray-workers"):
        ScoringOptions.from_flags(ray="auto", ray_workers=2).with_flags(ray=None, ray_workers=2)


def test_the_server_request_size_is_a_checked_limit_not_a_silent_cap():
    assert MAX_REQUEST_PAIRS == 16
    at_most = ScoringOptions.from_flags(urls=[URL], batch_size=MAX_REQUEST_PAIRS)
    assert at_most.servers.batch_size == MAX_REQUEST_PAIRS
    for make in (lambda: ScoringOptions.from_flags(urls=[URL], batch_size=MAX_REQUEST_PAIRS + 1),
                 lambda: ScoringOptions.from_flags(batch_size=32).with_flags(urls=[URL]),
                 lambda: ServerOptions(urls=(URL,), batch_size=17)):
        with pytest.raises(InputError, match=r"--batch-size \d+: vLLM servers \(--url\) take at most 16 pairs"):
            make()


def test_the_remote_rm_sends_the_server_batch_size(monkeypatch):
    from types import SimpleNamespace

    from morkit.reward_models.backends import servers
    from morkit.reward_models.catalog import resolve_rm

    spec = SimpleNamespace(pooling="classify", label=0, num_labels=1, step_token_id=None, finish=None)
    monkeypatch.setattr(servers, "engine_spec", lambda card, options: spec)
    monkeypatch.setattr(servers, "EngineRM", lambda spec, engine, truncation: engine)
    options = ScoringOptions.from_flags(urls=[f"smollm2-orm={URL}"], batch_size=3)
    assert options.servers.urls_for("smollm2-orm") == [URL] and options.servers.urls_for("other") == []
    handle = resolve_rm("smollm2-orm", options)
    assert handle.placement == "servers"  # the servers bound to an RM place it there
    remote = handle.load()
    assert (remote.batch_size, remote.urls) == (3, [URL])


def test_nested_sub_objects_check_their_own_values():
    for make in (lambda: TransformersOptions(batch_size=0), lambda: VLLMOptions(tensor_parallel_size=0),
                 lambda: VLLMOptions(gpu_memory_utilization=1.5), lambda: ServerOptions(urls=("ftp://h",)),
                 lambda: RayOptions("not an address"), lambda: RayOptions(workers=0),
                 lambda: ScoringOptions(ray="auto"), lambda: ScoringOptions(vllm={"max_model_len": 8})):
        with pytest.raises(InputError):
            make()


@pytest.mark.parametrize("scoring,error", [("batch_size = 8\ndevice_map = \"auto\"", None),
                                           ("max_model_len = 512", "--max-model-len applies only"),
                                           ("placement = \"vllm\"\nmax_model_len = 512", None),
                                           ("nested = 1", "unknown keys")])
def test_the_pipeline_config_keeps_flat_keys(tmp_path, scoring, error):
    from morkit.services.pipeline.config import load_pipeline_config

    path = tmp_path / "p.toml"
    path.write_text(f'rms = ["math-consensus"]\n[scoring]\n{scoring}\n[[benchmark]]\nname = "g"\ndata = "gsm8k_test"\n')
    if error:
        with pytest.raises(InputError, match=error):
            load_pipeline_config(path)
        return
    options = load_pipeline_config(path).scoring
    if "batch_size" in scoring:
        assert (options.transformers.batch_size, options.transformers.device_map) == (8, "auto")
    else:
        assert (options.placement, options.vllm.max_model_len) == ("vllm", 512)


CLI = [
    (["--tensor-parallel-size", "2"], "--tensor-parallel-size applies only to the offline vLLM engine"),
    (["--max-model-len", "512"], "--max-model-len applies only"),
    (["--gpu-memory-utilization", "0.5"], "--gpu-memory-utilization applies only"),
    (["--placement", "vllm", "--device-map", "auto"], "--device-map applies only"),
    (["--placement", "vllm", "--batch-size", "8"], "--batch-size applies to the transformers placement"),
    (["--url", URL, "--batch-size", "32"], "--batch-size 32: vLLM servers (--url) take at most 16"),
    (["--ray-workers", "2"], "ray_workers (--ray-workers) applies only with ray (--ray)"),
    (["--ray", "auto", "--url", URL], "are two ways to spread scoring"),
]


@pytest.mark.parametrize("flags,message", CLI, ids=[" ".join(f[::2]) for f, _ in CLI])
def test_the_cli_refuses_a_flag_that_does_not_apply_in_one_line(flags, message, tmp_path, capsys):
    from morkit.cli.main import main

    code = main(["score", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"), "--no-cache", *flags])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("morkit: error: ") and message in err, err


def test_cli_defaults_are_not_mistaken_for_choices():
    from morkit.cli.args import scoring_options
    from morkit.cli.main import build_parser

    def parsed(*flags: str) -> ScoringOptions:
        return scoring_options(build_parser().parse_args(["score", "in.jsonl", "-o", "o", "--no-cache", *flags]))

    assert parsed("--placement", "vllm").transformers.batch_size == 16  # no --batch-size given: no error
    assert parsed("--tensor-parallel-size", "1").vllm.tensor_parallel_size == 1
    assert parsed("--batch-size", "32").transformers.batch_size == 32
    options = parsed("--url", URL, "--batch-size", "4")
    assert (options.servers.batch_size, options.transformers.batch_size) == (4, 4)


@pytest.mark.parametrize("flag", [{"dtype": "bf16"}, {"device_map": "auto"}, {"max_model_len": 512, "placement": "vllm"},
                                  {"tensor_parallel_size": 2, "placement": "vllm"}])
def test_a_model_flag_with_an_unbound_server_url_is_an_error(flag):
    # an unbound URL sends every model RM to the servers, so nothing loads here for the flag to change
    with pytest.raises(InputError, match=f"--{next(iter(flag)).replace('_', '-')} does not apply with an unbound --url"):
        ScoringOptions.from_flags(urls=[URL], **flag)
    bound = ScoringOptions.from_flags(urls=[f"smollm2-orm={URL}"], **flag)  # bound: the other RMs still load here
    assert bound.servers.urls_for("minilm-probe") == []
