"""Linear-time stand-ins for the few SQLite built-ins that can stall one VM instruction.

The sandbox stops runaway statements with a progress handler, which SQLite only calls between
VM instructions. A few built-in functions of SQLite 3.40 can spend seconds to minutes inside
ONE instruction (measured with arguments under the 1 MB length limit):
- instr(X, Y) and replace(X, Y, Z) compare with memcmp at every offset: quadratic, ~4 s;
- trim/ltrim/rtrim(X, Y) test every character of X against every character of Y: quadratic,
  minutes for a 100 k-character set;
- printf('%.*c', N, 'x') (and format) loops N times even after the output has passed the length
  limit, then returns NULL: ~7 s for N = 2^31.
`GuardedFunctions` registers replacements on the sandbox connection. Text (and blob) arguments
are handled with Python's linear string methods and give SQLite's results exactly (a
randomized test compares them with the built-ins); other argument types go to SQLite's own
function on a private in-memory connection. printf/format always use SQLite's own function,
after refusing a width or precision beyond the length limit ("string or blob too big").
It does not make these functions fast per call: a Python call costs ~1 us where the
built-in costs ~0.1 us, which only matters for queries calling them on many rows.
"""

from __future__ import annotations

import math
import re
import sqlite3

_INT_PREFIX = re.compile(r"\s*([+-]?)(\d+)")
_PRINTF_FLAGS = frozenset("-+ #!0,")
_INT64_MAX, _INT64_MIN = 2**63 - 1, -(2**63)


def _sqlite_int64(value) -> int:
    """sqlite3_value_int64() of a value, as printf's '*' reads it: floats truncate and
    saturate, text and blobs give their leading integer (or 0), NULL gives 0."""
    if type(value) is int:
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return 0
        if math.isinf(value):
            return _INT64_MAX if value > 0 else _INT64_MIN
        return max(_INT64_MIN, min(_INT64_MAX, int(value)))
    if isinstance(value, (str, bytes)):
        match = _INT_PREFIX.match(value.decode("latin-1") if isinstance(value, bytes) else value)
        if not match:
            return 0
        number = int(match.group(2)) * (-1 if match.group(1) == "-" else 1)
        return max(_INT64_MIN, min(_INT64_MAX, number))
    return 0


