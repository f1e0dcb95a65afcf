"""The loop CLI tests' shared fixtures: the scripted role agents on 127.0.0.1, their agents.toml, one question."""

from __future__ import annotations

import json

import pytest
from fakes.http_server import FakeServer
from fakes.role_agents import role_reply


@pytest.fixture(scope="module")
def chat():
    server = FakeServer(role_reply)
    yield server
    server.close()


@pytest.fixture
def agents_toml(tmp_path, chat):
    path = tmp_path / "agents.toml"
    path.write_text(f'[defaults]\nbackend = "openai"\nmodel = "tiny"\nbase_url = "{chat.v1}"\ntimeout = 10\n'
                    '[[agent]]\nname = "a"\ntemperature = 0.2\n[[agent]]\nname = "b"\ntemperature = 0.9\n'
                    '[[agent]]\nname = "c"\nsystem = "Be brief."\n')
    return path


@pytest.fixture
def queries(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"id": "ali", "question": "Ali had $21. Leila gave him half of her $100. "
                                "How much does Ali have now?", "reference": "71", "candidates": []}) + "\n")
    return path
