"""The cycle collector is paused for a block and is as it was once the last block ends, however blocks nest,
overlap across threads or fail."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from nl2sql.index.collection import collection_paused


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    gc.enable() if was else gc.disable()


def test_nested_blocks_share_one_pause_and_an_error_ends_it() -> None:
    with pytest.raises(RuntimeError), collection_paused():
        assert not gc.isenabled()
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still runs
        raise RuntimeError("stage failed")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with collection_paused():
        pass
    assert not gc.isenabled()


def test_overlapping_blocks_on_two_threads_end_with_the_collector_on() -> None:
    first_in, second_done = threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with collection_paused():
            first_in.set()
            second_done.wait(5)
            seen.append(gc.isenabled())  # the other thread's block ended: still paused for this one

    worker = threading.Thread(target=first)
    worker.start()
    first_in.wait(5)
    with collection_paused():
        pass
    second_done.set()
    worker.join(5)
    assert seen == [False] and gc.isenabled()
