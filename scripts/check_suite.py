"""Check that a `make test-all` run ran the whole suite; exit 1 naming what it left out.

    python scripts/check_suite.py JUNIT_XML

- every test pytest collects under ``tests/`` (no marker filter) has a result in JUNIT_XML, and none
  of them was skipped: a test that is skipped where the suite runs protects nothing;
- every test function written under ``tests/`` (``def test_*`` at module level or in a ``Test*``
  class) is collected, so a file pytest does not pick up is found, and no test name is defined twice
  in one file (the first definition would never run);
- it prints how many of them `make test` runs (those not marked ``slow``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


def collected(*args: str) -> set[str]:
    """Node ids pytest collects from the repository's test paths."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          *args], cwd=REPO, capture_output=True, text=True)
    if out.returncode not in (0, 5):  # 5: nothing collected (a filter that keeps nothing)
        sys.exit(f"check_suite: pytest --collect-only failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return {line.strip() for line in out.stdout.splitlines() if "::" in line}


def node_id(classname: str, name: str) -> str:
    """The pytest node id of a JUnit test case (``tests.unit.test_x.TestY`` + ``test_z[a]``)."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (REPO / path).is_file():
            return "::".join([path, *parts[cut:], name])
    return "::".join([classname.replace(".", "/") + ".py", name])


def results(junit: Path) -> dict[str, str]:
    """Node id → ``passed``, ``failed`` or ``skipped`` for every test case in a JUnit report."""
    out: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        if case.find("skipped") is not None:
            outcome = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        nid = node_id(case.get("classname", ""), case.get("name", ""))
        if out.get(nid) in (None, "passed"):  # a teardown error is reported as a second case
            out[nid] = outcome
    return out


def written_tests(root: Path = TESTS) -> list[str]:
    """``path::name`` (``path::Class::name``) of every test function written under ``root``, once per
    definition (a name defined twice in a file appears twice)."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                found.append(f"{rel}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                        found.append(f"{rel}::{node.name}::{item.name}")
    return found


def audit(suite: set[str], ran: dict[str, str], written: list[str]) -> list[str]:
    """What a run of the whole suite left out: collected tests without a result, skipped tests, and
    test functions that were never collected (``suite``: collected node ids; ``ran``: node id →
    outcome; ``written``: test functions found in the files)."""
    problems: list[str] = []
    not_run = sorted(suite - ran.keys())
    if not_run:
        problems.append(f"{len(not_run)} collected test(s) have no result (deselected or not run):")
        problems += [f"  {n}" for n in not_run[:20]]
    skipped = sorted(n for n, outcome in ran.items() if outcome == "skipped")
    if skipped:
        problems.append(f"{len(skipped)} test(s) were skipped, so nothing runs them:")
        problems += [f"  {n}" for n in skipped[:20]]
    bases = {n.split("[", 1)[0] for n in suite}
    never = sorted({name for name in written if name not in bases})
    if never:
        problems.append(f"{len(never)} test function(s) under tests/ are never collected "
                        "(a file pytest does not pick up):")
        problems += [f"  {n}" for n in never[:20]]
    twice = sorted({name for name in written if written.count(name) > 1})
    if twice:
        problems.append(f"{len(twice)} test name(s) are defined twice in one file; only the last one runs:")
        problems += [f"  {n}" for n in twice[:20]]
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    junit = Path(argv[0])
    if not junit.is_file():
        sys.exit(f"check_suite: {junit} does not exist; run `make test-all`, which writes it")
    suite = collected()
    fast = collected("-m", "not slow")
    ran = results(junit)
    problems = audit(suite, ran, written_tests())
    failed = sum(1 for outcome in ran.values() if outcome == "failed")
    skipped = sum(1 for outcome in ran.values() if outcome == "skipped")
    print(f"check_suite: {len(suite)} tests collected, {len(ran)} with a result ({failed} failed, "
          f"{skipped} skipped); `make test` runs {len(fast)} of them, `make test-all` all")
    for line in problems:
        print(line if line.startswith("  ") else f"check_suite: {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
