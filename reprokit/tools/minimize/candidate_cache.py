"""The minimizer's cache: a candidate's result by its script and where it ran, across calls."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from reprokit.comparison.verdict import comparing_code
from reprokit.environment.machine import versions
from reprokit.environment.uv import digest
from reprokit.infra.caching import Store
from reprokit.records import EnvSpec, VariantResult
from reprokit.runner.options import Options


class Cache:
    """Variant results by script content and environment, kept across calls."""

    def __init__(self, folder: Path | None = None) -> None:
        self.store = Store("minimize", root=folder)

    @staticmethod
    def key(script: str, options: Options, env: EnvSpec | None = None) -> str:
        """The script, how it runs, and the interpreter that runs it: the variant's environment
        (``[envs]``, ``--env``) by its content address, else reprokit's own python; and the
        code that judged it (a verdict from before a fix to the comparison is not reused)."""
        if env is not None:  # its requirements, for which python, from which index
            interpreter: object = {"env": digest(env)}
        else:
            interpreter = {"python": options.python, "version": sys.version, "packages": versions()}
        environment = [options.xla_device, options.timeout, interpreter, comparing_code()]
        text = script + json.dumps(environment, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> VariantResult | None:
        data = self.store.get_json(key)
        try:
            return VariantResult.from_json(data) if isinstance(data, dict) else None
        except (ValueError, KeyError, TypeError):  # another version's
            return None

    def put(self, key: str, result: VariantResult) -> None:
        self.store.put_json(key, result.to_json())
