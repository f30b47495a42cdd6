"""`rsi doctor`'s check for the Python 3.13 rsi adds to verifiers: which tasks need it."""

from __future__ import annotations

import shutil
from pathlib import Path

from rsi.loop.doctor import _verifier_needs_python_313

TB21 = Path(__file__).parents[1] / "fixtures" / "tb21"


def test_a_uvx_313_test_on_a_python_311_image_needs_rsis_python() -> None:
    assert _verifier_needs_python_313(TB21 / "log-error-counts")


def test_a_python_313_image_has_its_own() -> None:
    assert not _verifier_needs_python_313(TB21 / "csv-region-totals")


def test_other_versions_and_tests_without_uv_need_none(tmp_path: Path) -> None:
    task = tmp_path / "t"
    shutil.copytree(TB21 / "log-error-counts", task)
    test_sh = task / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace("-p 3.13", "-p 3.12"))
    assert not _verifier_needs_python_313(task)  # rsi can add 3.13 only: nothing to offer
    test_sh.write_text("python3 /tests/test_outputs.py\n")
    assert not _verifier_needs_python_313(task)
