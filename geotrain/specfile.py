"""Reading YAML files that users write (job specs, on-prem inventories), with errors that name the field.

:func:`load_yaml_mapping` reads a file into a mapping; :class:`Fields` reads typed values out of a
mapping and raises the caller's error class with a message such as
``job.yaml: constraints.max_regions: must be a whole number >= 1, got 0``. Unknown keys are errors
too, with a "did you mean" suggestion, because a misspelt limit silently ignored is how budgets
get blown.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from geotrain.errors import InputError

_MISSING = object()


def read_text(path: Path, error: type[InputError]) -> str:
    """A user's text file as str; missing, unreadable, empty or non-UTF-8 files raise ``error``."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise error(f"{path}: no such file; check the path") from exc
    except IsADirectoryError as exc:
        raise error(f"{path}: is a directory, not a file") from exc
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror})") from exc
    if not data.strip():
        raise error(f"{path}: the file is empty")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8"
        ) from exc


def parse_yaml(text: str, path: Path | str, error: type[InputError]) -> Any:
    """Parse YAML (or JSON) text; a syntax error names the file, line and column."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{path}: not valid YAML{where}: {problem}") from exc


def load_yaml_mapping(path: Path, error: type[InputError]) -> Mapping[str, Any]:
    """Parse a YAML file whose top level must be a mapping."""
    data = parse_yaml(read_text(path, error), path, error)
    if not isinstance(data, Mapping):
        raise error(f"{path}: the top level must be a mapping of field: value, got {type(data).__name__}")
    return data


class Fields:
    """Typed access to one mapping of a user file. ``path`` is the dotted location for messages."""

    def __init__(self, data: Mapping[str, Any], *, origin: str, error: type[InputError], path: str = "") -> None:
        self._data = data
        self._origin = origin
        self._error = error
        self._path = path
        self._read: set[str] = set()

    def mapping(self, key: str) -> Mapping[str, Any]:
        """A required sub-mapping as it is (for records another parser validates)."""
        value = self._get(key, _MISSING)
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be a mapping of field: value, got {type(value).__name__}")
        return value

    def keys(self) -> list:
        """The keys present in this mapping (for sections whose keys are data, such as quotas)."""
        return list(self._data)

    def fail(self, key: str, problem: str) -> InputError:
        return self._error(f"{self._origin}: {self._name(key)}: {problem}")

    def _name(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def _get(self, key: str, default: Any) -> Any:
        self._read.add(key)
        value = self._data.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise self._error(f"{self._origin}: {self._name(key)}: required field is missing")
            return default
        return value

    def text(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be a non-empty text, got {value!r}")
        return value.strip()

    def choice(self, key: str, choices: Iterable[str], default: Any = _MISSING) -> Any:
        options = tuple(choices)
        value = self.text(key, default)
        if value is default:
            return value
        if value not in options:
            hint = difflib.get_close_matches(value, options, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise self.fail(key, f"{value!r} is not one of {', '.join(options)}{suggestion}")
        return value

    def number(self, key: str, default: Any = _MISSING, *, minimum: float | None = None,
               above: float | None = None, maximum: float | None = None) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, f"must be a number, got {value!r}")
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise self.fail(key, f"must be a finite number, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be >= {minimum:g}, got {value:g}")
        if above is not None and value <= above:
            raise self.fail(key, f"must be > {above:g}, got {value:g}")
        if maximum is not None and value > maximum:
            raise self.fail(key, f"must be <= {maximum:g}, got {value:g}")
        return value

    def whole(self, key: str, default: Any = _MISSING, *, minimum: int | None = None) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise self.fail(key, f"must be a whole number, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be a whole number >= {minimum}, got {value}")
        return value

    def flag(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {value!r}")
        return value

    def text_list(self, key: str, default: Any = _MISSING) -> Any:
        """A list of texts; a single text is accepted as a list of one."""
        value = self._get(key, default)
        if value is default:
            return value
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items:
            raise self.fail(key, f"must be a non-empty list of texts, got {value!r}")
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, str) or not item.strip():
                raise self._error(f"{self._origin}: {self._name(key)}[{i}]: must be a non-empty text, got {item!r}")
            out.append(item.strip())
        return tuple(out)

    def section(self, key: str, *, required: bool = False) -> Fields | None:
        value = self._get(key, _MISSING if required else None)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be a mapping of field: value, got {type(value).__name__}")
        return Fields(value, origin=self._origin, error=self._error, path=self._name(key))

    def sections(self, key: str) -> list[Fields]:
        """A required, non-empty list of mappings."""
        value = self._get(key, _MISSING)
        if not isinstance(value, list) or not value:
            raise self.fail(key, "must be a non-empty list")
        out = []
        for i, item in enumerate(value):
            name = f"{self._name(key)}[{i}]"
            if not isinstance(item, Mapping):
                raise self._error(f"{self._origin}: {name}: must be a mapping of field: value")
            out.append(Fields(item, origin=self._origin, error=self._error, path=name))
        return out

    def finish(self) -> None:
        """Raise on keys that were never read: they are typos or fields geotrain does not know."""
        for key in self._data:
            if key not in self._read:
                hint = difflib.get_close_matches(str(key), sorted(self._read), n=1)
                suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
                known = ", ".join(sorted(self._read))
                raise self._error(
                    f"{self._origin}: {self._name(str(key))}: unknown field{suggestion}; known fields: {known}"
                )
