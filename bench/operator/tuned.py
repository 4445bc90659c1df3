"""`dtr operator` with some kopf settings overridden, to measure a setting before it goes into the
operator (run.py --kopf-setting execution.max_workers=32 starts this instead of `dtr operator`).

    python bench/operator/tuned.py operator --namespace NS ...   (DTR_BENCH_KOPF="a.b=1,c.d=2.5",
                                                                  DTR_BENCH_POOL=32)

Importing the operator's handlers first registers its own startup handler; ours is registered after
it, so kopf runs it after, and its values win.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import kopf
from dtr_operator import handlers  # noqa: F401  (registers the operator's handlers, configure() first)
from dtr_operator.cli import main
from dtr_operator.kube import Kube
from kubernetes.client import ApiClient


def parse_overrides(text: str) -> list[tuple[list[str], float | int]]:
    """ "execution.max_workers=32,persistence.consistency_timeout=30" -> [(path, value), ...]."""
    out: list[tuple[list[str], float | int]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, raw = item.partition("=")
        value: float | int = float(raw) if "." in raw else int(raw)
        out.append((key.split("."), value))
    return out


@kopf.on.startup()
def override(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    if pool := os.environ.get("DTR_BENCH_POOL"):  # the API client's connection pool (kube.py sets 16)
        configuration = memo.kube.api.configuration
        configuration.connection_pool_maxsize = int(pool)
        api = ApiClient(configuration)
        api.user_agent = memo.kube.api.user_agent
        memo.kube = Kube(api)
        logger.info("bench: API client connection pool %s", pool)
    for path, value in parse_overrides(os.environ.get("DTR_BENCH_KOPF", "")):
        target = settings
        for part in path[:-1]:
            target = getattr(target, part)
        setattr(target, path[-1], value)
        logger.info("bench: kopf setting %s = %s", ".".join(path), value)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
