"""Save one small seeded model in one checkpoint format; run as a subprocess by the tests.

    python save_checkpoint.py torch|xser|dcp OUT [--optimizer]

``xser`` keeps the tensors on XLA:CPU so that xser writes its ``OUT.tensors/`` folder; ``dcp``
shards the weights under SPMD (4 virtual devices) and saves with CheckpointManager into the
folder OUT (its step 0). Every format holds the same values, named ``model.<param>``.
"""

from __future__ import annotations

import os
import sys

import torch
from torch import nn


def make_state() -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return {"model": model.state_dict()}


def save_xser(out: str) -> None:
    import torch_xla
    import torch_xla.utils.serialization as xser

    device = torch_xla.device()
    state = {"model": {k: v.to(device) for k, v in make_state()["model"].items()}}
    xser.save(state, out)


def save_dcp(out: str) -> None:
    import numpy as np
    import torch.distributed as dist
    import torch_xla
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    from torch_xla.experimental.distributed_checkpoint import CheckpointManager

    xr.use_spmd()
    mesh = xs.Mesh(np.arange(xr.global_runtime_device_count()), (1, 4), ("data", "model"))
    state = {"model": {k: v.to(torch_xla.device()) for k, v in make_state()["model"].items()}}
    for tensor in state["model"].values():
        xs.mark_sharding(tensor, mesh, ("model", None) if tensor.dim() == 2 else ("model",))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    manager = CheckpointManager(out, save_interval=1, chkpt_on_preemption=False)
    manager.save(0, state, force=True)


def main(kind: str, out: str) -> int:
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    if kind == "dcp":
        os.environ["CPU_NUM_DEVICES"] = "4"
    {"torch": lambda o: torch.save(make_state(), o), "xser": save_xser, "dcp": save_dcp}[kind](out)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
