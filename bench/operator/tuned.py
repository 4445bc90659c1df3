"""`dtr operator` with some kopf settings overridden, to measure a setting before it goes into the
operator (run.py --kopf-setting execution.max_workers=32 starts this instead of `dtr operator`).

    python -m bench.operator.tuned operator --namespace NS ...   (DTR_BENCH_KOPF="a.b=1,c.d=2.5",
                                                                  DTR_BENCH_POOL=32)

Importing the operator's handlers first registers its own startup handler; ours is registered after
it, so kopf runs it after, and its values win.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import kopf
from dtr_cli.cli import main
from dtr_operator import handlers  # noqa: F401  (registers the operator's handlers, configure() first)
from dtr_operator.kube import Kube
from dtr_operator.reconcile.reconciler import Reconciler
from kubernetes.client import ApiClient

from bench.operator.analysis import parse_overrides


@kopf.on.startup()
def override(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    if pool := os.environ.get("DTR_BENCH_POOL"):  # the API client's connection pool (kube.py sets 16)
        kube = memo.reconciler.kube
        configuration = kube.api.configuration
        configuration.connection_pool_maxsize = int(pool)
        api = ApiClient(configuration)
        api.user_agent = kube.api.user_agent
        memo.reconciler.kube = Kube(api)
        logger.info("bench: API client connection pool %s", pool)
    for path, value in parse_overrides(os.environ.get("DTR_BENCH_KOPF", "")):
        target = settings
        for part in path[:-1]:
            target = getattr(target, part)
        setattr(target, path[-1], value)
        logger.info("bench: kopf setting %s = %s", ".".join(path), value)


def skip_first_tfjob_get() -> None:
    """What-if (DTR_BENCH_SKIP_GET=1), not the operator's behaviour: for a run without status, the create
    handler's first GET of the TFJob is answered "absent" without asking the API (its create's 409
    still reveals an existing TFJob, whose second GET goes to the API)."""
    fresh = threading.local()
    reconcile_run, get_tfjob = Reconciler.reconcile_run, Kube.get_tfjob

    def reconcile_run_marked(self: Reconciler, body: Any, *args: Any, **kwargs: Any) -> Any:
        fresh.skip = not body.get("status")
        try:
            return reconcile_run(self, body, *args, **kwargs)
        finally:
            fresh.skip = False

    def get_tfjob_unless_fresh(self: Kube, namespace: str, name: str) -> Any:
        if getattr(fresh, "skip", False):
            fresh.skip = False
            return None
        return get_tfjob(self, namespace, name)

    Reconciler.reconcile_run = reconcile_run_marked
    Kube.get_tfjob = get_tfjob_unless_fresh


if os.environ.get("DTR_BENCH_SKIP_GET"):
    skip_first_tfjob_get()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
