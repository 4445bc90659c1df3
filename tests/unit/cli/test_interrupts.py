"""Ctrl-C while `dtr tensorboard` serves: seen between two checks, never raised inside one (where a
KeyboardInterrupt can leave the connection pool's lock held and the pod's DELETE wait on it for ever); the pod is
let go and the exit code is 130. Real signals to this process."""

from __future__ import annotations

import argparse
import os
import signal
import time
from types import SimpleNamespace

import pytest
from dtr_cli import tensorboard as cli_tensorboard
from dtr_cli.command import EXIT_INTERRUPTED, interrupts_asked, run_command


def test_a_signal_inside_the_block_sets_stop_and_raises_nothing_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with interrupts_asked() as asked:
        assert not asked.wait(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
        t0 = time.monotonic()
        assert asked.wait(30)
        assert time.monotonic() - t0 < 1
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_second_ctrl_c_interrupts_the_clean_up_itself() -> None:
    with pytest.raises(KeyboardInterrupt), interrupts_asked() as asked:
        os.kill(os.getpid(), signal.SIGINT)
        assert asked.wait(1)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the KeyboardInterrupt lands here
        pytest.fail("the second Ctrl-C raised nothing")


class Handle:
    """A served TensorBoard whose every check is a request that Ctrl-C lands in the middle of."""

    url = "http://127.0.0.1:1/"

    def __init__(self) -> None:
        self.checks, self.stopped, self.raised_in_check = 0, False, False

    def ended(self) -> str | None:
        self.checks += 1
        if self.checks == 2:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # the request still reading its answer when the signal lands
            except KeyboardInterrupt:
                self.raised_in_check = True
                raise
        return None

    def stop(self) -> None:
        self.stopped = True


def test_ctrl_c_landing_inside_a_check_lets_the_check_end_then_stops_the_pod_and_exits_130(monkeypatch, capsys):
    handle = Handle()
    backend = SimpleNamespace(tensorboard=lambda *_: handle)
    monkeypatch.setattr(cli_tensorboard, "client_for", lambda _: SimpleNamespace(backend=backend))
    monkeypatch.setattr(cli_tensorboard, "CHECK_SECONDS", 0.05)
    args = argparse.Namespace(run="board", port=None, timeout=1.0, no_wait=False)
    assert run_command("tensorboard", cli_tensorboard._tensorboard, args) == EXIT_INTERRUPTED
    assert handle.checks == 2 and handle.stopped and not handle.raised_in_check
    assert capsys.readouterr().out == f"TensorBoard for board: {Handle.url}\n"
