"""`dtr operator`: configure logging and metrics, then run kopf standalone with our handlers."""

from __future__ import annotations

import logging

import kopf

from .settings import Settings


def run_operator(settings: Settings) -> int:
    from .kube import Kube

    Kube.from_environment()  # NoCredentials before kopf starts retrying: the command says it in one line
    log_format = kopf.LogFormat.JSON if settings.log_format == "json" else kopf.LogFormat.FULL
    kopf.configure(verbose=settings.verbose, log_format=log_format)
    from . import handlers  # noqa: F401  (importing registers the handlers)

    if settings.metrics_port:
        from . import metrics

        metrics.serve(settings.metrics_port)
    logging.getLogger(__name__).info("starting dtr-operator")
    kopf.run(
        standalone=True,  # one replica, Recreate: no peering objects to manage
        clusterwide=settings.all_namespaces,
        namespaces=settings.namespaces,
        liveness_endpoint=settings.liveness_endpoint,
        memo=kopf.Memo(settings=settings),
    )
    return 0
