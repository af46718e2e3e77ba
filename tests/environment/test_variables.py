"""The named sets of environment variables: what each one holds, and that each part of
reprokit decides with the same set (one rule, one place)."""

from __future__ import annotations

from reprokit.environment import machine, variables
from reprokit.environment.variables import (
    NODE_OWN,
    RAY_SETS,
    RUNTIME_READ,
    STEERING,
    XLA_VARIABLES,
    shown,
    steering,
)
from reprokit.runner.processes import warm

ENVIRON = {
    "PJRT_DEVICE": "CPU",
    "XLA_FLAGS": "--xla_dump_to=/tmp",
    "CPU_NUM_DEVICES": "4",
    "CPU_NUM_DEVICES_EXTRA": "no",  # not the variable, only its prefix
    "TPU_VISIBLE_CHIPS": "0",
    "XRT_TPU_CONFIG": "legacy",
    "OMP_NUM_THREADS": "1",
    "TORCH_LOGS": "+dynamo",
    "CUDA_VISIBLE_DEVICES": "1",
    "PYTHONHASHSEED": "0",
    "REPROKIT_CACHE": "/c",
    "HOME": "/home/u",
    "PATH": "/bin",
}


def test_the_capture_shows_torch_xlas_variables_only():
    assert list(shown(ENVIRON)) == [
        "CPU_NUM_DEVICES", "PJRT_DEVICE", "TPU_VISIBLE_CHIPS", "XLA_FLAGS", "XRT_TPU_CONFIG",
    ]  # fmt: skip


def test_what_steers_a_result_is_wider_than_what_is_shown():
    names = [name for name, _ in steering(ENVIRON)]
    assert names == sorted(names)
    assert {"OMP_NUM_THREADS", "TORCH_LOGS", "CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED"} <= set(names)
    assert "HOME" not in names and "PATH" not in names and "CPU_NUM_DEVICES_EXTRA" not in names
    legacy = {"XRT_TPU_CONFIG"}  # the XRT runtime's: shown to a maintainer, gone from torch_xla 2
    assert set(shown(ENVIRON)) - legacy <= set(names)


def test_what_the_runtime_reads_late_steers_a_result_too():
    """The warm server may differ from its stage in these: the results cache must not."""
    assert all(STEERING.match(name) for name in RUNTIME_READ)
    assert "PJRT_DEVICE" not in RUNTIME_READ  # read by torch_xla's import: part of a server


def test_a_nodes_own_devices_and_what_ray_sets():
    assert NODE_OWN.search("CUDA_VISIBLE_DEVICES") and NODE_OWN.search("TPU_VISIBLE_CHIPS")
    assert NODE_OWN.search("TPU_ACCELERATOR_TYPE") and not NODE_OWN.search("PJRT_DEVICE")
    assert all(STEERING.match(name) for name in RAY_SETS)


def test_every_part_decides_with_the_same_sets():
    from reprokit.runner.processes import ray_executor
    from reprokit.runner.processes import result_cache as cache

    assert warm.RUNTIME_READ is variables.RUNTIME_READ
    assert ray_executor.STEERING is STEERING and cache.steering is steering
    assert (ray_executor.NODE_OWN, ray_executor.RAY_SETS) == (NODE_OWN, RAY_SETS)
    assert machine.shown is shown and XLA_VARIABLES.pattern.startswith("^(PJRT_")


def test_a_run_carries_the_steering_variables_less_its_own_the_harnesss_and_secrets():
    environ = ENVIRON | {
        "XLA_SAVE_TENSORS_FMT": "hlo",  # --dump-hlo's, set per stage
        "TORCH_HUB_TOKEN": "abcdefgh12",  # a secret by its name
        "XLA_NOTE": "ghp_" + "a" * 36,  # a secret by its shape
    }
    assert variables.carried(environ) == {
        "CUDA_VISIBLE_DEVICES": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "TORCH_LOGS": "+dynamo",
        "TPU_VISIBLE_CHIPS": "0",
        "XLA_FLAGS": "--xla_dump_to=/tmp",
    }
    assert {"PJRT_DEVICE", "CPU_NUM_DEVICES"} <= variables.HARNESS_OWNED


def test_what_importing_torch_xla_set_in_the_harness_is_not_carried():
    """torch_xla's import adds its own XLA_FLAGS default and PJRT_DYNAMIC_PLUGINS to the
    process that imported it: nobody exported them, and every stage sets them itself."""
    imported = {"XLA_FLAGS": " --xla_cpu_enable_fast_math=false", "PJRT_DYNAMIC_PLUGINS": "1"}
    assert variables.carried(imported) == {}
    mine = {"XLA_FLAGS": "--xla_dump_to=/tmp --xla_cpu_enable_fast_math=false"}
    assert variables.carried(mine) == {"XLA_FLAGS": "--xla_dump_to=/tmp"}
    assert variables.carried({"PJRT_DYNAMIC_PLUGINS": "0"}) == {"PJRT_DYNAMIC_PLUGINS": "0"}
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir  # what torch sets

    assert variables.carried({"TORCHINDUCTOR_CACHE_DIR": default_cache_dir()}) == {}
    assert variables.carried({"TORCHINDUCTOR_CACHE_DIR": "/data/c"}) == {
        "TORCHINDUCTOR_CACHE_DIR": "/data/c"
    }
