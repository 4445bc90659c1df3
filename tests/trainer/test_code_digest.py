"""The code that runs is the code recorded (issue 39 item 5, security review R9), through the real CLI and real
MWMS workers: given --code-sha256, a worker checks its --code file's bytes before it compiles or runs any of them;
other bytes end it with exit 10 (dtr_contract.exits.CODE_CHANGED) and one line naming both digests, on stderr and in
the termination message, and no line of the file has run. The file here proves it: importing it leaves a file on
the volume, as user code with a side effect would.
"""

from __future__ import annotations

import hashlib
import textwrap

import pytest
from dtr_contract import exits, flags
from dtr_trainer.errors import EXIT_CODE_CHANGED, EXIT_USAGE, EXIT_USER_CODE, UsageError
from dtr_trainer.main import parse_args

from devcluster.controlplane import free_ports
from support.trainer import Volume, kill_all, start_workers

# Seconds the workers get to exit: both fail before the strategy, so neither waits on the other.
ERROR_TIMEOUT = 180
# Imported, it writes MARKER beside the data (what a replaced ConfigMap's code could do to the run's volume), then
# fails as code without build_model does (exit 8): enough to tell that the file ran, without training.
SIDE_EFFECT = textwrap.dedent('''
    import os
    import sys

    with open(os.path.join(os.environ["MARKER_DIR"], "ran-" + os.environ["MARKER_TAG"]), "w") as f:
        f.write("the replaced code ran")
    print("REPLACED CODE RUNNING", file=sys.stderr)


    def load_data(ctx):
        raise RuntimeError("not reached")
''')


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def run_two(volume: Volume, code: str, sha256: str, tag: str) -> tuple[list[int], list]:
    path = volume.root.parent / "wine_model.py"
    path.write_text(code)
    args = [flags.CODE, str(path), flags.CODE_SHA256, sha256, "--dataset", "wine.npz", "--epochs", "1",
            *volume.args("digest")]
    workers = start_workers(volume, free_ports(2), args, attempt=tag,
                            env_extra={"MARKER_DIR": str(volume.root / "data"), "MARKER_TAG": tag})
    try:
        codes = [w.wait(timeout=ERROR_TIMEOUT) for w in workers]
    finally:
        kill_all(workers)
    return codes, workers


def test_a_file_that_is_not_the_recorded_one_runs_not_a_line_and_fails_permanently(volume):
    recorded = digest("def build_model(ctx):\n    ...\n")  # what the operator read before the ConfigMap was replaced
    codes, workers = run_two(volume, SIDE_EFFECT, recorded, "changed")
    assert codes == [EXIT_CODE_CHANGED] * 2, [w.log()[-2000:] for w in workers]
    assert EXIT_CODE_CHANGED == exits.CODE_CHANGED and not exits.is_retryable(EXIT_CODE_CHANGED)
    assert not (volume.root / "data" / "ran-changed").exists(), "the replaced file's module code ran"
    expected = (f"wine_model.py: the code changed: its sha256 is {digest(SIDE_EFFECT)}, not {recorded} as recorded "
                f"({flags.CODE_SHA256}, the run's status.code); none of it ran. Its ConfigMap was replaced after the "
                "run started: create a new run to train it")  # fmt: skip
    for worker in workers:
        log = worker.log()
        assert "REPLACED CODE RUNNING" not in log and "Traceback" not in log, log[-3000:]
        (error,) = [line for line in log.splitlines() if "error:" in line]
        assert error == f"dtr_trainer[worker-{worker.index}]: error: {expected}", log[-3000:]
        assert worker.termination_path.read_text() == error + "\n"


def test_the_recorded_file_runs_as_before(volume):
    """The control: the same file with its own digest (any case, as sha256sum may print it) is imported, so the
    side effect happens, and then fails as code without build_model does."""
    codes, workers = run_two(volume, SIDE_EFFECT, digest(SIDE_EFFECT).upper(), "same")
    assert codes == [EXIT_USER_CODE] * 2, [w.log()[-2000:] for w in workers]
    assert (volume.root / "data" / "ran-same").read_text() == "the replaced code ran"
    assert all("defines no build_model(ctx) function" in w.log() for w in workers)


@pytest.mark.parametrize("argv", [
    [flags.CODE_SHA256, "ab" * 32, "--export-dir", "/x"],
    [flags.CODE_MODULE, "acme.m", flags.CODE_SHA256, "ab" * 32, "--export-dir", "/x"],
    [flags.CODE, "m.py", flags.CODE_SHA256, "not-a-digest", "--export-dir", "/x"],
])  # fmt: skip
def test_a_digest_goes_only_with_a_file_and_only_as_64_hex_digits(argv):
    with pytest.raises(UsageError) as err:
        parse_args(argv)
    assert flags.CODE_SHA256 in str(err.value) and err.value.exit_code == EXIT_USAGE
