"""The trainer as PID 1 of its container (the image's entrypoint is `python -m dtr_trainer`): the process forks at
once, and PID 1 only passes signals on to the trainer, reaps, and exits as the trainer did.

Why not train as PID 1: the kernel delivers a signal to PID 1 only if it has a handler for it, never by the default
action, and Python's handler runs only once the main thread is back in Python. MWMS's rendezvous holds the main
thread in TensorFlow's C++, with the GIL, for as long as a peer does not come: a worker restarted in place beside a
lost node (three nodes) waited there for good, so its pod's deletion waited out the whole grace period (30 s) for the
kubelet's SIGKILL, and the run's resume waited with it. Not PID 1, the trainer lets SIGTERM's default action end it
while it is held there (sigterm.Termination.default_while_held); its other SIGTERMs are handled as before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import NoReturn

PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
HELD_LINE = ("dtr_trainer: terminated (SIGTERM) while held in TensorFlow (meeting the other workers): stopping now; "
             "the backup of the last finished epoch stays")  # fmt: skip


def supervise_if_pid_1() -> None:
    """Returns in the trainer: the process itself unless it is PID 1, else its child."""
    if os.getpid() != 1:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        return
    _supervise(child)


def _supervise(child: int) -> NoReturn:
    for signum in PASSED_ON:
        signal.signal(signum, lambda signum, _frame: _pass_on(child, signum))
    while True:
        try:
            pid, status = os.wait()  # any orphan of the container too (PID 1 reaps them)
        except ChildProcessError:
            os._exit(1)  # the trainer gone unseen: cannot happen, but never wait for nothing
        if pid == child:
            if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM:
                print(HELD_LINE, file=sys.stderr, flush=True)
            os._exit(exit_code(status))


def _pass_on(child: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # ended meanwhile: os.wait() has its status
        os.kill(child, signum)


def exit_code(status: int) -> int:
    """The trainer's exit code, or 128 + the signal that ended it (as a shell reports it: 143 for SIGTERM, the
    trainer's own code for it)."""
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code
