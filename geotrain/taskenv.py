"""``--env K=V``, ``--env K`` (this shell's value), ``--env-file FILE`` and ``--secret K[=V]``, as SkyPilot's
``sky launch`` takes them: they set a task's ``envs`` (a value the file leaves null must be given so) and are
substituted for ``$K`` / ``${K}`` in its ``workdir`` and ``file_mounts`` before it is read."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from geotrain.errors import InputError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def parse_envs(values: Iterable[str] = (), files: Iterable[Path] = (), *, flag: str = "--env",
               environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables given: each ``--env-file`` (dotenv lines ``K=V``, ``#`` comments), then each ``--env``."""
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for path in files:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise InputError(f"--env-file {path}: cannot read it ({exc.strerror or exc})") from None
        for number, line in enumerate(lines, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            key, sep, value = text.removeprefix("export ").partition("=")
            if not sep or not _NAME.match(key.strip()):
                raise InputError(f"--env-file {path}: line {number} is not NAME=VALUE")
            out[key.strip()] = value.strip().strip('"').strip("'")
    for value in values:
        key, sep, given = value.partition("=")
        key = key.strip()
        if not _NAME.match(key):
            raise InputError(f"{flag} {value!r}: give NAME=VALUE, or NAME to pass this shell's value")
        if not sep:
            if key not in environ:
                raise InputError(f"{flag} {key}: {key} is not set in this shell; give {flag} {key}=VALUE")
            given = environ[key]
        out[key] = given
    return out


def apply_envs(task: dict[str, Any], given: Mapping[str, str], origin: str) -> dict[str, Any]:
    """A SkyPilot task mapping with ``given`` over its ``envs`` (a secret's key stays a secret), and every
    ``$K``/``${K}`` in ``workdir`` and ``file_mounts`` replaced by its value; a variable left without a
    value is refused, naming the flag that gives it."""
    out = dict(task)
    section_of = {}
    for section in ("envs", "secrets"):
        values = out.get(section)
        if isinstance(values, Mapping):
            out[section] = dict(values)
            section_of.update(dict.fromkeys(map(str, values), section))
    for key, value in given.items():
        section = section_of.get(key, "envs")
        out[section] = {**(out.get(section) or {}), key: value}
    for section in ("envs", "secrets"):
        for key, value in (out.get(section) or {}).items():
            if value is None:
                flag = "--secret" if section == "secrets" else "--env"
                raise InputError(f"{origin}: {section}.{key} has no value in the file; give it with {flag} "
                                 f"{key}=VALUE (or {flag} {key} to pass this shell's)")
    values = {str(k): str(v) for section in ("envs", "secrets") for k, v in (out.get(section) or {}).items()}
    if isinstance(out.get("workdir"), str):
        out["workdir"] = _substitute(out["workdir"], values)
    mounts = out.get("file_mounts")
    if isinstance(mounts, Mapping):
        out["file_mounts"] = {_substitute(str(k), values): _substitute_any(v, values) for k, v in mounts.items()}
    return out


def _substitute_any(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _substitute(value, values)
    if isinstance(value, Mapping):
        return {k: _substitute_any(v, values) for k, v in value.items()}
    return value


def _substitute(text: str, values: Mapping[str, str]) -> str:
    return _REFERENCE.sub(lambda m: values.get(m[1] or m[2], m[0]), text)
