"""Which offsets may be committed when many records of a partition complete out of order."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aiokafka.structs import TopicPartition


@dataclass
class _PartitionState:
    # Offsets taken and not yet behind the commit position, in the order taken (ascending).
    # The left end is popped once it is done, so the deque stays as long as the distance
    # between the commit position and the newest record.
    taken: deque[int] = field(default_factory=deque)
    pending: set[int] = field(default_factory=set)  # taken and not done yet
    newest: int = -1  # highest offset ever taken
    position: int = 0  # every taken offset below this is done
    committed: int = 0  # what was last reported committed (or where tracking began)

    def advance(self) -> int:
        while self.taken and self.taken[0] not in self.pending:
            self.taken.popleft()
        self.position = self.taken[0] if self.taken else self.newest + 1
        return self.position


class OffsetTracker:
    """Per partition, the highest offset below which every taken record is done.

    ``track`` a record when it is taken from the consumer, ``done`` it when its effects are
    durable, and commit what ``committable`` returns. Offsets need not be contiguous (compacted
    topics and transaction markers leave gaps): only tracked offsets count. Pure bookkeeping,
    no I/O; not thread-safe (one event loop owns it).
    """

    def __init__(self) -> None:
        self._partitions: dict[TopicPartition, _PartitionState] = {}

    def track(self, tp: TopicPartition, offset: int) -> bool:
        """Record that ``offset`` was taken. Returns False, and tracks nothing, when the
        offset is not beyond the newest one taken on ``tp``: a re-delivery of a record
        already in hand."""
        state = self._partitions.get(tp)
        if state is None:
            state = _PartitionState(newest=offset - 1, position=offset, committed=offset)
            self._partitions[tp] = state
        if offset <= state.newest:
            return False
        state.taken.append(offset)
        state.pending.add(offset)
        state.newest = offset
        return True

    def done(self, tp: TopicPartition, offset: int) -> bool:
        """Mark a taken record as done. Returns False for records not tracked (already
        done, or of a partition forgotten since)."""
        state = self._partitions.get(tp)
        if state is None or offset not in state.pending:
            return False
        state.pending.remove(offset)
        return True

    def committable(self) -> dict[TopicPartition, int]:
        """Offsets to commit (Kafka semantics: the next offset to read) for the partitions
        that advanced since their last ``mark_committed``."""
        result: dict[TopicPartition, int] = {}
        for tp, state in self._partitions.items():
            position = state.advance()
            if position > state.committed:
                result[tp] = position
        return result

    def mark_committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Note that ``offsets`` (as returned by ``committable``) reached the broker."""
        for tp, offset in offsets.items():
            state = self._partitions.get(tp)
            if state is not None and offset > state.committed:
                state.committed = offset

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop all state of ``partitions`` (they were revoked)."""
        for tp in partitions:
            self._partitions.pop(tp, None)

    def next_offset(self, tp: TopicPartition) -> int | None:
        """The offset after the newest one taken on ``tp``, or None if ``tp`` is not tracked."""
        state = self._partitions.get(tp)
        return None if state is None else state.newest + 1

    def in_flight_for(self, tp: TopicPartition) -> int:
        """Records of ``tp`` taken and not done yet."""
        state = self._partitions.get(tp)
        return 0 if state is None else len(state.pending)

    @property
    def in_flight(self) -> int:
        """Records taken and not done yet, over all partitions."""
        return sum(len(s.pending) for s in self._partitions.values())

    @property
    def partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._partitions)

    def committed(self) -> dict[TopicPartition, int]:
        """The last offsets marked committed (or where tracking began), per partition."""
        return {tp: s.committed for tp, s in self._partitions.items()}
