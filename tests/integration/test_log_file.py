"""``--log-file`` (Triton's flag): the daemon's log and its workers' go to the file, appended to
what was there; LogSettings names it and refuses to move it, as Triton does."""

from __future__ import annotations

from pathlib import Path

from pbd_harness import EXAMPLE_MODELS, error_of, make_repository, running_daemon


def test_the_log_and_the_workers_log_go_to_the_file(tmp_path: Path) -> None:
    repository = make_repository(tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub"})
    log_file = tmp_path / "tritonserver.log"
    log_file.write_text("a line from before\n")
    with running_daemon(
        repository, tmp_path, f"--log-file={log_file}", settle=["add_sub"]
    ) as daemon:
        client = daemon.client()
        assert client.get_log_settings(as_json=True)["settings"]["log_file"] == {
            "string_param": str(log_file)
        }
        error = error_of(lambda: client.update_log_settings({"log_file": "/elsewhere"}))
        assert "log file location can not be updated through network protocol" in error.message()
        assert "pbd ready" not in daemon.log()  # nothing on stderr
    text = log_file.read_text()
    assert text.startswith("a line from before\n")  # appended, as Triton appends
    assert "pbd ready: 1 of 1 model version(s) loaded" in text
    # The model's own log line, from its worker (pb_utils.Logger in finalize()).
    assert "[add_sub/1/add_sub_0_0] pbd_worker.model: add_sub: finalize" in text
