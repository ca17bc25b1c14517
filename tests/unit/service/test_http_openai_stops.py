"""Stop sequences cut a streamed text before their first occurrence, across pieces."""

from __future__ import annotations

from pbd.http.openai.stops import StopScanner


def _run(stops: list[str], pieces: list[str]) -> tuple[list[str], str, bool]:
    scanner = StopScanner(stops)
    out = [scanner.feed(p) for p in pieces]
    return out, scanner.finish(), scanner.stopped


def test_without_stops_every_piece_goes_out_as_it_is() -> None:
    assert _run([], ["a", "b"]) == (["a", "b"], "", False)


def test_the_text_ends_before_the_earliest_stop() -> None:
    assert _run(["xy", "b"], ["a b xy"]) == (["a "], "", True)


def test_a_stop_split_across_pieces_is_found() -> None:
    assert _run(["END"], ["hello E", "N", "D more"]) == (["hello ", "", ""], "", True)


def test_a_held_beginning_that_is_not_a_stop_goes_out_with_the_next_piece() -> None:
    assert _run(["END"], ["ab E", "NX", "c"]) == (["ab ", "ENX", "c"], "", False)


def test_what_is_held_at_the_end_goes_out_at_finish() -> None:
    assert _run(["END"], ["ab EN"]) == (["ab "], "EN", False)


def test_nothing_after_a_stop() -> None:
    assert _run(["!"], ["a!", "b"]) == (["a", ""], "", True)
