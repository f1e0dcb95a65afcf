"""Every fake the tests share: stand-ins for servers, models, agents and engines, imported as `fakes.<module>`.

`tests/` is on sys.path (pyproject's `[tool.pytest.ini_options] pythonpath`), so any test folder imports these."""