def _c_int(value: int) -> int:
    """The C cast (int) of an int64: keep the low 32 bits, two's complement."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def printf_extent(fmt: str, args: tuple) -> int:
    """The largest width or precision SQLite's printf would use for `fmt` with `args`
    (mirrors the flag/width/precision parsing of sqlite3_str_vappendf)."""
    largest, used, i, n = 0, 0, 0, len(fmt)
    while True:
        i = fmt.find("%", i)
        if i < 0 or i + 1 >= n:
            return largest
        i += 1
        while i < n:
            c = fmt[i]
            if c in _PRINTF_FLAGS:
                i += 1
            elif "1" <= c <= "9" or c == "*":
                if c == "*":
                    width = _c_int(_sqlite_int64(args[used])) if used < len(args) else 0
                    used += 1
                    width = -width if -2147483647 <= width < 0 else (0 if width < 0 else width)
                    i += 1
                else:
                    j = i
                    while j < n and "0" <= fmt[j] <= "9":
                        j += 1
                    width = int(fmt[i:j]) & 0x7FFFFFFF
                    i = j
                largest = max(largest, width)
            elif c == ".":
                i += 1
                if i < n and fmt[i] == "*":
                    precision = _c_int(_sqlite_int64(args[used])) if used < len(args) else 0
                    used += 1
                    precision = abs(precision) if precision >= -2147483647 else 0
                    i += 1
                else:
                    j = i
                    while j < n and "0" <= fmt[j] <= "9":
                        j += 1
                    precision = int(fmt[i:j] or "0") & 0x7FFFFFFF
                    i = j
                largest = max(largest, precision)
            elif c == "l":
                i += 1
            else:
                break
        if i >= n:
            return largest
        kind = fmt[i]
        i += 1
        if kind not in "%n":
            used += 1  # the value this conversion formats


class GuardedFunctions:
    """Linear-time (or argument-checked) stand-ins for instr, replace, trim/ltrim/rtrim with a
    character set, and printf/format, registered on the sandbox connection."""

    def __init__(self, max_length: int):
        self.max_length = max_length
        self.error: str | None = None  # why the last refusal happened, for the error text
        self._native: sqlite3.Connection | None = None

    def install(self, conn: sqlite3.Connection) -> None:
        conn.create_function("instr", 2, self.instr, deterministic=True)
        conn.create_function("replace", 3, self.replace, deterministic=True)
        conn.create_function("trim", 2, self.trim, deterministic=True)
        conn.create_function("ltrim", 2, self.ltrim, deterministic=True)
        conn.create_function("rtrim", 2, self.rtrim, deterministic=True)
        conn.create_function("printf", -1, self.printf, deterministic=True)
        conn.create_function("format", -1, self.format, deterministic=True)

    def close(self) -> None:
        if self._native is not None:
            self._native.close()

    def native(self, name: str, *args):
        """SQLite's own `name(*args)`, on a private connection with the same length limit."""
        if self._native is None:
            self._native = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._native.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.max_length)
        placeholders = ", ".join("?" * len(args))
        try:
            return self._native.execute(f"SELECT {name}({placeholders})", args).fetchone()[0]
        except sqlite3.Error as exc:  # e.g. "string or blob too big": report SQLite's words
            self.refuse(str(exc))

    def refuse(self, message: str):
        self.error = message
        raise ValueError(message)

    def instr(self, haystack, needle):
        kinds = (type(haystack), type(needle))
        if kinds == (str, str) or kinds == (bytes, bytes):
            return haystack.find(needle) + 1  # characters (text) or bytes (blobs), 1-based
        if haystack is None or needle is None:
            return None
        return self.native("instr", haystack, needle)

    def replace(self, text, pattern, replacement):
        if type(text) is str and type(pattern) is str and type(replacement) is str:
            if not pattern or pattern[0] == "\x00":  # SQLite reads the pattern as a C string
                return text
            # Refuse before building it: the result of replace() can grow multiplicatively.
            count = text.count(pattern)
            if len(text) + count * (len(replacement) - len(pattern)) > self.max_length:
                self.refuse("string or blob too big")
            result = text.replace(pattern, replacement)
            # The limit is in UTF-8 bytes; only encode when the characters could exceed it.
            if len(result) * 4 > self.max_length:
                if len(result.encode("utf-8", "surrogatepass")) > self.max_length:
                    self.refuse("string or blob too big")
            return result
        return self.native("replace", text, pattern, replacement)

    def _strip(self, name: str, text, chars, left: bool, right: bool):
        if type(text) is str and type(chars) is str:
            chars = chars.split("\x00", 1)[0]  # SQLite reads the character set as a C string
            if len(chars) <= 64:  # str.strip scans `chars` for every stripped character
                if left and right:
                    return text.strip(chars)
                return text.lstrip(chars) if left else text.rstrip(chars)
            charset = set(chars)
            start, end = 0, len(text)
            while left and start < end and text[start] in charset:
                start += 1
            while right and end > start and text[end - 1] in charset:
                end -= 1
            return text[start:end]
        if text is None or chars is None:
            return None
        return self.native(name, text, chars)

    def trim(self, text, chars):
        return self._strip("trim", text, chars, True, True)

    def ltrim(self, text, chars):
        return self._strip("ltrim", text, chars, True, False)

    def rtrim(self, text, chars):
        return self._strip("rtrim", text, chars, False, True)

    def _format(self, name: str, args: tuple):
        if args and type(args[0]) is str and "%" in args[0]:
            if printf_extent(args[0], args[1:]) > self.max_length:
                self.refuse(f"string or blob too big: {name}() width or precision over {self.max_length}")
        return self.native(name, *args)

    def printf(self, *args):
        return self._format("printf", args)

    def format(self, *args):
        return self._format("format", args)
