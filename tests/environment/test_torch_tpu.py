"""`reprokit env` with TorchTPU installed and no TPU: it names torch_tpu and says no TPU is
attached, without importing it. The torch_tpu here is a fake (a TPU cannot exist on this
machine): installed as torch-tpu 0.2.0 is, with its `torch.backends` entry point, so that
`import torch` itself would import it; importing it leaves a marker file and aborts the
process, as the real one may without a TPU (or waits on the metadata server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from reprokit.environment.machine import torch_tpu
from reprokit.records import Environment

REPO = Path(__file__).parents[2]
ABORT = "import os, pathlib\npathlib.Path({marker!r}).write_text('imported')\nos.abort()\n"


def fake_torch_tpu(site: Path, marker: Path) -> Path:
    """torch_tpu and its metadata in ``site``, as pip installs torch-tpu 0.2.0."""
    package = site / "torch_tpu"
    package.mkdir(parents=True)
    for name in ("__init__.py", "_loader.py"):
        (package / name).write_text(ABORT.format(marker=str(marker)))
    info = site / "torch_tpu-0.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_tpu\nVersion: 0.2.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_tpu = torch_tpu._loader:load\n")
    return site


def test_env_names_torch_tpu_and_never_imports_it(tmp_path):
    marker = tmp_path / "imported"
    site = fake_torch_tpu(tmp_path / "site", marker)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{site}", "PJRT_DEVICE": "CPU"}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    # the fake bites: a plain `import torch` imports it and aborts
    plain = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True)
    assert plain.returncode != 0 and marker.exists()
    marker.unlink()
    done = subprocess.run(
        [sys.executable, "-m", "reprokit", "env", "--json"],
        env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert not marker.exists()  # neither reprokit nor its collect_env or XLA probe imported it
    found = json.loads(done.stdout)
    assert found["versions"]["torch_tpu"] == "0.2.0"
    assert found["torch_tpu"]["autoloads"] is True and found["torch_tpu"]["tpu_chips"] == []
    assert found["xla"]["device_kind"] == "CPU"  # the XLA probe ran, torch_tpu left alone
    assert found["pytorch"]["torch_version"].startswith("2.9")  # collect_env imported torch
    rows = dict(Environment.from_json(found).rows())
    assert rows["torch_tpu"].startswith("0.2.0 (loads itself on `import torch`)")
    assert rows["TPU (PCI)"].startswith("none found")


def test_tpu_chips_from_pci_ids(tmp_path):
    """Google's vendor id 0x1ae0 and the device ids torch_tpu's hardware.py names."""
    for slot, vendor, device in [("0000:00:04.0", "0x1ae0", "0x0063"),
                                 ("0000:00:05.0", "0x1ae0", "0x0063"),
                                 ("0000:00:06.0", "0x8086", "0x1234"),
                                 ("0000:00:07.0", "0x1ae0", "0x00ff")]:  # fmt: skip
        folder = tmp_path / "pci" / slot
        folder.mkdir(parents=True)
        (folder / "vendor").write_text(vendor + "\n")
        (folder / "device").write_text(device + "\n")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "accel0").touch()
    found = torch_tpu(pci=tmp_path / "pci", dev=tmp_path / "dev")
    assert found["tpu_chips"] == ["TPU v5e", "TPU v5e", "Google PCI device 0x00ff"]
    assert found["accel"] == [str(tmp_path / "dev" / "accel0")] and found["vfio"] is False
    rows = dict(Environment(torch_tpu=found).rows())
    assert rows["TPU (PCI)"] == "2 x TPU v5e, 1 x Google PCI device 0x00ff"
