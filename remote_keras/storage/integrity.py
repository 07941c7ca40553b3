"""Checking the bytes read against the checksum the store sent with them.

A store's answer to a GET often carries a checksum of the whole object, at no
extra request: the ETag of a single-part S3 object (its MD5, unless the object
is encrypted with SSE-KMS or SSE-C), S3's `x-amz-checksum-*` headers, GCS's
`x-goog-hash` (CRC32C and MD5), Azure's and HTTP's `Content-MD5`. The loaders
hand that checksum over with the body (`remote_keras.storage.loaders.checked_reads`);
`verify` hashes the body and raises `ChecksumMismatchError` when they differ.

A mismatch is transient (bytes damaged on the way, by a proxy, a NIC or a
middlebox): `RetryPolicy` reads the file again, at most `MISMATCH_ATTEMPTS`
times, since a body that never matches is damaged at rest or its ETag is no
MD5 (SSE-KMS, SSE-C), and then raises the error, or skips the sample with
`on_error="skip"`.

What is checked, per store and loader (a read with nothing to check counts
as `unverified` in `LoaderStats`; local files count as neither):

- S3, fsspec loader: `x-amz-checksum-crc32c`, `-crc32`, `-sha1`, `-sha256`
  when sent (not composite ones), else the ETag of single-part objects (not
  of SSE-KMS or SSE-C objects, whose ETag is no MD5; multipart ETags end
  in `-N` and are not checked).
- S3, obstore loader: the ETag of single-part objects. obstore exposes no
  other header, so SSE-KMS or SSE-C cannot be told apart: for such objects
  pass `verify_checksums=False`.
- GCS, fsspec loader: `x-goog-hash` (CRC32C, else MD5); obstore: nothing.
- Azure, fsspec loader: `Content-MD5`, when set at upload; obstore: nothing.
- HTTP(S): `Content-MD5`, `x-goog-hash` or `x-amz-checksum-*`, when sent.
- lakeFS, through its server: the response's ETag, lakeFS's checksum of the
  object (an MD5, unless multipart); presigned: the store's headers, as for
  HTTP(S), plus its ETag when it is an MD5 (not for SSE-KMS or SSE-C).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import importlib.util
import re
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from remote_keras import errors
from remote_keras.errors import ChecksumMismatchError

# Reads of one file whose body fails its checksum, at most: a body that never matches is
# damaged at rest, or its ETag is not an MD5; random damage on the way (2% of bodies in
# the fault trial) fails 8 times in a row once in 4e13 reads.
MISMATCH_ATTEMPTS = 8

_HEX_MD5 = re.compile(r"[0-9a-fA-F]{32}")
# botocore's response fields and the headers they come from, in order of preference
# (cheapest first); CRC64NVME needs awscrt and is left out.
_S3_FIELDS = (
    ("ChecksumCRC32C", "crc32c"),
    ("ChecksumCRC32", "crc32"),
    ("ChecksumSHA1", "sha1"),
    ("ChecksumSHA256", "sha256"),
)
_KMS = ("aws:kms", "aws:kms:dsse")


def _crc32c_function() -> Callable[[bytes], int] | None:
    """A hardware CRC32C, if `google-crc32c` (with its C extension) or `crc32c` is installed."""
    if importlib.util.find_spec("google_crc32c") is not None:
        import google_crc32c

        if getattr(google_crc32c, "implementation", "") == "c":
            return google_crc32c.value
    if importlib.util.find_spec("crc32c") is not None:
        import crc32c

        return crc32c.crc32c
    return None


_CRC32C = _crc32c_function()

# algorithm -> the body's checksum as lower-case hex.
_HASHERS: dict[str, Callable[[bytes], str]] = {
    "md5": lambda data: hashlib.md5(data, usedforsecurity=False).hexdigest(),
    "sha1": lambda data: hashlib.sha1(data, usedforsecurity=False).hexdigest(),
    "sha256": lambda data: hashlib.sha256(data).hexdigest(),
    "crc32": lambda data: f"{zlib.crc32(data):08x}",
}
if _CRC32C is not None:
    _HASHERS["crc32c"] = lambda data: f"{_CRC32C(data):08x}"  # type: ignore[misc]


@dataclasses.dataclass(frozen=True)
class Checksum:
    """A whole-object checksum a store sent with a body.

    Attributes:
        algorithm: `"md5"`, `"crc32c"`, `"crc32"`, `"sha1"` or `"sha256"`.
        value: The expected checksum, lower-case hex.
        source: Where it came from, e.g. `"ETag"` or `"x-goog-hash"`.
    """

    algorithm: str
    value: str
    source: str


def mismatch(url: str, checksum: Checksum, got: str) -> ChecksumMismatchError:
    """The error for a body of `url` whose checksum is `got` instead of `checksum.value`."""
    shown = errors.redact(url)
    hint = ""
    if checksum.source.endswith("ETag"):
        hint = (
            " (if the objects are encrypted with SSE-KMS or SSE-C, their ETag is not an MD5: "
            "pass verify_checksums=False)"
        )
    error = ChecksumMismatchError(
        shown,
        f"Checksum mismatch reading {shown!r}: expected {checksum.algorithm} {checksum.value} "
        f"({checksum.source}), got {got}{hint}",
    )
    error.algorithm, error.expected, error.got = checksum.algorithm, checksum.value, got
    error.source = checksum.source
    return error


def attempts_allowed(result: BaseException, attempts: int | None) -> float:
    """Reads allowed for a file whose last read failed with `result`, given the policy's cap."""
    limit = float("inf") if attempts is None else attempts
    return min(limit, MISMATCH_ATTEMPTS) if isinstance(result, ChecksumMismatchError) else limit


