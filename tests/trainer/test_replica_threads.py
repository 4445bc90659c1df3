"""dtr_trainer.replica_threads: strategy.run's replica threads are joined when they end, with TensorFlow's own
join semantics kept (exceptions, registered threads), and only mirrored_run uses it."""

from __future__ import annotations

import threading
import time

import pytest
from dtr_trainer import replica_threads
from dtr_trainer.replica_threads import PromptCoordinator


def ending_soon(seconds: float = 0.05) -> threading.Thread:
    thread = threading.Thread(target=time.sleep, args=(seconds,))
    thread.start()
    return thread


def ending_after_join_starts(seconds: float = 0.3) -> tuple[threading.Thread, threading.Timer]:
    """A thread that ends `seconds` after the timer is started, right before join: still alive when join begins
    however loaded the machine (a thread that merely slept 50 ms had ended before join under CI's load)."""
    go = threading.Event()
    thread = threading.Thread(target=go.wait)
    thread.start()
    return thread, threading.Timer(seconds, go.set)


def test_a_thread_that_ends_soon_is_joined_when_it_ends_not_at_the_next_second():
    from tensorflow.python.training import coordinator

    for make, at_least, at_most in ((coordinator.Coordinator, 0.9, None), (PromptCoordinator, 0.25, 0.8)):
        coord, (thread, timer) = make(), ending_after_join_starts()
        started = time.monotonic()
        timer.start()
        coord.join([thread])
        took = time.monotonic() - started
        assert not thread.is_alive()
        # TensorFlow's own join polls once a second: the reason for the module
        assert took >= at_least and (at_most is None or took <= at_most), (make.__name__, took)


def test_an_exception_in_a_thread_is_raised_by_join_as_before():
    coord = PromptCoordinator()

    def fail() -> None:
        with coord.stop_on_exception():
            raise ValueError("in a replica")

    thread = threading.Thread(target=fail)
    thread.start()
    with pytest.raises(ValueError, match="in a replica"):
        coord.join([thread])


def test_registered_threads_are_joined_too():
    coord = PromptCoordinator()
    thread = ending_soon()
    coord.register_thread(thread)
    coord.join()
    assert not thread.is_alive() and coord.joined


def test_only_mirrored_run_gets_it_and_strategy_run_still_works():
    import tensorflow as tf
    from tensorflow.python.distribute import mirrored_run
    from tensorflow.python.training import coordinator

    replica_threads.join_promptly()
    assert mirrored_run.coordinator.Coordinator is PromptCoordinator
    assert coordinator.Coordinator is not PromptCoordinator
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])

    @tf.function
    def twice(x):
        once = strategy.run(lambda v: v * 2, args=(x,))
        return strategy.run(lambda v: v + 1, args=(once,))

    assert float(twice(tf.constant(3.0))) == 7.0
