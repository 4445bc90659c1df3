"""What every `dtr` command shares: one path from an error to an exit code (run_command, as kubectl's
cmdutil.CheckErr), one way to the client (client_for, as kubectl's Factory), and the argument types.

A command returns its exit code (None: 0) or raises: BadInput or Failed of its own, or the library's errors,
which _exit_for sorts. Exit codes, the same for every command: 0 done; 1 the run failed, or the command or
the cluster refused (no credentials, the API server's error, no such run, nothing to show yet, a copy that
did not complete); 2 bad input (an unknown option, a file or spec that is not a valid run, a bad flag value);
130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dtr_client import TrainingClient

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2  # argparse's own code for a bad command line; a bad file or flag value is the same kind
EXIT_INTERRUPTED = 130  # what a shell reports for a command that Ctrl-C ended (128 + SIGINT)

Command = Callable[[argparse.Namespace], int | None]


class BadInput(Exception):
    """What the command was given cannot be used (a path, a file, a flag's value): exit 2."""


class Failed(Exception):
    """The command could not do its job (refused, or nothing to show yet): exit 1."""


def run_command(command: str, func: Command, args: argparse.Namespace) -> int:
    """func(args)'s exit code; for an error it ends with, one line on stderr, `dtr COMMAND: ...`, and the error's
    exit code; 130 for Ctrl-C. An error of no known kind is a bug: its traceback goes out as is."""
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as err:
        said = _exit_for(err)
        if said is None:
            raise
        code, message = said
        print(f"dtr {command}: {message}", file=sys.stderr)
        return code


def _exit_for(err: Exception) -> tuple[int, str] | None:
    """(exit code, message) for an error a command may end with, None for any other. The library is imported
    here, once something has failed, so that a command loads only what it runs (`dtr render`: no kubernetes)."""
    from dtr_client import InvalidRun, RunNotFound, TensorBoardError
    from dtr_client.copier import CopyError
    from dtr_client.local.source import RunError
    from dtr_client.local.translate import TranslateError
    from dtr_client.logs import LogsError
    from dtr_client.runfile import RunFileError
    from dtr_client.submit import SubmitError
    from dtr_client.sweeps import SweepFailed
    from dtr_client.transfer import AmbiguousTarget, TransferError
    from dtr_operator.kube import ApiError, NoCredentials
    from dtr_operator.settings import SettingsError
    from dtr_operator.spec import SpecError

    if isinstance(err, SpecError):
        return EXIT_BAD_INPUT, err.listed()
    bad_input = (BadInput, RunFileError, SettingsError, SubmitError, InvalidRun, RunError, TranslateError,
                 AmbiguousTarget)  # before TransferError, whose kind it is: the name given cannot be used as it is
    if isinstance(err, bad_input):
        return EXIT_BAD_INPUT, str(err)
    if isinstance(err, ApiError):
        return EXIT_FAILED, f"the API server said {err}"
    if isinstance(err, OSError):
        return EXIT_FAILED, f"{err.filename}: {err.strerror or err}" if err.filename else f"{err.strerror or err}"
    if isinstance(err, (Failed, NoCredentials, RunNotFound, LogsError, TransferError, CopyError, TensorBoardError,
                        SweepFailed)):
        return EXIT_FAILED, str(err)
    return None


def client_for(args: argparse.Namespace) -> TrainingClient:
    """The client a command works through: on the cluster of kubectl's credentials, in args.namespace (else the
    kubeconfig context's), or on `dtr run`'s local runs in args.dir, as args.backend says ("cluster", "local",
    or "auto": the cluster when there are credentials). A command without --backend works on the cluster."""
    from dtr_client import TrainingClient

    backend = getattr(args, "backend", "cluster")
    return TrainingClient(backend, namespace=args.namespace, local_dir=getattr(args, "dir", None))


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM as Ctrl-C inside the block: what the command holds (a transfer pod, TensorBoard) is let go on the
    way out, as `kill` or a closing terminal would otherwise leave it."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


ASKED_POLL_SECONDS = 0.1


class Asked:
    """Whether Ctrl-C or SIGTERM came, for a command's waiting loop (interrupts_asked)."""

    def __init__(self) -> None:
        self.stop = False

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, less once asked to stop; whether asked."""
        deadline = time.monotonic() + seconds
        while not self.stop and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, ASKED_POLL_SECONDS))
        return self.stop


@contextlib.contextmanager
def interrupts_asked() -> Iterator[Asked]:
    """Ctrl-C and SIGTERM inside the block only set Asked.stop, for a loop that waits until then: the interrupt is
    seen between two requests, never raised inside one, where a KeyboardInterrupt can leave a lock of the
    connection pool held and the clean-up's own request (the pod's DELETE) wait on it for ever. The handler takes
    no lock: a signal may land while the main thread holds any."""
    asked = Asked()

    def handler(*_: Any) -> None:
        asked.stop = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C interrupts the clean-up itself

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield asked
    finally:
        for sig, was in previous.items():
            signal.signal(sig, was)


# ---- argument types ---------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def seconds(text: str) -> float:
    """A --timeout of a command that waits on a pod or a process: seconds, more than 0 and at most an hour."""
    value = float(text)
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be in (0, 3600], got {text}")
    return value


def port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port, 1..65535, got {value}")
    return value
