"""Fixture files, not tests: keep `pytest tests/` from collecting the case files here.

tests/data/cases/*.toml are run by tests/test_plugin.py on purpose (some fail by design).
"""

collect_ignore = ["cases", "templates"]
