"""The environment a run ran in: the machine, as reprokit.environment.machine captures it, and
the named set of requirements a variant's own environment is built from (--env, [envs])."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from reprokit.records._json import from_json

ENV_MARKER = "reprokit-env.json"  # an environment folder's record of what it holds, written last


@dataclass(frozen=True)
class EnvSpec:
    """A named set of requirements to install: ``2.8`` = torch==2.8.0 and torch_xla==2.8.0.

    reprokit.environment.uv builds it (and addresses it by content: ``uv.digest``); a
    variant's result records it, as ``{"name": ..., "requirements": [...]}``."""

    name: str
    requirements: tuple[str, ...]

    def label(self) -> str:
        """``2.8 (torch==2.8.0 torch_xla==2.8.0)``: how messages name the environment."""
        return f"{self.name} ({' '.join(self.requirements)})"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "requirements": list(self.requirements)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EnvSpec:
        return from_json(cls, data, requirements=tuple)


@dataclass(frozen=True)
class Environment:
    """What a maintainer asks for first (reprokit.environment.machine captures it), secrets
    redacted."""

    python: str = "?"
    platform: str = "?"
    cpu_count: int | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    torch_xla_matches_torch: bool | None = None
    variables: dict[str, str] = field(default_factory=dict)
    xla: dict[str, Any] | None = None  # device kind and count, or why they are unknown
    pytorch: dict[str, str] = field(default_factory=dict)  # torch.utils.collect_env
    # TorchTPU installed, whether it loads on `import torch`, the TPU chips: never imported
    torch_tpu: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Environment:
        return from_json(cls, data)

    def rows(self) -> list[tuple[str, str]]:
        """The few lines a maintainer reads first, for report tables."""
        rows = [("Python", self.python), ("Platform", self.platform)]
        rows += [(name, str(v)) for name, v in self.versions.items() if v]
        match = self.torch_xla_matches_torch
        if match is not None:
            rows.append(("torch / torch_xla match", "yes" if match else "NO"))
        xla = self.xla or {}
        if "device_kind" in xla:
            rows.append(("XLA devices", f"{xla['device_count']} x {xla['device_kind']}"))
            rows.append(("matmul precision", str(xla.get("matmul_precision"))))
        elif "error" in xla:
            rows.append(("XLA devices", xla["error"]))
        rows += _torch_tpu_rows(self.torch_tpu)
        rows += list(self.variables.items())
        for key in ("os", "cpu_info", "nvidia_gpu_models", "is_cuda_available"):
            if key in self.pytorch:
                lines = self.pytorch[key].splitlines() or [""]
                rows.append((key, lines[0] if key != "cpu_info" else _cpu_model(lines)))
        return rows


def _torch_tpu_rows(found: dict[str, Any] | None) -> list[tuple[str, str]]:
    """TorchTPU and the TPU chips, as ``reprokit env`` found them (older records: nothing)."""
    if found is None:
        return []
    rows = []
    if found.get("installed"):
        how = " (loads itself on `import torch`)" if found.get("autoloads") else ""
        rows.append(("torch_tpu", f"{found['installed']}{how}, not initialised by reprokit"))
    chips = found.get("tpu_chips") or []
    if chips:
        kinds = ", ".join(f"{chips.count(k)} x {k}" for k in dict.fromkeys(chips))
        rows.append(("TPU (PCI)", kinds))
    elif found.get("installed") or found.get("accel") or found.get("vfio"):
        nodes = ", ".join(found.get("accel") or []) + (" /dev/vfio" if found.get("vfio") else "")
        rows.append(("TPU (PCI)", f"none found; device nodes: {nodes.strip() or 'none'}"))
    return rows


def _cpu_model(lines: list[str]) -> str:
    return next((ln.split(":", 1)[1].strip() for ln in lines if "Model name" in ln), "?")
