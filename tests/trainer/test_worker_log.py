"""worker_log and lineage's env reading, in process (no TensorFlow): the copy of stderr on the volume."""

from __future__ import annotations

import io
import re
import sys

import pytest
from dtr_contract import disk
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
    ({"DTR_RUN_NAME": "lr-3", "DTR_RUN_SWEEP": "lr", "DTR_RUN_TRIAL": "3"}, RunIdentity("lr-3", sweep="lr", trial=3)),
    ({"DTR_RUN_NAME": "lr-3", "DTR_RUN_SWEEP": "lr", "DTR_RUN_TRIAL": "x"}, RunIdentity("lr-3", sweep="lr")),
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


# ---------------------------------------------------------------- the cap (dtr_contract.disk)

CAP, RESERVE = 1000, 1000
EPOCH_END = "2026-12-01T00:00:00.000Z dtr_trainer[worker-0]: epoch {}/9 end loss=0.5000 examples_per_second=10.0\n"
START = "2026-12-01T00:00:00.000Z ===== container start: worker-0 of r, host h, pid 1 =====\n"


def test_the_budget_takes_every_line_to_the_cap_then_says_so_once_then_only_epoch_ends_and_starts():
    budget = worker_log.Budget(0, False, CAP, RESERVE)
    line = "x" * 99 + "\n"
    assert [budget.admit(line) for _ in range(10)] == [line] * 10 and budget.used == CAP
    cut = budget.admit("one more\n")
    assert cut.count("\n") == 1 and "cut at 1000 bytes" in cut and "one more" not in cut
    assert budget.admit("and another\n") == ""  # said once
    assert budget.admit(EPOCH_END.format(1)) == EPOCH_END.format(1)
    assert budget.admit(START) == START
    assert budget.admit(f"{EPOCH_END.format(2)[:-1]} but not quite\n") == ""  # the epoch line's shape, whole
    kept = [budget.admit(EPOCH_END.format(e % 9 + 1)) for e in range(20)]
    assert "" in kept and budget.used <= CAP + RESERVE  # the reserve runs out too: then nothing at all


def test_a_line_that_would_cross_the_cap_is_cut_instead_and_an_epoch_end_still_goes_after_the_notice():
    budget = worker_log.Budget(CAP - 10, False, CAP, RESERVE)
    out = budget.admit(EPOCH_END.format(3))
    assert out.endswith(EPOCH_END.format(3)) and "cut at" in out.splitlines()[0]


def test_a_file_cut_by_an_earlier_container_stays_cut_without_a_second_notice():
    budget = worker_log.Budget(CAP + 5, False, CAP, RESERVE)
    assert budget.admit(START) == START and budget.admit("chatter\n") == ""
    under = worker_log.Budget(CAP - 100, True, CAP, RESERVE)  # the line that crossed the cap is not in the file
    assert under.admit(START) == START and under.admit("chatter\n") == ""
    full = worker_log.Budget(CAP + RESERVE, False, CAP, RESERVE)
    assert full.admit(START) == "" and full.admit(EPOCH_END.format(1)) == ""


def test_whatever_is_written_the_file_stays_within_the_cap_and_its_reserve():
    budget = worker_log.Budget(0, False, CAP, RESERVE)
    lines = ["y" * n + "\n" for n in (5, 300, 3000, 0, 77)] * 10 + [EPOCH_END.format(e) for e in range(1, 10)] * 20
    assert sum(len(budget.admit(line)) for line in lines) <= CAP + RESERVE


def test_a_worker_printing_far_past_the_cap_keeps_its_file_under_it_and_its_epoch_lines(tmp_path, install_fake_stderr):
    """Through the real Tee and the real cap (16 MiB): 20 MiB of chatter, an epoch end amid it, a restart."""
    fake_stderr = install_fake_stderr()
    chatter = ("z" * 1023 + "\n") * 1024  # 1 MiB a write
    for attempt in range(2):
        worker_log.start(str(tmp_path), "worker-0", RunIdentity("r", "u", "ns"), pytest.fail)
        for mib in range(20):
            sys.stderr.write(chatter)
            if mib == 18:
                print(f"dtr_trainer[worker-0]: epoch {attempt + 1}/2 end loss=0.5000 examples_per_second=9.0",
                      file=sys.stderr)  # fmt: skip
        sys.stderr.write("no newline at the end " * 10_000)  # 230 KB in one line: pieces, then cut
        worker_log.stop()
    text = (tmp_path / "worker-0.log").read_text()
    assert len(text.encode()) <= disk.WORKER_LOG_MAX_BYTES + disk.WORKER_LOG_RESERVE_BYTES
    lines = text.splitlines()
    (notice,) = [i for i, ln in enumerate(lines) if "this log file is cut at" in ln]
    after = [ln.split(" ", 1)[1] for ln in lines[notice + 1:]]
    assert [ln for ln in after if "epoch" in ln] == [f"dtr_trainer[worker-0]: epoch {e}/2 end loss=0.5000 "
                                                    "examples_per_second=9.0" for e in (1, 2)]  # fmt: skip
    assert len([ln for ln in after if "container start" in ln]) == 1 and not [ln for ln in after if "zzz" in ln]
    assert fake_stderr.getvalue().count(chatter) == 40  # stderr, the pod log, keeps it all


def test_a_line_without_end_is_written_in_pieces_not_held(tmp_path, install_fake_stderr):
    install_fake_stderr()
    worker_log.start(str(tmp_path), "worker-0", RunIdentity(), pytest.fail)
    sys.stderr.write("a" * (3 * worker_log.LINE_PIECE + 5))  # no newline: held no longer than a piece
    written = (tmp_path / "worker-0.log").read_text().splitlines()[1:]
    assert [len(ln.split(" ", 1)[1]) for ln in written] == [worker_log.LINE_PIECE] * 3
    worker_log.stop()
    assert (tmp_path / "worker-0.log").read_text().splitlines()[-1].endswith(" aaaaa")
