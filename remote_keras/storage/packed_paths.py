"""Compact forms of what an iterator keeps per object, for datasets of a million files.

- `PrefixedPaths`: the URLs an iterator reads, as one shared prefix plus the file names the
  iterator holds anyway (`filenames`), instead of a second list of full URLs (about 100
  bytes per object saved).
- `AddressTable`: one folder's presigned addresses (`path -> URL`), packed into byte
  strings with offset arrays: the folder's common URL prefix is kept once, runs of
  lowercase hex digits (blob ids, signatures) become raw bytes, half their size, and the
  addresses are deflated in blocks of `BLOCK`, each against the folder's first address as
  a preset dictionary, so text that every address repeats (an S3 URL's credential, date and
  algorithm) costs a few bytes. About 70 bytes per object for the stand-in's addresses and
  80 for S3-style ones, instead of 300 to 500 in a dict of strings.
"""

from __future__ import annotations

import bisect
import os
import re
import zlib
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import accumulate
from typing import Any, overload


class _Strings(Sequence[str]):
    """A read-only sequence of strings that compares equal to a list of the same strings."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, _Strings)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(len(self)))]
        return self._item(index)

    def _item(self, index: int) -> str:
        """The string at `index` (negative counts from the end; out of range raises IndexError)."""
        raise NotImplementedError


class PrefixedPaths(_Strings):
    """`prefix + name` for each name of `names`, computed on access (a read-only sequence).

    Compares equal to a list of the same strings. `names` is held, not copied.
    """

    __slots__ = ("_names", "prefix")

    def __init__(self, prefix: str, names: Sequence[str]) -> None:
        self.prefix = prefix
        self._names = names

    @property
    def names(self) -> Sequence[str]:
        """The names the paths are made of (held, not copied)."""
        return self._names

    def __len__(self) -> int:
        return len(self._names)

    def _item(self, index: int) -> str:
        return self.prefix + self._names[index]

    def __iter__(self) -> Iterator[str]:
        prefix = self.prefix
        return (prefix + name for name in self._names)

    def __repr__(self) -> str:
        return f"PrefixedPaths({self.prefix!r}, {len(self)} names)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PrefixedPaths, (self.prefix, self._names))


class PackedNames(_Strings):
    """Strings held as one joined text and the end of each in it (a read-only sequence).

    About one byte per character and four per string, where a list of `str`
    costs about 60 bytes more per string (object header and pointer): 28 MB
    less for 400,000 file names. Items are sliced out on access. Compares
    equal to a list of the same strings.

    Args:
        names: The strings, in order.
    """

    __slots__ = ("_ends", "_text")

    def __init__(self, names: Iterable[str] = ()) -> None:
        names = names if isinstance(names, (list, tuple)) else list(names)
        self._text = "".join(names)
        self._ends = array("I" if len(self._text) < 2**32 else "Q", accumulate(map(len, names)))

    def __len__(self) -> int:
        return len(self._ends)

    def _item(self, index: int) -> str:
        ends = self._ends
        end = ends[index]  # raises IndexError as a list does
        if index < 0:
            index += len(ends)
        return self._text[ends[index - 1] if index else 0 : end]

    def __iter__(self) -> Iterator[str]:
        text, start = self._text, 0
        for end in self._ends:
            yield text[start:end]
            start = end

    def __repr__(self) -> str:
        return f"PackedNames({len(self)} names)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_packed_names, (self._text, self._ends))


def _packed_names(text: str, ends: array) -> PackedNames:
    names = PackedNames()
    names._text, names._ends = text, ends
    return names


def common_prefix(paths: Sequence[str], names: Sequence[str]) -> str | None:
    """The `prefix` for which `paths[i] == prefix + names[i]` for all `i`, else `None`."""
    if len(paths) != len(names) or not paths:
        return None
    first, name = paths[0], names[0]
    if not first.endswith(name):
        return None
    prefix = first[: len(first) - len(name)]
    if all(p == prefix + n for p, n in zip(paths, names)):
        return prefix
    return None


_HEX = re.compile(rb"(?:[0-9a-f]{2}){8,127}")  # 16 to 254 hex digits
_MARK = 0  # never in a URL (ASCII text): the start of a packed hex run


def _pack(text: str) -> bytes:
    return _HEX.sub(
        lambda m: bytes((_MARK, len(m[0]) // 2)) + bytes.fromhex(m[0].decode()),
        text.encode(),
    )


def _unpack(data: bytes) -> str:
    parts, start = [], 0
    while True:
        mark = data.find(_MARK, start)
        if mark < 0:
            parts.append(data[start:].decode())
            return "".join(parts)
        parts.append(data[start:mark].decode())
        size = data[mark + 1]
        parts.append(data[mark + 2 : mark + 2 + size].hex())
        start = mark + 2 + size


# Addresses deflated together: a lookup inflates one block (about 1.5 kB for the stand-in's).
BLOCK = 16
# Raw deflate with a 4 kB window (a block and its preset dictionary fit) and little state.
_WBITS, _MEM_LEVEL = -12, 5


class AddressTable(Mapping[str, str]):
    """A read-only `path -> address` mapping for one folder's listing, held compactly.

    Args:
        addresses: `path -> address` (any order); paths must not contain NUL.
    """

    __slots__ = (
        "_address_ends",
        "_base",
        "_block_ends",
        "_blocks",
        "_dictionary",
        "_name_ends",
        "_names",
        "_prefix",
    )

    def __init__(self, addresses: Mapping[str, str]) -> None:
        paths = sorted(addresses)
        self._prefix = os.path.commonprefix(paths) if paths else ""
        urls = [addresses[p] for p in paths]
        self._base = os.path.commonprefix(urls) if urls else ""
        cut, base = len(self._prefix), len(self._base)
        names = [p[cut:].encode() for p in paths]
        packed = [_pack(u[base:]) for u in urls]
        self._names, self._name_ends = b"".join(names), _ends(names)
        self._address_ends = _ends(packed)  # in the inflated concatenation
        self._dictionary = packed[0] if packed else b""
        blocks = [
            self._deflate(b"".join(packed[start : start + BLOCK]))
            for start in range(0, len(packed), BLOCK)
        ]
        self._blocks, self._block_ends = b"".join(blocks), _ends(blocks)

    def __len__(self) -> int:
        return len(self._name_ends)

    def __iter__(self) -> Iterator[str]:
        for i in range(len(self)):
            yield self._prefix + self._name(i).decode()

    def __getitem__(self, path: str) -> str:
        if not path.startswith(self._prefix):
            raise KeyError(path)
        wanted = path[len(self._prefix) :].encode()
        i = bisect.bisect_left(_Names(self), wanted)
        if i == len(self) or self._name(i) != wanted:
            raise KeyError(path)
        first = i - i % BLOCK  # the block's first entry
        block = self._inflate(i // BLOCK)
        offset = self._address_ends[first - 1] if first else 0
        start = (self._address_ends[i - 1] if i else 0) - offset
        return self._base + _unpack(block[start : self._address_ends[i] - offset])

    def _deflate(self, data: bytes) -> bytes:
        deflate = zlib.compressobj(6, zlib.DEFLATED, _WBITS, _MEM_LEVEL, zdict=self._dictionary)
        return deflate.compress(data) + deflate.flush()

    def _inflate(self, block: int) -> bytes:
        start = self._block_ends[block - 1] if block else 0
        inflate = zlib.decompressobj(_WBITS, zdict=self._dictionary)
        return inflate.decompress(self._blocks[start : self._block_ends[block]])

    def _name(self, i: int) -> bytes:
        start = self._name_ends[i - 1] if i else 0
        return self._names[start : self._name_ends[i]]

    def nbytes(self) -> int:
        """Bytes held by the packed data (offsets included)."""
        arrays = (self._name_ends, self._address_ends, self._block_ends)
        ends = sum(a.itemsize * len(a) for a in arrays)
        return len(self._names) + len(self._blocks) + len(self._dictionary) + ends


class _Names(Sequence[bytes]):
    """The sorted names of an `AddressTable`, as `bisect` reads them."""

    __slots__ = ("_table",)

    def __init__(self, table: AddressTable) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def __getitem__(self, i):
        return self._table._name(i)


def _ends(parts: list[bytes]) -> array:
    """The end offset of each part in their concatenation (4 bytes each when they fit)."""
    total, ends = 0, []
    for part in parts:
        total += len(part)
        ends.append(total)
    return array("I" if total < 2**32 else "Q", ends)
