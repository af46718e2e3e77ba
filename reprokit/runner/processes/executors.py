"""The executor a run gets when its caller brings none: where ``Options.executor`` says.

Apart from warm.py and ray_executor.py so that neither knows of the other, and the scheduler
knows neither: it reads what an executor can do from its ``capabilities``.
"""

from __future__ import annotations

from reprokit.runner.options import Options
from reprokit.runner.processes.stage import Executor
from reprokit.runner.processes.warm import WarmExecutor


def make_executor(options: Options) -> Executor:
    """The executor of ``reprokit run``: on a Ray cluster, or here, warm unless
    ``options.warm`` is off. Its ``close()`` ends what it started."""
    if options.executor == "ray":  # imported only here: Ray is an optional extra
        from reprokit.runner.processes.ray_executor import RayExecutor

        return RayExecutor(options)
    return WarmExecutor(options)
