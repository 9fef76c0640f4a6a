"""Typed access to a parsed profile.toml that turns every problem into `path:line: [table] key: message`.

One reader serves the whole file, `[recipe]` included, so every message has the same shape and every
unknown key (`platfroms`, `chanels`, `comit`) is refused the same way, with a 'did you mean'.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from envbuild.errors import InputFileError
from envbuild.profile.toml_lines import KeyPath, key_lines


def table_name(path: KeyPath) -> str:
    """("recipe", "conda") -> "recipe.conda"; array indices are left out (messages number items themselves)."""
    return ".".join(str(p) for p in path if not isinstance(p, int))


def did_you_mean(key: str, allowed: Sequence[str]) -> str:
    """'did you mean 'platforms'? ' for a key close to a known one (difflib), else ''."""
    near = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    return f"did you mean {near[0]!r}? " if near else ""


class Reader:
    """Validation helpers over one file's text; line numbers are computed only when a message needs one."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.text = text
        self._lines: Optional[Dict[KeyPath, int]] = None

    def line(self, path: KeyPath) -> Optional[int]:
        """The line of `path`, else of its nearest ancestor that has one."""
        if self._lines is None:
            self._lines = key_lines(self.text)
        for k in range(len(path), 0, -1):
            if path[:k] in self._lines:
                return self._lines[path[:k]]
        return None

    def error(self, where: str, message: str, path: KeyPath) -> InputFileError:
        return InputFileError(self.path, f"{where}: {message}" if where else message, self.line(path))

    def fail(self, table: KeyPath, key: Optional[str], message: str) -> InputFileError:
        """An error about `key` in `table` (or about the table itself when key is None)."""
        name = table_name(table)
        where = f"[{name}] {key}" if name and key else (f"[{name}]" if name else key or "")
        return self.error(where, message, table + ((key,) if key else ()))

    def only(self, data: Dict[str, Any], table: KeyPath, allowed: Sequence[str]) -> None:
        """Reject a key the schema does not know, naming it, its line and the closest known key."""
        for key in data:
            if key in allowed:
                continue
            name = table_name(table)
            message = (f"unknown field in {f'[{name}]' if name else 'top level'}; {did_you_mean(key, allowed)}"
                       f"known: {', '.join(allowed)}")
            if not table and isinstance(data[key], (dict, list)):  # an unknown [table] or [[table]]
                raise self.error(f"[{key}]", message, (key,))
            raise self.fail(table, key, message)

    def get(self, data: Dict[str, Any], table: KeyPath, key: str, typ: Any, required: bool = True,
            default: Any = None) -> Any:
        """data[key] checked against `typ` (a type or a tuple of types)."""
        if key not in data:
            if required:
                raise self.fail(table, None, f"missing required field {key!r}")
            return default
        value = data[key]
        if typ is int and isinstance(value, bool):
            raise self.fail(table, key, "expected an integer, got a boolean")
        if not isinstance(value, typ):
            names = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
            raise self.fail(table, key, f"expected {names}, got {type(value).__name__} {value!r}")
        return value

    def table(self, data: Dict[str, Any], table: KeyPath, key: str, allowed: Sequence[str]) -> Dict[str, Any]:
        """The sub-table data[key] ({} when absent), its keys checked against `allowed`."""
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(table, key, f"expected a table, got {type(value).__name__}")
        self.only(value, table + (key,), allowed)
        return value

    def string(self, data: Dict[str, Any], table: KeyPath, key: str, required: bool = True, default: str = "") -> str:
        """A string; a required one must not be blank."""
        if key not in data:
            if required:
                raise self.fail(table, None, f"missing required field {key!r}")
            return default
        value = data[key]
        if not isinstance(value, str) or (required and not value.strip()):
            raise self.fail(table, key, f"expected a non-empty string, got {value!r}")
        return value

    def strings(self, data: Dict[str, Any], table: KeyPath, key: str, required: bool = False) -> list:
        if key not in data:
            if required:
                raise self.fail(table, None, f"missing required field {key!r}")
            return []
        value = data[key]
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise self.fail(table, key, f"expected a list of non-empty strings, got {value!r}")
        return list(value)

    def str_map(self, data: Dict[str, Any], table: KeyPath, key: str) -> Dict[str, str]:
        value = data.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self.fail(table, key, f"expected a table of strings, got {value!r}")
        return dict(value)

    def array_of_tables(self, data: Dict[str, Any], table: KeyPath, key: str) -> Tuple[Dict[str, Any], ...]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(table, key, f"expected an array of tables ([[{table_name(table + (key,))}]])")
        return tuple(value)
