"""Line numbers of the keys in a TOML text, for messages of the form `profile.toml:LINE: ...`.

tomllib reports positions only for syntax errors; a semantic error (a wrong type, an unknown key) found
after parsing needs the line of the key it is about. This scanner runs on text tomllib already accepted,
so it only has to find where each key path starts: table headers (`[a.b]`, `[[a.b]]`, counted per array),
`key = value` lines (bare, quoted and dotted keys), keys inside inline tables, and the elements of arrays
(indexed 0, 1, ...). Strings are skipped whole, so a `=` or `[` inside a value is never taken for a key.
"""
from __future__ import annotations

from typing import Dict, Tuple

KeyPath = Tuple[object, ...]  # str keys and int array indices, e.g. ("recipe", "git", 0, "commit")


class _Scanner:
    def __init__(self, text: str):
        self.s = text
        self.i = 0
        self.line = 1
        self.lines: Dict[KeyPath, int] = {}
        self.aot_count: Dict[KeyPath, int] = {}  # [[a.b]] seen so far, per header path

    # -- low level ----------------------------------------------------------------------------------------
    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def advance(self, n: int = 1) -> None:
        for _ in range(n):
            if self.i < len(self.s):
                if self.s[self.i] == "\n":
                    self.line += 1
                self.i += 1

    def skip_ws(self, newlines: bool) -> None:
        while True:
            c = self.peek()
            if c in (" ", "\t", "\r") or (newlines and c == "\n"):
                self.advance()
            elif newlines and c == "#":
                self.skip_comment()
            else:
                return

    def skip_comment(self) -> None:
        while self.peek() not in ("", "\n"):
            self.advance()

    def skip_string(self) -> str:
        """Skip a string at the cursor; returns its text for single-line keys (escapes not decoded)."""
        q = self.peek()
        if self.s.startswith(q * 3, self.i):
            self.advance(3)
            while self.i < len(self.s) and not self.s.startswith(q * 3, self.i):
                self.advance(2 if q == '"' and self.peek() == "\\" else 1)
            self.advance(3)
            while self.peek() == q:  # up to two quotes may close a multi-line string
                self.advance()
            return ""
        self.advance()
        start = self.i
        while self.peek() not in ("", q, "\n"):
            self.advance(2 if q == '"' and self.peek() == "\\" else 1)
        text = self.s[start:self.i]
        self.advance()
        return text

    def key(self) -> Tuple[str, ...]:
        """A (dotted) key at the cursor, up to but not including `=` or `]`."""
        parts = []
        while True:
            self.skip_ws(newlines=False)
            if self.peek() in ('"', "'"):
                parts.append(self.skip_string())
            else:
                start = self.i
                while self.peek() and (self.peek().isalnum() or self.peek() in "-_"):
                    self.advance()
                parts.append(self.s[start:self.i])
            self.skip_ws(newlines=False)
            if self.peek() != ".":
                return tuple(parts)
            self.advance()

    def mark(self, path: KeyPath, line: int) -> None:
        self.lines.setdefault(path, line)

    # -- grammar --------------------------------------------------------------------------------------------
    def document(self) -> None:
        table: KeyPath = ()
        while self.i < len(self.s):
            self.skip_ws(newlines=True)
            c = self.peek()
            if c == "":
                return
            if c == "[":
                table = self.header()
            else:
                self.keyval(table)
            self.skip_ws(newlines=False)
            if self.peek() == "#":
                self.skip_comment()
            while self.peek() not in ("", "\n"):  # tolerate what tomllib accepted and we did not model
                self.advance()

    def header(self) -> KeyPath:
        line = self.line
        array = self.peek(1) == "["
        self.advance(2 if array else 1)
        names = self.key()
        self.advance(2 if array else 1)
        path: KeyPath = ()
        for name in names[:-1]:  # a parent that is an array of tables means its latest element
            path = path + (name,)
            if path in self.aot_count:
                path = path + (self.aot_count[path] - 1,)
            self.mark(path, line)
        path = path + (names[-1],)
        self.mark(path, line)
        if array:
            index = self.aot_count.get(path, 0)
            self.aot_count[path] = index + 1
            path = path + (index,)
            self.mark(path, line)
        return path

    def keyval(self, table: KeyPath) -> None:
        line = self.line
        names = self.key()
        for k in range(1, len(names) + 1):
            self.mark(table + names[:k], line)
        self.skip_ws(newlines=False)
        if self.peek() == "=":
            self.advance()
        self.value(table + names)

    def value(self, path: KeyPath) -> None:
        self.skip_ws(newlines=False)
        c = self.peek()
        if c in ('"', "'"):
            self.skip_string()
        elif c == "[":
            self.advance()
            index = 0
            while True:
                self.skip_ws(newlines=True)
                if self.peek() in ("]", ""):
                    self.advance()
                    return
                self.mark(path + (index,), self.line)
                self.value(path + (index,))
                index += 1
                self.skip_ws(newlines=True)
                if self.peek() == ",":
                    self.advance()
        elif c == "{":
            self.advance()
            while True:
                self.skip_ws(newlines=False)
                if self.peek() in ("}", ""):
                    self.advance()
                    return
                self.keyval(path)
                self.skip_ws(newlines=False)
                if self.peek() == ",":
                    self.advance()
        else:
            while self.peek() not in ("", ",", "]", "}", "\n", "#"):
                self.advance()


def key_lines(text: str) -> Dict[KeyPath, int]:
    """1-based line of every key path (tables, keys, array elements) in `text`, which tomllib accepted.

    A path that appears twice (a table first implied, then opened) keeps its first line.
    """
    scanner = _Scanner(text)
    try:
        scanner.document()
    except RecursionError:  # nesting too deep for us; tomllib refuses such files before we get here
        pass
    return scanner.lines
