"""Bad inputs at scale: the generators of ``tests/badinputs.py``, a thousand cases and more per kind.

For each kind (job specs, catalogs, on-prem inventories, plan files, preemption traces, flag values)
prints how many cases ran, how they ended (exit 0 / 2 / 3), and the failures of the rule every input
error keeps: no internal error or traceback, one line on stderr, nothing written under GEOTRAIN_HOME
when refused (target: 0 in every column), plus the slowest case (a hang would show there).

    .venv/bin/python bench/bad_inputs.py [--cases 1000] [--kinds spec,catalog,...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.badinputs import case_for, problems, run_case  # noqa: E402

KINDS = ("spec", "catalog", "sites", "plan", "trace", "flags")


def campaign(kind: str, cases: int, root: Path) -> dict:
    codes: Counter = Counter()
    failures: Counter = Counter()
    examples: list[str] = []
    slowest = 0.0
    counter = [0]

    @settings(max_examples=cases, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def one(data) -> None:  # noqa: ANN001
        nonlocal slowest
        counter[0] += 1
        case = case_for(kind, data.draw)
        where = root / f"{kind}-{counter[0]}"
        start = time.perf_counter()
        try:
            outcome = run_case(case, where / "in", where / "home")
        except AssertionError as exc:  # an exception escaped the CLI
            failures["exception"] += 1
            examples.append(str(exc)[:200])
            return
        slowest = max(slowest, time.perf_counter() - start)
        codes[outcome.exit_code] += 1
        for problem in problems(case, outcome):
            failures[problem.split()[0] + " " + problem.split()[1] if " " in problem else problem] += 1
            if len(examples) < 5:
                examples.append(f"{case.args}: {problem}: {outcome.stderr.strip()[:200]}")

    one()
    return {"kind": kind, "cases": counter[0], "codes": codes, "failures": failures, "examples": examples,
            "slowest_s": slowest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds.split(","):
            start = time.perf_counter()
            row = campaign(kind, args.cases, Path(tmp))
            row["wall_s"] = time.perf_counter() - start
            rows.append(row)
            print(f"{kind:<8} {row['cases']:>5} cases  exit 0/2/3: {row['codes'][0]:>4}/{row['codes'][2]:>4}/"
                  f"{row['codes'][3]:>3}  other exits {sum(v for k, v in row['codes'].items() if k not in (0, 2, 3))}"
                  f"  failures {sum(row['failures'].values())} {dict(row['failures']) or ''}  slowest "
                  f"{row['slowest_s']:.2f} s  ({row['wall_s']:.0f} s)", flush=True)
            for example in row["examples"]:
                print(f"    {example}")
    total = sum(sum(r["failures"].values()) for r in rows)
    print(f"{sum(r['cases'] for r in rows)} cases, {total} failures (target 0)")


if __name__ == "__main__":
    main()