def verify(url: str, data: bytes, checksum: Checksum | None) -> bool:
    """Checks `data` against `checksum`.

    Args:
        url: What was read, for the error.
        data: The body received.
        checksum: What the store sent, or `None`.

    Returns:
        `True` if the body was checked and matches, `False` if there was
        nothing to check it against (or no way to compute the algorithm).

    Raises:
        ChecksumMismatchError: the body does not match.
    """
    if checksum is None:
        return False
    hasher = _HASHERS.get(checksum.algorithm)
    if hasher is None:
        return False
    got = hasher(data)
    if got != checksum.value:
        raise mismatch(url, checksum, got)
    return True


def _best(candidates: list[Checksum]) -> Checksum | None:
    usable = [c for c in candidates if c.algorithm in _HASHERS]
    order = ("crc32c", "crc32", "md5", "sha1", "sha256")
    return min(usable, key=lambda c: order.index(c.algorithm), default=None)


def _b64_hex(value: Any) -> str | None:
    """Base64 of a checksum's bytes as hex; `None` for composite (`-N`) or unreadable values."""
    if not isinstance(value, str) or "-" in value or not value.strip():
        return None
    try:
        return base64.b64decode(value.strip(), validate=True).hex()
    except (binascii.Error, ValueError):
        return None


def from_etag(etag: Any, source: str = "ETag") -> Checksum | None:
    """The MD5 an S3 ETag holds: 32 hex digits, quoted or not; `None` for multipart (`-N`) ones.

    `source` names where it came from, in the checksum and its mismatch errors.
    """
    if not isinstance(etag, str):
        return None
    value = etag.strip().removeprefix("W/").strip('"')
    return Checksum("md5", value.lower(), source) if _HEX_MD5.fullmatch(value) else None


def from_s3_response(response: Mapping[str, Any]) -> Checksum | None:
    """The checksum of a botocore `get_object` response: `x-amz-checksum-*`, else the ETag.

    The ETag is not used for objects encrypted with SSE-KMS or SSE-C (it is
    not their MD5); composite (multipart) checksums are not used either.
    """
    candidates = []
    if str(response.get("ChecksumType", "")).upper() != "COMPOSITE":
        for field, algorithm in _S3_FIELDS:
            value = _b64_hex(response.get(field))
            if value is not None:
                candidates.append(Checksum(algorithm, value, f"x-amz-checksum-{algorithm}"))
    encrypted = response.get("ServerSideEncryption") in _KMS or response.get("SSECustomerAlgorithm")
    etag = None if encrypted else from_etag(response.get("ETag"))
    return _best(candidates + ([etag] if etag else []))


def from_headers(headers: Mapping[str, Any], etag: str | None = None) -> Checksum | None:
    """The checksum in HTTP response headers: `x-goog-hash`, `x-amz-checksum-*`, `Content-MD5`.

    Bodies with a `Content-Encoding` (other than `identity`) are not checked:
    clients decompress them, while the checksum is of the encoded bytes.

    Args:
        headers: The response's headers.
        etag: Where the server's ETag is an MD5 when it has 32 hex digits (an
            object store's, lakeFS's), the source to name for it, e.g.
            `"ETag"`; `None` (the default): ETags are opaque. Not used when
            the headers say SSE-KMS or SSE-C.
    """
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    for name in ("content-encoding", "x-goog-stored-content-encoding"):
        if lower.get(name, "identity").strip().lower() not in ("identity", ""):
            return None
    candidates = []
    for part in lower.get("x-goog-hash", "").split(","):
        algorithm, _, value = part.strip().partition("=")
        hexed = _b64_hex(value) if algorithm in ("crc32c", "md5") else None
        if hexed is not None:
            candidates.append(Checksum(algorithm, hexed, "x-goog-hash"))
    if lower.get("x-amz-checksum-type", "").upper() != "COMPOSITE":
        for _, algorithm in _S3_FIELDS:
            hexed = _b64_hex(lower.get(f"x-amz-checksum-{algorithm}"))
            if hexed is not None:
                candidates.append(Checksum(algorithm, hexed, f"x-amz-checksum-{algorithm}"))
    md5 = _b64_hex(lower.get("content-md5"))
    if md5 is not None and len(md5) == 32:
        candidates.append(Checksum("md5", md5, "Content-MD5"))
    encrypted = lower.get("x-amz-server-side-encryption") in _KMS or (
        "x-amz-server-side-encryption-customer-algorithm" in lower
    )
    tag = from_etag(lower.get("etag"), etag) if etag and not encrypted else None
    return _best(candidates + ([tag] if tag else []))


def from_content_md5(value: Any) -> Checksum | None:
    """Azure's `Content-MD5` as the SDK gives it (raw bytes) or as the header (base64)."""
    hexed = bytes(value).hex() if isinstance(value, (bytes, bytearray)) else _b64_hex(value)
    return Checksum("md5", hexed, "Content-MD5") if hexed and len(hexed) == 32 else None
