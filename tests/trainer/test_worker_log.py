"""worker_log and lineage's env reading, in process (no TensorFlow): the copy of stderr on the volume."""

from __future__ import annotations

import io
import re
import sys

import pytest
from dtr_trainer import lineage, worker_log
from dtr_trainer.lineage import RunIdentity

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.fixture
def install_fake_stderr(monkeypatch):
    """A StringIO as sys.stderr, set in the test's own call (pytest's capture swaps sys.stderr after setup)."""
    def install() -> io.StringIO:
        stream = io.StringIO()
        monkeypatch.setattr(sys, "stderr", stream)
        return stream

    yield install
    worker_log.stop()


def test_stderr_is_copied_line_by_line_and_appended(tmp_path, install_fake_stderr):
    fake_stderr = install_fake_stderr()
    warnings = []
    for attempt in range(2):  # a container, then its restart
        path = worker_log.start(str(tmp_path / "logs"), "worker-1", RunIdentity("r", "u", "ns"), warnings.append)
        assert path == tmp_path / "logs" / "worker-1.log"
        print(f"line {attempt}", file=sys.stderr)
        sys.stderr.write("partial ")
        sys.stderr.write(f"then whole {attempt}\nunfinished {attempt}")
        worker_log.stop()
        assert sys.stderr is fake_stderr
    assert warnings == []
    assert fake_stderr.getvalue() == "".join(f"line {a}\npartial then whole {a}\nunfinished {a}" for a in range(2))
    lines = (tmp_path / "logs" / "worker-1.log").read_text().splitlines()
    assert all(re.match(STAMP + " ", ln) for ln in lines), lines
    assert [ln.split(" ", 1)[1] for ln in lines] == [
        lines[0].split(" ", 1)[1], "line 0", "partial then whole 0", "unfinished 0",
        lines[4].split(" ", 1)[1], "line 1", "partial then whole 1", "unfinished 1",
    ]
    assert re.fullmatch(r"===== container start: worker-1 of ns/r \(uid u\), host \S+, pid \d+ =====",
                        lines[0].split(" ", 1)[1])


def test_an_unwritable_dir_is_one_warning_and_stderr_stays(tmp_path, install_fake_stderr):
    fake_stderr = install_fake_stderr()
    (tmp_path / "file").write_text("")
    warnings = []
    assert worker_log.start(str(tmp_path / "file" / "logs"), "worker-0", RunIdentity(), warnings.append) is None
    assert sys.stderr is fake_stderr
    assert len(warnings) == 1 and warnings[0].startswith("warning: cannot write the worker log ")


def test_a_write_failure_later_stops_the_copy_with_one_warning(tmp_path, install_fake_stderr):
    fake_stderr = install_fake_stderr()
    warnings = []
    worker_log.start(str(tmp_path), "worker-0", RunIdentity(),
                     lambda m: (warnings.append(m), print(m, file=sys.stderr)))
    sys.stderr._file.close()  # the volume went away
    print("still on stderr", file=sys.stderr)
    print("and again", file=sys.stderr)
    assert len(warnings) == 1 and "cannot write the worker log on the volume any more" in warnings[0]
    assert "still on stderr\n" in fake_stderr.getvalue() and "and again\n" in fake_stderr.getvalue()


def test_no_log_dir_no_copy(install_fake_stderr):
    fake_stderr = install_fake_stderr()
    assert worker_log.start(None, "worker-0", RunIdentity(), pytest.fail) is None
    assert sys.stderr is fake_stderr


@pytest.mark.parametrize("env, expected", [
    ({}, RunIdentity()),
    ({"DTR_RUN_NAME": "", "DTR_RUN_UID": ""}, RunIdentity()),
    ({"DTR_RUN_NAME": "r", "DTR_RUN_UID": "u", "DTR_RUN_NAMESPACE": "ns", "DTR_RUN_SPEC": '{"workers": 2}',
      "DTR_TRAINER_IMAGE": "i:1"}, RunIdentity("r", "u", "ns", {"workers": 2}, "i:1")),
])
def test_run_identity_from_env(env, expected):
    assert RunIdentity.from_env(env, warn=pytest.fail) == expected


@pytest.mark.parametrize("raw", ["not json", "[1]", '{"x": NaN}'])
def test_a_bad_spec_variable_is_null_with_one_warning(raw):
    warnings = []
    assert RunIdentity.from_env({"DTR_RUN_SPEC": raw}, warnings.append).spec is None
    assert len(warnings) == 1 and "DTR_RUN_SPEC" in warnings[0]


def test_lineage_has_no_nan():
    training = lineage.Training("cnn", "digits", None, 1, 1, 1, 1, 1, 0.1, 1)
    figures = lineage.Figures({"loss": float("nan"), "accuracy": 0.1}, "accuracy", 5)
    doc = lineage.document(RunIdentity(), training, figures, "m", 1, "2.11.0", lineage.utc_now())
    assert doc["metrics"] == {"loss": None, "accuracy": 0.1, "examplesPerSecond": 5.0, "metric": "accuracy",
                              "evaluation": {"loss": None, "accuracy": 0.1}}
    assert "NaN" not in lineage.render(doc)
