"""strategy.run's replica threads joined as soon as they end, not at the next second (TensorFlow 2.11).

Inside a tf.function each strategy.run (Keras' train and test steps, the trainer's lazy-metrics loop) builds its
function in a thread per replica (tensorflow/python/distribute/mirrored_run.py) and then joins them with a
`Coordinator`, whose join polls `while any(alive) and not wait_for_stop(1.0)`. The thread has reported its result
but is usually still returning when the poll first looks, so the poll waits its whole second: about a second of idle
wall time per strategy.run traced, two in the first epoch and one or two in the evaluation
(docs/performance.md#the-trainers-time-outside-its-epochs). `join_promptly` gives mirrored_run a Coordinator that
first waits for the threads themselves (Thread.join returns the moment they end), then runs Coordinator.join as it
is: the same exceptions re-raised, the same grace period. Nothing else uses the replacement.
"""

from __future__ import annotations

import time
import types
from collections.abc import Iterable

from tensorflow.python.distribute import mirrored_run
from tensorflow.python.training import coordinator

JOIN_SECONDS = 1.0  # at most what one poll of Coordinator.join waits: never slower than TensorFlow's own join


class PromptCoordinator(coordinator.Coordinator):
    def join(self, threads: Iterable | None = None, stop_grace_period_secs: float = 120,
             ignore_live_threads: bool = False) -> None:
        threads = list(threads or ())
        if not self.should_stop():  # a stop (an exception in a replica) keeps TensorFlow's own path
            deadline = time.monotonic() + JOIN_SECONDS
            for thread in threads:
                thread.join(max(deadline - time.monotonic(), 0.0))
        super().join(threads, stop_grace_period_secs, ignore_live_threads)


def join_promptly() -> None:
    """From now on, mirrored_run (and only it) makes its replica threads' Coordinator a PromptCoordinator."""
    mirrored_run.coordinator = types.SimpleNamespace(Coordinator=PromptCoordinator)
