"""`Resumption`: the rest of an interrupted epoch, as each Keras line asks for it."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Resumption:
    """How an iterator serves the rest of an interrupted epoch.

    Attributes:
        epoch: The interrupted epoch.
        positions: For each index Keras asks for in that epoch, the batch
            (its position in the epoch's order) to return; one entry per
            batch not consumed yet.
    """

    epoch: int
    positions: tuple[int, ...]
