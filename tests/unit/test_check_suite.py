"""scripts/check_suite.py, which `make test-all` runs after the suite: it finds a collected test without
a result, a skipped test, and a test function pytest never collects, from a real JUnit report."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _check_suite():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("check_suite", REPO / "scripts" / "check_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_suite = _check_suite()

SUITE = '''
import pytest

@pytest.mark.parametrize("x", [1, 2])
def test_param(x):
    assert x

def test_skipped():
    pytest.skip("not here")

class TestGroup:
    def test_in_class(self):
        pass

def test_shadowed():
    pass

def test_shadowed():  # a second definition of the same name: pytest collects only this one
    pass
'''


def _run_junit(tmp_path: Path, files: dict[str, str], *args: str) -> tuple[Path, Path]:
    """``files`` under ``tmp_path/tests``, run by pytest into a JUnit report."""
    tests = tmp_path / "tests"
    tests.mkdir()
    for name, text in files.items():
        (tests / name).write_text(text)
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                    f"--junitxml={junit}", "--rootdir", str(tmp_path), *args, "tests"],
                   cwd=tmp_path, capture_output=True, text=True, check=False)
    return junit, tests


def test_the_audit_names_what_a_run_left_out(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    files = {"test_sample.py": SUITE, "helpers_check.py": "def test_never_collected():\n    pass\n"}
    junit, tests = _run_junit(tmp_path, files, "-k", "not in_class")
    monkeypatch.setattr(check_suite, "REPO", tmp_path)  # node ids are relative to the suite's root
    ran = check_suite.results(junit)
    assert ran == {"tests/test_sample.py::test_param[1]": "passed", "tests/test_sample.py::test_param[2]": "passed",
                   "tests/test_sample.py::test_skipped": "skipped", "tests/test_sample.py::test_shadowed": "passed"}
    suite = set(ran) | {"tests/test_sample.py::TestGroup::test_in_class"}  # deselected by -k
    written = check_suite.written_tests(tests)
    problems = "\n".join(check_suite.audit(suite, ran, written))
    assert "1 collected test(s) have no result" in problems and "TestGroup::test_in_class" in problems
    assert "1 test(s) were skipped" in problems and "test_sample.py::test_skipped" in problems
    assert "1 test function(s) under tests/ are never collected" in problems
    assert "tests/helpers_check.py::test_never_collected" in problems
    assert "1 test name(s) are defined twice in one file" in problems and "test_sample.py::test_shadowed" in problems


def test_a_whole_run_passes_the_audit(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    clean = SUITE.replace('    pytest.skip("not here")\n', "    pass\n").split("def test_shadowed")[0]
    junit, tests = _run_junit(tmp_path, {"test_sample.py": clean})
    monkeypatch.setattr(check_suite, "REPO", tmp_path)
    ran = check_suite.results(junit)
    assert set(ran.values()) == {"passed"} and len(ran) == 4
    assert check_suite.audit(set(ran), ran, check_suite.written_tests(tests)) == []
