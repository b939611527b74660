"""Run a command on a node with the preemption-notice signal ignored until it asks for it.

The local provider delivers a preemption notice as SIGUSR1, whose default action ends a process.
A user's script that does not listen for notices must not die at the notice (only at the
deadline), so this shim sets SIGUSR1 to "ignore" and execs the command; ``geotrain.train.api``
installs a real handler when the script registers one.

    python -m geotrain.train.usercmd python train.py --lr 0.1
"""

from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m geotrain.train.usercmd COMMAND [ARGS...]")
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
