from __future__ import annotations

from aiokafka.structs import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from consumers.offsets import OffsetTracker

P0 = TopicPartition("t", 0)
P1 = TopicPartition("t", 1)


def test_out_of_order_completion_commits_only_the_contiguous_prefix() -> None:
    tracker = OffsetTracker()
    for offset in range(10, 15):
        assert tracker.track(P0, offset)
    assert tracker.in_flight == 5
    assert tracker.committable() == {}

    tracker.done(P0, 12)
    tracker.done(P0, 14)
    assert tracker.committable() == {}  # 10 is still running

    tracker.done(P0, 10)
    assert tracker.committable() == {P0: 11}  # 11 still running
    tracker.done(P0, 11)
    assert tracker.committable() == {P0: 13}
    tracker.done(P0, 13)
    assert tracker.committable() == {P0: 15}
    assert tracker.in_flight == 0


def test_only_partitions_that_advanced_since_the_last_commit_are_reported() -> None:
    tracker = OffsetTracker()
    tracker.track(P0, 0)
    tracker.track(P1, 5)
    tracker.done(P0, 0)
    tracker.done(P1, 5)
    assert tracker.committable() == {P0: 1, P1: 6}
    tracker.mark_committed({P0: 1})
    assert tracker.committable() == {P1: 6}
    tracker.mark_committed({P1: 6})
    assert tracker.committable() == {}
    tracker.track(P1, 6)
    assert tracker.committable() == {}
    tracker.done(P1, 6)
    assert tracker.committable() == {P1: 7}
    assert tracker.committed() == {P0: 1, P1: 6}


def test_gaps_between_offsets_do_not_hold_the_commit_back() -> None:
    # Compacted topics and transaction markers leave offsets that are never delivered.
    tracker = OffsetTracker()
    for offset in (3, 7, 8, 20):
        tracker.track(P0, offset)
    tracker.done(P0, 3)
    assert tracker.committable() == {P0: 7}
    tracker.done(P0, 8)
    tracker.done(P0, 7)
    assert tracker.committable() == {P0: 20}
    tracker.done(P0, 20)
    assert tracker.committable() == {P0: 21}


def test_redelivered_and_unknown_records_are_ignored() -> None:
    tracker = OffsetTracker()
    assert tracker.track(P0, 4)
    assert tracker.track(P0, 5)
    assert not tracker.track(P0, 5)  # the same record again
    assert not tracker.track(P0, 2)  # behind what was taken
    assert tracker.next_offset(P0) == 6
    assert not tracker.done(P0, 3)  # never taken
    assert not tracker.done(P1, 0)  # unknown partition
    assert tracker.done(P0, 5)
    assert not tracker.done(P0, 5)  # twice
    assert tracker.in_flight == 1
    assert tracker.in_flight_for(P0) == 1


def test_forget_drops_a_revoked_partition() -> None:
    tracker = OffsetTracker()
    tracker.track(P0, 0)
    tracker.track(P1, 0)
    tracker.done(P1, 0)
    tracker.forget([P1])
    assert tracker.partitions == {P0}
    assert tracker.committable() == {}
    assert not tracker.done(P1, 0)  # a late completion after the revoke
    assert tracker.next_offset(P1) is None
    # Taken again after a new assignment: tracking starts afresh at the new position.
    assert tracker.track(P1, 0)
    tracker.done(P1, 0)
    assert tracker.committable() == {P1: 1}


@st.composite
def _scenario(draw: st.DrawFn) -> tuple[dict[int, list[int]], list[tuple[int, int]]]:
    """Offsets (ascending, with gaps) per partition, and an order in which they complete."""
    partitions: dict[int, list[int]] = {}
    for partition in range(draw(st.integers(1, 3))):
        gaps = draw(st.lists(st.integers(1, 3), min_size=1, max_size=30))
        start = draw(st.integers(0, 1000))
        offsets = []
        for gap in gaps:
            offsets.append(start)
            start += gap
        partitions[partition] = offsets
    completions = [(p, o) for p, offsets in partitions.items() for o in offsets]
    order = draw(st.permutations(completions))
    prefix = draw(st.integers(0, len(order)))  # some records never complete
    return partitions, list(order[:prefix])


@settings(max_examples=300, deadline=None)
@given(_scenario())
def test_committed_offsets_never_pass_an_unfinished_record(
    scenario: tuple[dict[int, list[int]], list[tuple[int, int]]],
) -> None:
    partitions, completions = scenario
    tracker = OffsetTracker()
    for partition, offsets in partitions.items():
        for offset in offsets:
            assert tracker.track(TopicPartition("t", partition), offset)
    finished: dict[int, set[int]] = {p: set() for p in partitions}
    committed: dict[int, int] = {}
    for step, (partition, offset) in enumerate(completions):
        assert tracker.done(TopicPartition("t", partition), offset)
        finished[partition].add(offset)
        if step % 3 == 0:  # commit now and then, as the consumer does
            to_commit = tracker.committable()
            for tp, next_offset in to_commit.items():
                assert next_offset > committed.get(tp.partition, -1)
                committed[tp.partition] = next_offset
            tracker.mark_committed(to_commit)
    for tp, next_offset in tracker.committable().items():
        committed[tp.partition] = next_offset
    for partition, offsets in partitions.items():
        unfinished = [o for o in offsets if o not in finished[partition]]
        expected = unfinished[0] if unfinished else offsets[-1] + 1
        if expected == offsets[0]:
            assert partition not in committed  # nothing new to commit
        else:
            # Everything below the commit is done; the commit stops at the first unfinished.
            assert committed[partition] == expected
    assert tracker.in_flight == sum(len(o) for o in partitions.values()) - len(completions)
