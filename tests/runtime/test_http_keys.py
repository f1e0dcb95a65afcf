"""API keys and headers of morkit's HTTP clients: one no header can carry is refused up front, naming where it came
from, and no message (refusal or request failure) ever shows it."""

from __future__ import annotations

import asyncio

import pytest

from morkit.core.errors import InputError
from morkit.runtime.http import Retryable, checked_api_key, checked_headers, httpx_module, post_json, redacted

BAD_KEYS = ["sk-SECRET\n", "\tsk-SECRET", "sk-SEC RET", "sk-SECRET\x00", "sk-SECRÉT", "sk-SECRET\u200b"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_a_key_no_header_can_carry_is_refused_by_name_never_shown(key):
    with pytest.raises(InputError, match=r"^the API key from \$SOME_KEY has .* \(the key is not shown\)") as info:
        checked_api_key(key, "$SOME_KEY")
    assert "SEC" not in str(info.value)


def test_what_the_refusal_says_is_wrong():
    def why(key: str) -> str:
        with pytest.raises(InputError) as info:
            checked_api_key(key, "api_key=")
        return str(info.value)

    assert "whitespace (a newline or a space) at its end" in why("sk-SECRET\n")
    assert "a control character inside it" in why("sk-\x01SECRET")
    assert "a non-ASCII character inside it" in why("sk-SECRÉT")
    assert checked_api_key("sk-fine_0123.-~+/=", "api_key=") == "sk-fine_0123.-~+/="
    assert checked_api_key(None, "api_key=") is None and checked_api_key("", "api_key=") == ""


def test_header_values_may_hold_spaces_inside_but_nothing_a_header_cannot_carry():
    assert checked_headers({"Authorization": "Bearer sk-ok"}, "headers=") == {"Authorization": "Bearer sk-ok"}
    for value in ("Bearer sk-SECRET\n", "Bearer sk-SECRÉT", " Bearer sk-SECRET", "Bearer\tsk-SECRET"):
        with pytest.raises(InputError, match=r"^header 'Authorization' of headers= has ") as info:
            checked_headers({"Authorization": value}, "headers=")
        assert "SECRET" not in str(info.value) and "SECRÉT" not in str(info.value)


def test_the_remote_rm_client_checks_its_headers():
    from morkit.reward_models.backends.servers import RemoteRewardModel

    ok = RemoteRewardModel("rm", ["http://127.0.0.1:9"], "m", headers={"Authorization": "Bearer sk-ok"})
    assert ok.headers == {"Authorization": "Bearer sk-ok"}
    with pytest.raises(InputError, match=r"^header 'Authorization' of remote reward model 'rm' has ") as info:
        RemoteRewardModel("rm", ["http://127.0.0.1:9"], "m", headers={"Authorization": "Bearer sk-SECRET\n"})
    assert "SECRET" not in str(info.value)


@pytest.mark.parametrize("key", BAD_KEYS[:1] + BAD_KEYS[-2:])
def test_the_trl_client_checks_its_key_from_either_source(monkeypatch, key):
    from morkit.integrations.trl import RoutedReward

    with pytest.raises(InputError, match=r"^the API key from api_key= has ") as given:
        RoutedReward(url="http://127.0.0.1:9", api_key=key)
    monkeypatch.setenv("MORKIT_API_KEY", key)
    with pytest.raises(InputError, match=r"MORKIT_API_KEY") as from_env:
        RoutedReward(url="http://127.0.0.1:9")
    assert "SEC" not in str(given.value) + str(from_env.value)
    assert RoutedReward(pool="unused", api_key="sk-ok")._api_key == "sk-ok"  # a usable key passes


def test_a_failure_that_quotes_a_secret_header_does_not_show_it():
    httpx = httpx_module()

    class Refusing:
        async def post(self, url, json, headers, timeout):  # as h11 words a header it cannot send
            raise httpx.LocalProtocolError(f"Illegal header value {headers['Authorization'].encode()!r}")

    headers = {"Authorization": "Bearer sk-SECRÉT\n", "X-Trace": "trace-1234"}
    with pytest.raises(Retryable) as info:
        asyncio.run(post_json(Refusing(), "http://127.0.0.1:9/pooling", {}, headers, 1.0))
    assert str(info.value) == "connection error: LocalProtocolError: Illegal header value b'***'"


def test_redacted_hides_each_form_a_message_quotes():
    key = "sk-SECRÉT\n"
    for quoted in (key, repr(key), repr(key.encode()), key.strip()):
        assert redacted(f"failed: {quoted}", [key, None]).count("SECR") == 0
    assert redacted("Errno 111: refused", ["1"]) == "Errno 111: refused"  # too short to be a key: left
