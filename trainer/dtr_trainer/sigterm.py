"""SIGTERM (the pod is being deleted: a suspend, a preemption, a drain) stops the trainer at once, except while an
epoch's end is under way: from Progress's epoch end, through BackupAndRestore's save, to the epoch's end line
(progress.epoch_callbacks). Python runs a signal's handler only once the main thread is back from C, and a
SIGTERM sent during the save's collectives was handled right after them: the epoch was backed up, but its end
line never came, so the log and the run's status said one epoch less than the restart resumed after. Inside that
window the stop waits for the line, at most WAIT_SECONDS (a save still waiting on peers that already left gives
up by then), and a training error raised meanwhile (the peers gone) stops as SIGTERM rather than as that error.

When the trainer was its container's PID 1 (which has no default action for SIGTERM), without a handler it trained
on through the grace period (and a run suspended near its end finished, deleted its backup, and trained again from
epoch 1 when resumed). The last finished epoch's backup on the volume is what a restart resumes.

With --backup-on-sigterm, while fit's steps run (dtr_trainer.step_backup arms it), a SIGTERM outside an epoch's end
does not stop at once: the workers save the training state together at the end of the next execution and leave,
so the restart resumes inside the interrupted epoch; the stop comes after at most SAVE_WAIT_SECONDS anyway.

Where the main thread is held in TensorFlow's C++ with the GIL (MWMS's rendezvous, for as long as a peer does not
come) no Python handler runs: there SIGTERM's default action ends the trainer (default_while_held; pid1.py says why
the trainer is not PID 1 in its container).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Callable, NoReturn

from dtr_trainer.errors import EXIT_TERMINATED

WAIT_SECONDS = 5.0  # well inside a pod's grace period (30 s unless the pod says otherwise)
SAVE_WAIT_SECONDS = 20.0  # armed: the save on SIGTERM's bound, inside the 30 s grace period with room to exit


class Termination:
    """The handler and the epoch's end run in the main thread (the handler between two of its bytecodes), so the
    two flags are plain attributes: a lock taken by both would deadlock when the signal lands while the epoch's
    end holds it. Only the timer's stop runs in another thread."""

    def __init__(self) -> None:
        self._exiting = threading.RLock()  # the timer's stop and the main thread's: one line, one exit
        self._epoch_ending = False
        self._requested = False
        self._armed = False  # a save on SIGTERM is possible now (dtr_trainer.step_backup, during fit's steps)
        self._before_exit: Callable[[str], None] = lambda line: None
        self._log: Callable[[str], None] = lambda line: None

    def install(self, before_exit: Callable[[str], None]) -> None:
        """Handle SIGTERM from now on; `before_exit(line)` logs the stop line and closes the worker's log."""
        self._before_exit = before_exit
        signal.signal(signal.SIGTERM, self._handle)

    @property
    def requested(self) -> bool:
        return self._requested

    def _handle(self, signum: int, frame: object) -> None:
        self._requested = True
        if self._epoch_ending:
            self._stop_after(
                WAIT_SECONDS, f"terminated (SIGTERM): stopping now, {WAIT_SECONDS:.0f} s into the epoch's backup"
            )
        elif self._armed:
            self._log("terminated (SIGTERM): saving the training state with the other workers first")
            self._stop_after(
                SAVE_WAIT_SECONDS,
                f"terminated (SIGTERM): stopping now, the save on SIGTERM did not "
                f"finish in {SAVE_WAIT_SECONDS:.0f} s; the last backup stays",
            )
        else:
            self.stop("terminated (SIGTERM): stopping now; the backup of the last finished epoch stays on the volume")

    @contextlib.contextmanager
    def default_while_held(self) -> Iterator[None]:
        """SIGTERM's default action (the end, 143 as a shell or the kubelet says) while the main thread may be held
        where no handler can run; nothing of this attempt is saved yet then."""
        previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _stop_after(self, seconds: float, line: str) -> None:
        timer = threading.Timer(seconds, self.stop, (line,))
        timer.daemon = True
        timer.start()

    def arm(self, log: Callable[[str], None]) -> None:
        """From now on a SIGTERM outside an epoch's end waits for the save (`log` says so; step_backup saves)."""
        self._log = log
        self._armed = True

    def disarm(self) -> None:
        """fit's steps are over: a SIGTERM that came meanwhile and found no save point stops the trainer now."""
        self._armed = False
        if self._requested:
            self.stop("terminated (SIGTERM): stopping now; the backup of the last finished epoch stays on the volume")

    def epoch_end_begins(self) -> None:
        self._epoch_ending = True

    def epoch_end_done(self) -> None:
        """The epoch's end line is written: a SIGTERM that came meanwhile stops the trainer now."""
        self._epoch_ending = False
        if self._requested:
            self.stop("terminated (SIGTERM) during the epoch's backup: stopping now that it is saved and logged")

    def stop_if_requested(self) -> None:
        """Before a training error is reported: a SIGTERM put off by the epoch's end or the save wins (peers left)."""
        if self._requested and self._armed:
            self.stop("terminated (SIGTERM): stopping now, a peer left before the save; the last backup stays")
        if self._requested:
            self.stop("terminated (SIGTERM) during the epoch's backup: stopping now (the backup did not finish)")

    def stop(self, line: str, code: int = EXIT_TERMINATED) -> NoReturn:
        self._exiting.acquire()  # another thread's caller waits here for the first one's exit
        self._before_exit(line)
        os._exit(code)  # not sys.exit: a collective in another thread must not hold the exit up


TERMINATION = Termination()
