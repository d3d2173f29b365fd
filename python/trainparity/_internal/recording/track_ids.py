"""track_ids: a loader wrapper that records the sample IDs of every batch it yields (record_ids).

Wrap the loader where the data is, not where the training loop thinks it
is: whatever the loader, its sampler, its workers or a restored state yield
is what gets recorded, per rank, per epoch, one batch per record. Outside a
check (no directory given and $TRAINPARITY_IDS_DIR unset) `track_ids`
returns the loader itself, so a script can wrap unconditionally.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from trainparity._internal.recording.record_ids import IDS_DIR_VARIABLE, append_batch, record_key

__all__ = ["TrackedLoader", "track_ids"]

B = TypeVar("B")


class TrackedLoader(Generic[B]):
    """Iterates `loader` and records `id_of(batch)` for each batch before yielding it.

    Every other attribute (`state_dict`, `load_state_dict`, `sampler`,
    `set_epoch`, …) is the wrapped loader's, so a stateful loader is saved
    and restored through the wrapper as through itself.
    """

    def __init__(
        self,
        loader: Any,
        id_of: Callable[[B], Any],
        epoch: int | Callable[[], int],
        key: tuple[str, int],
    ) -> None:
        self.loader = loader
        self.id_of = id_of
        self.epoch = epoch
        self.key = key

    def __iter__(self) -> Iterator[B]:
        # The epoch is read once per pass: a pass is one epoch's share of the data.
        epoch = self.epoch() if callable(self.epoch) else self.epoch
        key, id_of = self.key, self.id_of
        for batch in self.loader:
            append_batch(key, epoch, id_of(batch))
            yield batch

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":  # not yet set (unpickling): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.loader, name)


def track_ids(
    loader: Any,
    *,
    id_of: Callable[[Any], Any],
    epoch: int | Callable[[], int],
    directory: str | os.PathLike[str] | None = None,
    rank: int | None = None,
) -> Any:
    """`loader`, recording the sample IDs of every batch it yields, with the epoch and batch index.

    `id_of(batch)` returns the batch's stable sample IDs (a tensor, NumPy
    array, iterable of ints, or one int for a loader that yields single
    samples). `epoch` is an int, or a callable read at the start of each pass
    (e.g. `lambda: trainer.current_epoch`). Each yielded batch is one record
    (`rank{R}.epoch{E}.ids` and `.batches` in `directory`, default
    $TRAINPARITY_IDS_DIR; `rank` as in `record_ids`). With neither directory
    set, returns `loader` unchanged: nothing is recorded and nothing costs.

    A CPU tensor of IDs is copied with the next few dozen batches' (one join
    is cheaper than one copy per batch): don't change it in place meanwhile.
    """
    if not callable(id_of):
        raise TypeError(
            f"id_of must be a callable taking a batch and returning its sample IDs, not {id_of!r}"
        )
    if not callable(epoch) and (type(epoch) is not int or epoch < 0):
        raise ValueError(
            f"epoch must be a non-negative int or a callable returning one, not {epoch!r}"
        )
    if directory is None:
        directory = os.environ.get(IDS_DIR_VARIABLE)
        if not directory:
            return loader
    return TrackedLoader(loader, id_of, epoch, record_key(directory, rank))
