"""pbd.worker_client.releases: when the ids of outputs the reader is done with reach the
worker."""

from __future__ import annotations

import asyncio

from pbd.worker_client.releases import RELEASE_DELAY_S, Outstanding, PendingReleases
from pbd_wire import RESPONSES_AHEAD

STREAMED = 1 << 63  # a streamed response's held id (pbd_worker.live_requests.STREAM_HELD_BIT)


def _run(body) -> list[list[int]]:  # type: ignore[no-untyped-def]
    frames: list[list[int]] = []

    async def main() -> None:
        await body(PendingReleases(frames.append))

    asyncio.run(main())
    return frames


def test_a_batch_is_told_after_the_delay_or_on_the_next_execute() -> None:
    async def body(releases: PendingReleases) -> None:
        releases.add(5)
        await asyncio.sleep(0)
        assert releases.take() == [5]  # an Execute leaving now carries it
        releases.add(6)
        await asyncio.sleep(RELEASE_DELAY_S * 3)

    assert _run(body) == [[6]]


def test_a_request_the_worker_may_wait_for_is_told_on_the_next_turn() -> None:
    """RESPONSES_AHEAD of a paced request's responses out: its sender may be waiting, so no
    delay (and a batch id that waited goes along); the count falls as they are told."""
    frames: list[list[int]] = []
    request = Outstanding()

    async def main() -> None:
        releases = PendingReleases(frames.append)
        releases.add(5)
        request.outstanding = RESPONSES_AHEAD
        releases.add(STREAMED | 1, request)
        assert frames == []  # not inside the read that released it
        await asyncio.sleep(0)
        assert frames == [[5, STREAMED | 1]]  # the next turn, not RELEASE_DELAY_S later
        assert request.outstanding == RESPONSES_AHEAD - 1

    asyncio.run(main())


def test_below_the_window_a_paced_release_waits_as_a_batchs_does() -> None:
    """A model slower than its reader never has RESPONSES_AHEAD out: its releases cost no
    more Release frames than a batch's."""
    frames: list[list[int]] = []
    request = Outstanding()

    async def main() -> None:
        releases = PendingReleases(frames.append)
        for i in range(1, RESPONSES_AHEAD):
            request.outstanding += 1
            releases.add(STREAMED | i, request)
        await asyncio.sleep(0)
        assert frames == []
        await asyncio.sleep(RELEASE_DELAY_S * 3)
        assert frames == [[STREAMED | i for i in range(1, RESPONSES_AHEAD)]]
        assert request.outstanding == 0

    asyncio.run(main())
