"""Version strings as clients send them (issue 18, finding 8); loads, reloads and uploads."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pbd.errors import Code, PbdError
from pbd.modelconfig.model import ModelConfig
from pbd.repository.manager import ModelRepository, parse_version
from pbd.repository.upload import UploadLimits, Uploads
from pbd.version.runtime import VersionState


@pytest.mark.parametrize(("text", "value"), [("", -1), ("1", 1), ("07", 7), ("10", 10)])
def test_versions_in_ascii_digits(text: str, value: int) -> None:
    assert parse_version(text) == value


@pytest.mark.parametrize("text", ["1_0", "\u0661", " 1", "+1", "-1", "1.0", "x"])
def test_anything_else_is_refused_not_read_as_a_number(text: str) -> None:
    with pytest.raises(PbdError) as caught:
        parse_version(text)
    assert caught.value.code is Code.INVALID_ARG
    assert f"specified version string '{text}'" in caught.value.message


# -- loads and reloads, with runtimes that only pretend to start workers -----------------------

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


class FakeRuntime:
    """Loads unless its version directory holds a file named ``fail``."""

    depends_on: frozenset[str] = frozenset()  # not an ensemble: uses no other model

    def __init__(self, config: ModelConfig, version: int, model_dir: Path) -> None:
        self.config, self.version, self.model_dir = config, version, model_dir
        self.state, self.reason, self.scaler = VersionState.LOADING, "", None
        self.unloaded = False
        self.detached = False

    @property
    def serving(self) -> bool:
        return self.state is VersionState.READY

    ready = serving

    async def load(self) -> None:
        if (self.model_dir / str(self.version) / "fail").exists():
            self.state = VersionState.UNAVAILABLE
            raise PbdError(Code.INTERNAL, "initialize() failed")
        self.state = VersionState.READY

    async def unload(self, grace: float, why: str = "") -> None:
        self.state, self.unloaded = VersionState.UNAVAILABLE, True


def _model(root: Path, name: str, fail: bool = False) -> Path:
    (root / name / "1").mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(CONFIG)
    (root / name / "1" / "model.py").write_text(f"# {time.monotonic_ns()}\n")
    if fail:
        (root / name / "1" / "fail").write_text("")
    return root / name


def _repository(tmp_path: Path, uploads: Uploads | None = None) -> ModelRepository:
    (tmp_path / "repo").mkdir()
    return ModelRepository(tmp_path / "repo", FakeRuntime, 0.0, uploads=uploads)  # type: ignore[arg-type]


UPLOAD = {"file:1/model.py": b"# uploaded\n"}
UPLOAD_CONFIG = '{"backend": "python"}'


def test_a_reload_that_fails_leaves_the_model_serving(tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    _model(repo.root, "m")
    asyncio.run(repo.load("m"))
    old = repo.lookup("m", "")
    (repo.root / "m" / "1" / "fail").write_text("")
    with pytest.raises(PbdError, match="load failed for model 'm': version 1"):
        asyncio.run(repo.load("m"))
    assert repo.lookup("m", "") is old and not old.unloaded
    assert [(e.version, e.state) for e in repo.index()] == [("1", "READY")]


def test_a_first_load_that_fails_is_unavailable(tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    _model(repo.root, "m", fail=True)
    with pytest.raises(PbdError):
        asyncio.run(repo.load("m"))
    assert [(e.version, e.state) for e in repo.index()] == [("1", "UNAVAILABLE")]


def test_an_upload_replaces_the_model_once_it_loaded(tmp_path: Path) -> None:
    uploads = Uploads(str(tmp_path / "uploads"), UploadLimits(1000, 10))
    repo = _repository(tmp_path, uploads)
    _model(repo.root, "m")

    async def scenario() -> None:
        await repo.load("m")
        from_repository = repo.lookup("m", "")
        await repo.load("m", UPLOAD_CONFIG, UPLOAD)
        uploaded = repo.lookup("m", "")
        assert from_repository.unloaded and uploaded.model_dir.parent.parent == uploads.root
        assert (uploaded.model_dir / "1" / "model.py").read_bytes() == b"# uploaded\n"
        failing = {**UPLOAD, "file:1/fail": b""}
        with pytest.raises(PbdError, match="load failed for model 'm'"):
            await repo.load("m", UPLOAD_CONFIG, failing)
        assert repo.lookup("m", "") is uploaded and not uploaded.unloaded
        assert uploads.root is not None
        assert [p.name for p in uploads.root.iterdir()] == [uploaded.model_dir.parent.name]
        await repo.load("m")  # from the repository again: the upload goes
        assert not uploaded.model_dir.exists()
        await repo.load("m", UPLOAD_CONFIG, UPLOAD)
        await repo.unload("m")
        assert not any(uploads.root.iterdir())

    asyncio.run(scenario())


def test_every_load_checks_the_name(tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    _model(repo.root, "a;b")
    with pytest.raises(PbdError, match="Invalid stub name: contains invalid characters"):
        asyncio.run(repo.load("a;b"))
    assert "a;b" not in repo.entries


class GatedRuntime(FakeRuntime):
    """Loads once ``gate`` is set."""

    gate: asyncio.Event

    async def load(self) -> None:
        await self.gate.wait()
        await super().load()


def _gated_repository(tmp_path: Path) -> ModelRepository:
    """A repository of one model, "m", whose load waits for ``GatedRuntime.gate``."""
    (tmp_path / "repo").mkdir()
    repo = ModelRepository(tmp_path / "repo", GatedRuntime, 0.0)  # type: ignore[arg-type]
    _model(repo.root, "m")
    return repo


def test_a_clients_load_goes_on_when_the_client_stops_waiting(tmp_path: Path) -> None:
    repo = _gated_repository(tmp_path)

    async def scenario() -> None:
        GatedRuntime.gate = asyncio.Event()
        client = asyncio.create_task(repo.load_for_client("m"))
        await asyncio.sleep(0.01)
        client.cancel()  # a deadline, a disconnect
        await asyncio.sleep(0.01)
        assert [(e.version, e.state) for e in repo.index()] == [("1", "LOADING")]
        unload = asyncio.create_task(repo.unload("m"))
        await asyncio.sleep(0.01)
        assert not unload.done()  # it waits for the load
        GatedRuntime.gate.set()
        await unload

    asyncio.run(scenario())
    assert [(e.version, e.state, e.reason) for e in repo.index()] == [
        ("1", "UNAVAILABLE", "unloaded")
    ]


def test_then_runs_when_a_clients_load_ends_even_after_the_client_left(tmp_path: Path) -> None:
    repo = _gated_repository(tmp_path)
    seen: list[list[tuple[str, str]]] = []

    async def then() -> None:
        seen.append([(e.version, e.state) for e in repo.index()])

    async def scenario() -> None:
        GatedRuntime.gate = asyncio.Event()
        client = asyncio.create_task(repo.load_for_client("m", then=then))
        await asyncio.sleep(0.01)
        client.cancel()  # a deadline, a disconnect
        await asyncio.sleep(0.01)
        assert seen == []  # not before the load ends
        GatedRuntime.gate.set()
        while not seen:
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert seen == [[("1", "READY")]]


def test_then_does_not_run_when_shutdown_cancels_the_load(tmp_path: Path) -> None:
    repo = _gated_repository(tmp_path)
    calls: list[str] = []

    async def then() -> None:
        calls.append("then")

    async def scenario() -> None:
        GatedRuntime.gate = asyncio.Event()
        load = asyncio.create_task(repo.load_for_client("m", then=then))
        await asyncio.sleep(0.01)
        await repo.unload_all()  # shutdown
        with pytest.raises(asyncio.CancelledError):
            await load

    asyncio.run(scenario())
    assert calls == []


def test_a_cancelled_load_leaves_its_versions_listed_with_why(tmp_path: Path) -> None:
    repo = _gated_repository(tmp_path)

    async def scenario() -> None:
        GatedRuntime.gate = asyncio.Event()
        load = asyncio.create_task(repo.load_for_client("m"))
        await asyncio.sleep(0.01)
        await repo.unload_all()  # shutdown
        with pytest.raises(asyncio.CancelledError):
            await load

    asyncio.run(scenario())
    assert [(e.version, e.state, e.reason) for e in repo.index()] == [
        ("1", "UNAVAILABLE", "loading was cancelled (the server is shutting down)")
    ]
