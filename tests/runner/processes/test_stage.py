"""Running one stage: the environment its backend needs, the files its case brings along, and
templates written before stages named their devices, which still run, with a warning."""

from __future__ import annotations

import pytest
from conftest import TEST_TEMPLATES

from reprokit.errors import ReprokitError, ReprokitWarning
from reprokit.generate.variants import load_variants
from reprokit.records import Outcome
from reprokit.runner.options import Options
from reprokit.runner.scheduler import run

LEGACY = '[case]\ntitle = "legacy"\ntemplate = "legacy_spmd"\n'


def test_an_old_template_still_gets_its_spmd_devices_with_a_warning(tmp_path, write_case):
    variants = load_variants([str(write_case(LEGACY))], templates=[TEST_TEMPLATES])
    options = Options(templates=(TEST_TEMPLATES,))
    with pytest.warns(ReprokitWarning, match=r'"devices": SPMD_DEVICES'):
        summary = run(variants, run_dir=tmp_path / "run", options=options)
    (result,) = summary.variants
    assert result.outcome is Outcome.MATCH, result.reason
    assert result.stages[0].metrics["devices"] == 3  # CPU_NUM_DEVICES from spmd_devices


def test_a_file_parameter_lies_beside_the_script(tmp_path, write_case):
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "blob.bin").write_bytes(b"\x01\x02\x03")
    case = write_case(LEGACY + '[params]\ndata = "inputs/blob.bin"\n')  # relative to the case
    (variant,) = load_variants([str(case)], templates=[TEST_TEMPLATES])
    options = Options(templates=(TEST_TEMPLATES,))
    with pytest.warns(ReprokitWarning):
        summary = run([variant], run_dir=tmp_path / "run", options=options)
    assert summary.variants[0].stages[0].metrics["data"] == [1, 2, 3]
    assert (tmp_path / "run" / variant.label / "blob.bin").read_bytes() == b"\x01\x02\x03"
    assert '"blob.bin"' in (tmp_path / "run" / variant.label / "repro.py").read_text()


def test_a_missing_file_parameter_is_bad_input(write_case):
    case = write_case(LEGACY + '[params]\ndata = "nowhere.bin"\n')
    with pytest.raises(ReprokitError, match="no such file") as error:
        load_variants([str(case)], templates=[TEST_TEMPLATES])
    assert error.value.line == 5  # the line of `data = ...`
