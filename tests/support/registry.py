"""A container registry on a loopback port: Debian's docker-registry (the CNCF distribution server), since none on
the internet is reachable here. Docker pushes to a loopback registry over plain HTTP. Used by the images tier's
push tests and bench/journeys (the registry journey)."""

from __future__ import annotations

import contextlib
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml

from devcluster.controlplane import free_port


@contextlib.contextmanager
def local_registry(workdir: Path, prefix: str = "dtr-test") -> Iterator[str]:
    """A running registry storing under workdir; yields `127.0.0.1:PORT/prefix`, stops it after."""
    port = free_port()
    config = workdir / "registry.yml"
    config.write_text(yaml.safe_dump({"version": 0.1,
                                      "storage": {"filesystem": {"rootdirectory": str(workdir / "data")}},
                                      "http": {"addr": f"127.0.0.1:{port}"}}))  # fmt: skip
    with open(workdir / "registry.log", "w") as log:
        proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2).close()
                break
            except OSError as err:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log_text = (workdir / "registry.log").read_text()
                    raise RuntimeError(f"the registry did not start:\n{log_text}") from err
                time.sleep(0.2)
        yield f"127.0.0.1:{port}/{prefix}"
    finally:
        proc.terminate()
        proc.wait(10)
