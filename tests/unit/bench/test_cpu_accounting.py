"""bench/cpu/accounting.py reads the kernel's acct v3 records and puts each process's CPU under its step."""

from bench.cpu.accounting import RECORD, comp_t, parse, report, step_names


def record(pid: int, ppid: int, start: int, lived: float, cpu_ticks: int, command: str, version: int = 3) -> bytes:
    return RECORD.pack(0, version, 0, 0, 0, 0, pid, ppid, start, lived * 100, cpu_ticks, 0, 0, 0, 0, 0, 0, 0,
                       command.encode())  # fmt: skip


def test_comp_t_is_a_13_bit_mantissa_and_a_base_8_exponent() -> None:
    assert comp_t(100) == 100
    assert comp_t((1 << 13) | 5) == 40


def test_each_process_goes_under_the_step_the_runner_started_and_pods_apart() -> None:
    data = b"".join([
        record(11, 10, 1005, 10, 50, "kubectl"),  # a step's child
        record(21, 20, 1010, 20, 700, "python"),  # a container's process
        record(20, 1, 1009, 30, 3, "containerd-shim"),
        record(12, 10, 1006, 1, 1, "python", version=2),  # not v3: skipped
        record(10, 9, 1004, 90, 20, "python"),  # the step, 4 s after the runner started
        record(13, 9, 1004, 50, 10, "make"),
        record(14, 9, 1050, 30, 10, "make"),
        record(9, 8, 1000, 100, 5, "python"),  # the runner: the longest-lived that started several
        record(8, 1, 999, 101, 1, "make"),
    ])  # fmt: skip
    processes = parse(data)
    assert len(processes) == 8 and processes[0].command == "kubectl" and processes[0].cpu == 0.5
    result = report(processes)
    assert result["root"] == "python"
    by_step = dict(result["by step"])
    assert by_step["step@4:python"] == 0.7  # the step and its kubectl
    assert by_step["pods"] == 7.0
    assert ("kubectl", 0.5, 1) in result["by command"]


def test_a_step_is_named_by_the_runs_steps_that_started_that_second() -> None:
    starts = {"node": 60.0, "node runs": 60.4, "s3": 532.0}
    assert step_names(starts, "step@61:python") == "node | node runs"
    assert step_names(starts, "step@534:make") == "s3"
    assert step_names(starts, "step@900:make") == "step@900:make" and step_names(starts, "pods") == "pods"


def test_a_pods_cpu_goes_to_the_tests_running_when_it_started_shared_when_several_were(tmp_path) -> None:
    import json

    from bench.cpu.accounting import pods_by_test, test_spans

    (tmp_path / "node.tests.json").write_text(json.dumps([["tests/a.py::one", 1000.0, 30.0, 1.0],
                                                          ["tests/a.py::two", 1030.0, 40.0, 1.0]]))  # fmt: skip
    (tmp_path / "node runs.tests.json").write_text(json.dumps([["tests/b.py::three", 1040.0, 20.0, 0.5]]))
    (tmp_path / "node.json").write_text("{}")  # a tier's own figures: not read
    spans = test_spans(tmp_path)
    assert len(spans) == 3 and ("node tests/a.py::one", 1000.0, 1030.0) in spans
    data = b"".join([
        record(21, 20, 1010, 20, 700, "python"),  # during one only
        record(22, 20, 1045, 20, 400, "python"),  # two and three at once: half each
        record(23, 20, 1100, 5, 100, "python"),  # after every test
        record(11, 10, 1012, 1, 900, "python"),  # not a pod's: the tier counts it
        record(20, 1, 1009, 100, 3, "containerd-shim"),
        record(10, 9, 1004, 90, 20, "python"),
        record(13, 9, 1004, 50, 10, "make"),
        record(14, 9, 1050, 30, 10, "make"),
        record(9, 8, 1000, 200, 5, "python"),
    ])  # fmt: skip
    (tmp_path / "trainer.tests.json").write_text(json.dumps([["c.py::host", 1000.0, 200.0, 9.0]]))  # starts no pod
    spans = test_spans(tmp_path)
    got = dict(pods_by_test(parse(data), spans))
    assert got == {"node tests/a.py::one": 7.0, "node tests/a.py::two": 2.0, "node runs tests/b.py::three": 2.0,
                   "(no test running)": 1.0}, got  # fmt: skip
