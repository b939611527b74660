"""Running the system's network tools (``ip``, ``tc``) and the one error this package raises for them."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from geotrain.errors import ProviderError

COMMAND_TIMEOUT_S = 20.0


class WanError(ProviderError):
    """A namespace, TUN device, qdisc or delay line could not be made, changed or read.
    ``scope`` names the namespace (or device) concerned, where there is one."""


def run(argv: Sequence[str], *, scope: str | None = None, check: bool = True,
        timeout_s: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (no shell) and return its completed process; with ``check``, a non-zero exit, a
    missing program or a timeout raises :class:`WanError` quoting the command and its stderr."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise WanError(f"`{argv[0]}` not found: install iproute2.", scope=scope) from exc
    except subprocess.TimeoutExpired as exc:
        raise WanError(f"`{' '.join(argv)}` took over {timeout_s:g} s.", scope=scope) from exc
    if check and done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise WanError(f"`{' '.join(argv)}` failed: {detail[-1] if detail else f'exit {done.returncode}'}.",
                       scope=scope)
    return done


def run_batch(lines: Sequence[str], *, tool: str, namespace: str | None = None,
              check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run several ``ip`` or ``tc`` commands in one process (``tool -batch -``), in ``namespace`` when
    given; ``-force`` goes on past a failing line, and the first failure is reported."""
    argv = [tool] + (["-n", namespace] if namespace else []) + ["-force", "-batch", "-"]
    try:
        done = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)
    except FileNotFoundError as exc:
        raise WanError(f"`{argv[0]}` not found: install iproute2.", scope=namespace) from exc
    except subprocess.TimeoutExpired as exc:
        raise WanError(f"`{tool} -batch` took over {COMMAND_TIMEOUT_S:g} s.", scope=namespace) from exc
    if check and done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise WanError(f"`{tool} -batch` failed: {detail[0] if detail else f'exit {done.returncode}'}.",
                       scope=namespace)
    return done
