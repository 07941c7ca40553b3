"""Keras 3.8 to 3.15 (and Keras 2's shuffle): `fit(shuffle=True)`'s order from `random`.

Keras's `PyDataset` adapter (and its worker queue) asks for an epoch's batch
indices in the order `random.shuffle(list(range(num_batches)))` leaves them,
drawn from Python's global `random` when the pass starts
(`keras/src/trainers/data_adapters/py_dataset_adapter.py`: `_finite_generator`,
line 261 of Keras 3.15.1, and `OrderedEnqueuer._run`, line 625; Keras 3.8 to
3.15), and in order with
`fit(shuffle=False)`. To resume an epoch mid-way in the order the
uninterrupted run used, a backup keeps the `random` state the epoch's order
was drawn from, and the restored run sets it again before `fit` draws
(`capture_random`, `restore_random`: the only reads and writes of Python's
global `random` state in the package are in this layer).

`FitOrder` also tells which of the two `fit` does without reading its
arguments: it compares Python's `random` state when training begins with
the state after the first pass started. This assumes nothing else in the
process draws from Python's `random` during `fit`; when something does, the
order cannot be replayed and `FitOrder` says so with a warning. Keras 3.16's
rule is `remote_keras.keras_lines.keras3_16`.
"""

from __future__ import annotations

import random
import warnings

from remote_keras.keras_lines.resumption import Resumption


def json_random_state(state: tuple) -> list:
    """Python's `random.getstate()` as JSON-serialisable lists."""
    version, internal, gauss = state
    return [version, list(internal), gauss]


def python_random_state(saved: list) -> tuple:
    """The inverse of `json_random_state`."""
    version, internal, gauss = saved
    return (version, tuple(internal), gauss)


def random_state() -> tuple:
    """Python's global `random` state now (what `fit` draws its next order from)."""
    return random.getstate()


def set_random_state(state: tuple | list) -> None:
    """Sets Python's global `random` state, for `fit` to draw the order it drew from it.

    Args:
        state: A `random.getstate()` tuple, or its JSON form (`json_random_state`).
    """
    random.setstate(python_random_state(state) if isinstance(state, list) else state)


def advance_random(count: int, epochs: int) -> None:
    """Moves Python's `random` on by `epochs` draws of `fit(shuffle=True)`'s order of `count`."""
    state = random.getstate()
    for _ in range(epochs):
        state = shuffled(count, state)[1]
    random.setstate(state)


def shuffled(count: int, state: tuple) -> tuple[list[int], tuple]:
    """What `random.shuffle(list(range(count)))` gives from `state`, and the state after it."""
    generator = random.Random()  # noqa: S311 - replays Keras's (non-cryptographic) draw
    generator.setstate(state)
    order = list(range(count))
    generator.shuffle(order)
    return order, generator.getstate()


def fit_resumption(
    epoch: int, done: int, batches: int, fit_shuffle: bool, state: tuple | None
) -> Resumption:
    """The batches still to read in an interrupted epoch, in the order `fit` will ask for them.

    Args:
        epoch: The interrupted epoch.
        done: Batches of it already trained on.
        batches: Batches per epoch.
        fit_shuffle: Whether `fit` shuffles batch order (`fit(shuffle=...)`).
        state: Python's `random` state the epoch's order was drawn from
            (needed when `fit_shuffle`); the resumed epoch's own draw is
            made from it too (the caller sets it before `fit` draws).

    Returns:
        The `Resumption`: `fit` asks for indices `0 .. batches - done - 1`,
        shuffled from `state` when `fit_shuffle`; each maps to the batch the
        uninterrupted run would have trained at that step.
    """
    if not fit_shuffle:
        return Resumption(epoch, tuple(range(done, batches)))
    if state is None:
        raise ValueError("fit(shuffle=True) resumption needs the Python `random` state")
    remaining = shuffled(batches, state)[0][done:]
    asked, _ = shuffled(len(remaining), state)
    positions = [0] * len(remaining)
    for step, index in enumerate(asked):
        positions[index] = remaining[step]
    return Resumption(epoch, tuple(positions))


class FitOrder:
    """Python's `random` state each epoch's batch order is drawn from, during one `fit`.

    Args:
        first_epoch: The epoch `fit` trains first.
        state: Python's `random` state when training begins.
    """

    def __init__(self, first_epoch: int, state: tuple) -> None:
        self.states = {first_epoch: state}
        self.shuffle: bool | None = None  # unknown until the first pass drew

    def observe(self, epoch: int, batches: int, whole: int) -> None:
        """Tells `fit(shuffle=...)` from `random`'s state once a pass of `batches` began.

        Call it after a training step of epoch `epoch` (`whole` batches per
        epoch); passes of fewer than 2 batches draw nothing and tell nothing.
        """
        if self.shuffle is not None or batches < 2:
            return
        now = random.getstate()
        if now == self.states[min(self.states)]:
            self.shuffle = False
        elif now == shuffled(batches, self.state(epoch, whole))[1]:
            self.shuffle = True
        else:
            self.shuffle = True
            warnings.warn(
                "Something other than Keras drew from Python's `random` while `fit` started "
                f"epoch {epoch}: a resumed epoch cannot replay the batch order "
                "`fit(shuffle=True)` drew, so after a restore it reads the batches it has "
                "left in another order than the uninterrupted run.",
                stacklevel=2,
            )

    def state(self, epoch: int, batches: int) -> tuple:
        """Python's `random` state epoch `epoch`'s order is drawn from (`batches` per epoch).

        Until `observe` has told, `fit(shuffle=True)` (Keras's default) is assumed.
        """
        known = max(e for e in self.states if e <= epoch)
        state = self.states[known]
        for e in range(known, epoch):
            if self.shuffle is not False:
                state = shuffled(batches, state)[1]
            if self.shuffle is not None:
                self.states[e + 1] = state
        return state
