"""Run a training script unchanged and write one line per optimizer step (``geotrain profile``).

``python -m geotrain.train.probe SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``) registers a global
``torch.optim`` step hook, then runs the script as ``__main__``. Each ``optimizer.step()`` of any
optimizer appends ``{"t": unix time, "steps": 1}`` to the file named by ``GEOTRAIN_PROGRESS_FILE``;
the profiler turns steps into samples with the samples per step it was given. A script that calls
:func:`geotrain.train.api.report_progress` writes ``{"t", "samples"}`` lines itself, and those win.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time


def main(argv: list[str]) -> None:
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        raise SystemExit("usage: python -m geotrain.train.probe SCRIPT [ARGS...] | -m MODULE [ARGS...]")
    progress = open(os.environ["GEOTRAIN_PROGRESS_FILE"], "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def on_step(optimizer, args, kwargs) -> None:  # noqa: ANN001 - torch's hook signature
        progress.write(json.dumps({"t": time.time(), "steps": 1}) + "\n")

    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:
        raise SystemExit(f"geotrain profile counts torch optimizer steps, and {sys.executable} has no torch: run the "
                         "command with the python your training uses") from None

    register_optimizer_step_post_hook(on_step)
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
