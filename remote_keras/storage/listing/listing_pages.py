"""One page of a listing, and what lists pages: shared by the listers below.

`remote_keras.storage.listing.parallel_listing` lists whole trees from pages;
`remote_keras.storage.listing.s3_listing_pages.S3Lister` and `parallel_listing.LakeFSLister` are the
listers.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol


class Page(NamedTuple):
    """One listing page.

    Attributes:
        keys: Object keys, each with the listing root removed from its start.
        prefixes: Common prefixes (full), when listed with a delimiter.
        last: The greatest key or prefix on the page (full); `""` if empty.
        token: What asks for the next page; `None` on the last one.
    """

    keys: list[str]
    prefixes: list[str]
    last: str
    token: str | None


class Lister(Protocol):
    """Something that lists one page of keys under a prefix.

    Attributes:
        scope: What one lister covers (`("s3", bucket)`, `("lakefs", repository, ref)`).
    """

    scope: tuple[str, ...]

    def page(self, prefix: str, delimiter: str, after: str, token: str | None, root: str) -> Page:
        """Lists keys starting with `prefix`, after `after` (or from `token` on).

        Keys are returned without their leading `root` (a prefix of `prefix`).
        """
        ...
