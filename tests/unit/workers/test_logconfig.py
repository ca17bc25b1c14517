from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from pbd_worker.logconfig import LogConfig, apply


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    library = logging.getLogger("asyncio").level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("asyncio").setLevel(library)


@pytest.mark.parametrize(("verbose", "asyncio_debug"), [(0, False), (1, False), (2, True)])
def test_asyncios_debug_lines_only_from_verbose_2(
    restored_logging: None, capsys: pytest.CaptureFixture[str], verbose: int, asyncio_debug: bool
) -> None:
    """`--log-verbose 1` is for pbd's and the models' verbose lines, not asyncio's "Using
    selector: EpollSelector"; its warnings always show."""
    apply(LogConfig(verbose=verbose))
    logging.getLogger("asyncio").debug("Using selector: EpollSelector")
    logging.getLogger("asyncio").warning("a warning of asyncio's")
    logging.getLogger("pbd.repository").debug("a verbose line of pbd's")
    err = capsys.readouterr().err
    assert ("Using selector" in err) is asyncio_debug
    assert "a warning of asyncio's" in err
    assert ("a verbose line of pbd's" in err) is (verbose > 0)
