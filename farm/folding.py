"""Results into the store in the tree's order: each tile's chunks fold in chunk order.

Groups hand results back in any order, and a tile's chunk n + 1 folds only after its chunk n
(``farm.tree``). ``Folds`` keeps a result that comes early in memory until the chunks before
it have folded, and lets a tile start at most ``window`` chunks past its last folded one, so
what waits is bounded: at most ``window - 1`` results a tile. A driver killed loses them (they
are rendered again on resume: nothing is counted twice); everything folded is in the store.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from farm.records import TileRecord
from farm.tree import fold, state_channels

if TYPE_CHECKING:
    from farm.planner import Task
    from farm.store import FrameStore

__all__ = ["Folds", "WINDOW"]

WINDOW = 8  # chunks of one tile that may be started past its last folded chunk


class Folds:
    """The tiles' records as the run changes them, and the results waiting for their turn.

    ``records`` (F, TY, TX) of ``farm.records.RECORD`` is the store's, verified
    (``FrameStore.verified_records``); ``spp`` is the job's, what a tail is cut at.
    """

    def __init__(self, store: FrameStore, records: np.ndarray, spp: int, window: int = WINDOW):
        self.store, self.records, self.spp, self.window = store, records, spp, window
        # tile (frame, ty, tx) -> {chunk: (task, value, weight)}
        self.waiting: dict[tuple[int, int, int], dict[int, tuple[Task, np.ndarray, np.ndarray]]] = {}

    def slot(self, task: Task) -> None:
        """None: results come back to the driver (``farm.results.Commits`` has workers write them)."""
        return None

    def flush(self) -> list[tuple[int, int, int]]:
        """Tiles whose next chunks may go after a commit: none (results fold as they arrive)."""
        return []

    def close(self) -> None:
        """Nothing to let go (results waiting in memory are rendered again on resume)."""

    def may_start(self, task: Task) -> bool:
        """Whether ``task``'s chunk is within its tile's window."""
        return task.chunk < int(self.records["folded"][task.line]) + self.window

    def held(self) -> int:
        """Results waiting for an earlier chunk of their tile."""
        return sum(len(w) for w in self.waiting.values())

    def accept(self, task: Task, value: np.ndarray, weight: np.ndarray) -> int:
        """A task's result (value (th, tw, 3), weight (th, tw), the tile's full size): stored
        now if its tile's earlier chunks are folded, with any results that waited on it, else
        kept until they are. Returns how many chunks of the tile folded."""
        line = task.line
        waiting = self.waiting.setdefault(line, {})
        waiting[task.chunk] = (task, value, weight)
        before = int(self.records["folded"][line])
        while (n := int(self.records["folded"][line])) in waiting:
            self._store(line, *waiting.pop(n))
        if not waiting:
            del self.waiting[line]
        return int(self.records["folded"][line]) - before

    def _store(self, line: tuple[int, int, int], task: Task, value: np.ndarray, weight: np.ndarray) -> None:
        """Fold a complete chunk into the tile's state, or keep the partial last one as its tail."""
        record = TileRecord.of(self.records[line])
        y0, y1, x0, x1 = self.store.tile_box(*line[1:])
        h, w = y1 - y0, x1 - x0
        if task.tail:
            self.records[line] = self.store.write_tail(line, record, value, weight, task.chunk_end, self.spp)
            return
        state = self.store.read_state(line) if record.folded else np.zeros((h, w, state_channels(self.store.channels - 3)), np.float32)
        assert state is not None  # (verified records: the tile's state reads back)
        self.records[line] = self.store.fold_tile(line, record, fold(state, value[:h, :w], weight[:h, :w]))
