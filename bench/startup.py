"""Wall time of whole `geotrain` processes (target: each under 1 s on a 2-core machine).

Runs each command REPEAT times after one warm-up run (so the file cache is warm, as it is for a
user who types commands one after another) and prints the median, min and max wall time and the
median's ratio to the 1 s target.

    .venv/bin/python bench/startup.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 1.0
COMMANDS = [
    ["--help"],
    ["--version"],
    ["catalog", "list", "--accelerator", "T4", "--market", "spot"],
    ["catalog", "list", "--continent", "europe", "--accelerator", "A100", "--json"],
]


def geotrain_command() -> list[str]:
    exe = Path(sys.executable).with_name("geotrain")
    return [str(exe)] if exe.exists() else [shutil.which("geotrain") or "geotrain"]


def time_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    base = geotrain_command()
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, GEOTRAIN_HOME=home, COLUMNS="160")
        print(f"{'command':<70} {'median':>8} {'min':>7} {'max':>7} {'ratio':>6}")
        for cmd in COMMANDS:
            argv = base + cmd
            time_once(argv, env)
            times = [time_once(argv, env) for _ in range(args.repeat)]
            median = statistics.median(times)
            label = "geotrain " + " ".join(cmd)
            print(f"{label:<70} {median:>7.3f}s {min(times):>6.3f}s {max(times):>6.3f}s {median / TARGET_S:>5.2f}x")
    print(f"ratio = median / {TARGET_S:.0f} s target; below 1.00 meets the target")


if __name__ == "__main__":
    main()
