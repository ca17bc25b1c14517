"""Fixtures: the real pbd daemon as a subprocess, talked to with the real ``tritonclient.grpc``.

Every daemon binds 127.0.0.1 on a free port, writes its log to a file (shown when a test fails),
uses a shared-memory prefix of its own and is stopped by its PID; stopping it checks a graceful
shutdown: exit code 0, no ``/dev/shm/<prefix>-*`` left, no worker process left.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pbd_harness import (
    EXAMPLE_MODEL_NAMES,
    EXAMPLE_MODELS,
    TEST_MODEL_NAMES,
    TEST_MODELS,
    Daemon,
    DaemonFactory,
    running_daemon,
)


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[DaemonFactory]:
    with contextlib.ExitStack() as stack:
        yield DaemonFactory(tmp_path, stack)


@pytest.fixture(scope="module")
def examples_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The bundled example repository, every model loaded (``none`` mode)."""
    workdir = tmp_path_factory.mktemp("examples")
    with running_daemon(EXAMPLE_MODELS, workdir, settle=EXAMPLE_MODEL_NAMES) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def models_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The test repository in ``none`` mode: good and deliberately broken models side by side."""
    workdir = tmp_path_factory.mktemp("models")
    with running_daemon(TEST_MODELS, workdir, settle=TEST_MODEL_NAMES) as daemon:
        yield daemon


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        funcargs = getattr(item, "funcargs", {})
        for value in funcargs.values():
            daemons = value.daemons if isinstance(value, DaemonFactory) else [value]
            for daemon in daemons:
                if isinstance(daemon, Daemon):
                    report.sections.append((f"pbd {daemon.shm_prefix}", daemon.log_tail()))
    return report
