"""Reading YAML files that users write (job specs, on-prem inventories), with errors that name the field.

:func:`load_yaml_mapping` reads a file into a mapping; :class:`Fields` reads typed values out of a
mapping and raises the caller's error class with a message such as
``job.yaml: constraints.max_regions: must be a whole number >= 1, got 0``. Unknown keys are errors
too, with a "did you mean" suggestion, because a misspelt limit silently ignored is how budgets
get blown.
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from geotrain.errors import InputError

_MISSING = object()


LARGEST = 1e15  # the largest number a user's file may give (counts, dollars, hours, samples)
MAX_FILE_BYTES = 256 * 2**20  # a user's spec, trace, inventory, plan or catalog file
MAX_DEPTH = 64  # nesting of lists and mappings in a YAML or JSON file


def read_text(path: Path, error: type[InputError]) -> str:
    """A user's text file as str: the one reader of user files. Only a regular file of at most
    :data:`MAX_FILE_BYTES` is read (a FIFO, a device or ``/dev/zero`` is refused without waiting on
    it); missing, unreadable, empty or non-UTF-8 files raise ``error``."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # opening a FIFO must not wait for a writer
    except FileNotFoundError as exc:
        raise error(f"{path}: no such file; check the path") from exc
    except IsADirectoryError as exc:
        raise error(f"{path}: is a directory, not a file") from exc
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{path}: is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: is not a regular file (a pipe, socket or device); give a file")
        if info.st_size > MAX_FILE_BYTES:
            raise error(f"{path}: {info.st_size:,} bytes is more than the {MAX_FILE_BYTES // 2**20} MiB geotrain reads")
        try:
            data = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise error(f"{path}: cannot be read ({exc.strerror})") from exc
    if len(data) > MAX_FILE_BYTES:
        raise error(f"{path}: more than the {MAX_FILE_BYTES // 2**20} MiB geotrain reads")
    if not data.strip():
        raise error(f"{path}: the file is empty")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8"
        ) from exc


def _loader():  # noqa: ANN202 - yaml is imported lazily
    """A safe YAML loader that refuses a mapping with a key given twice (YAML would keep the last)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN201
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: the base class says so
                    break
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears more than once in one mapping", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def check_depth(value: Any, where: str, error: type[InputError]) -> Any:
    """``value`` if its lists and mappings nest at most :data:`MAX_DEPTH` deep, else ``error``."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, Mapping)):
            if depth > MAX_DEPTH:
                raise error(f"{where}: lists and mappings nest more than {MAX_DEPTH} deep")
            children = item.values() if isinstance(item, Mapping) else item
            stack.extend((child, depth + 1) for child in children)
    return value


def _too_deep(text: str, open_chars: str, close_chars: str) -> bool:
    """Whether brackets in ``text`` nest more than MAX_DEPTH deep (a cheap look before parsing, so that
    the parsers' recursion is never reached; quoted brackets count too, which only errs on the safe side
    for absurd files)."""
    depth = 0
    for ch in text:
        if ch in open_chars:
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif ch in close_chars:
            depth = max(0, depth - 1)
    return False


def parse_yaml(text: str, path: Path | str, error: type[InputError]) -> Any:
    """Parse YAML (or JSON) text; a syntax error names the file, line and column. A key given twice in
    one mapping and nesting deeper than :data:`MAX_DEPTH` are errors too."""
    return _parse_yaml(text, path, error, many=False)


def _parse_yaml(text: str, path: Path | str, error: type[InputError], *, many: bool) -> Any:
    """One document (``many`` False), or the list of a file's documents (``---`` between them)."""
    import yaml

    if _too_deep(text, "[{", "]}"):
        raise error(f"{path}: lists and mappings nest more than {MAX_DEPTH} deep")
    try:
        if many:
            docs = [d for d in yaml.load_all(text, Loader=_loader()) if d is not None]  # noqa: S506 - SafeLoader subclass
            return [check_depth(d, str(path), error) for d in docs]
        data = yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "found another document" in str(problem):  # several documents: a SkyPilot pipeline (managed jobs)
            raise error(f"{path}: several YAML documents (a SkyPilot pipeline of tasks, line {mark.line + 1}) "
                        "where one is read; plan and launch read a pipeline as it is") from exc
        raise error(f"{path}: not valid YAML{where}: {problem}") from exc
    except RecursionError as exc:
        raise error(f"{path}: lists and mappings nest more than {MAX_DEPTH} deep") from exc
    return check_depth(data, str(path), error)


def parse_json(text: str, path: Path | str, error: type[InputError]) -> Any:
    """Parse JSON text; errors name the line and column; nesting is capped as for YAML."""
    import json

    if _too_deep(text, "[{", "]}"):
        raise error(f"{path}: lists and objects nest more than {MAX_DEPTH} deep")
    try:
        return check_depth(json.loads(text), str(path), error)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
    except RecursionError as exc:
        raise error(f"{path}: lists and objects nest more than {MAX_DEPTH} deep") from exc


def load_yaml_documents(path: Path, error: type[InputError]) -> list[Any]:
    """Every YAML document of a file (``---`` between them): a SkyPilot pipeline is several tasks."""
    return _parse_yaml(read_text(path, error), path, error, many=True)


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

    def value(self, key: str) -> Any:
        """A required field as it is (for fields that take several forms, read by the caller)."""
        return self._get(key, _MISSING)

    def value_or_none(self, key: str) -> Any:
        """An optional field as it is, None when absent."""
        return self._get(key, None)

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
               above: float | None = None, maximum: float | None = LARGEST) -> Any:
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

    def whole(self, key: str, default: Any = _MISSING, *, minimum: int | None = None,
              maximum: int | None = int(LARGEST)) -> Any:
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
        if maximum is not None and value > maximum:
            raise self.fail(key, f"must be a whole number <= {maximum:g}, got {value:g}")
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
