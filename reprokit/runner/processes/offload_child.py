"""An offloaded piece of work (infra/offload.py), run as a script forked from a warm server:

    python offload_child.py MODULE:FUNCTION INPUT.json OUTPUT.json

It imports torch at its top, as a cpu stage's script does, so that it is forked from the same
server (warm.py picks a server by the script's top imports): torch is there already.
"""

from __future__ import annotations

import sys

del sys.path[0]  # this folder: its modules (signals, stage...) would shadow others'

import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402  (the server to fork from: one that has imported it)

from reprokit.infra.offload import here  # noqa: E402


def main(work: str, given: str, out: str) -> None:
    torch.set_num_threads(1)  # many small operations beside the stages (infra/torch_import.py)
    found = here(work, json.loads(Path(given).read_text("utf-8")))
    temp = Path(f"{out}.tmp")
    temp.write_text(json.dumps(found), "utf-8")
    os.replace(temp, out)  # whole or not at all: the harness reads it only then


if __name__ == "__main__":
    main(*sys.argv[1:])
    os._exit(0)  # all is written: torch's exit handlers would only cost tens of ms
