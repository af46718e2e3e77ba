"""Capture: a model of the user's (or a named one of a zoo) as an exported program and a case
that runs it. forward.py captures a forward, train.py a training step, zoo.py builds named
models; export.py calls torch.export, writer.py writes every capture, program_file.py checks
what an archive holds, factory.py reads the CLI's ``FILE.py:FUNCTION``."""

from reprokit.tools.capture.factory import command, load_factory
from reprokit.tools.capture.forward import capture
from reprokit.tools.capture.writer import INPUTS, OUTPUTS

__all__ = ["INPUTS", "OUTPUTS", "capture", "command", "load_factory"]
