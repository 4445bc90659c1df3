"""DistTrainingRun operator: DistTrainingRun (distml.dev/v1alpha1) -> Kubeflow TFJob + PVC.

Layout (functional core, imperative shell):
    fields.py    the spec's fields, each declared once: the CRD's schema, the parser and the docs derive from it
    crd.py       the CRD (crds/disttrainingrun.yaml, written by `make docs`) built from fields.py (pure)
    spec.py      the run's spec as typed values, parsed from the custom resource (pure)
    reasons.py   every status, condition and event reason, declared once
    builders.py  spec -> TFJob and PVC manifests (pure)
    status.py    TFJob (+ chief pod) -> run status (pure)
    kube.py      the only module that talks to the Kubernetes API
    reconcile.py the Reconciler: observe -> decide (pure) -> act, one object per operator process
    handlers.py  kopf handlers: thin glue between kopf and the Reconciler
    settings.py  operator settings from flags and environment
    main.py      `dtr operator`: kopf, standalone, with the handlers (the command itself: dtr_cli)
"""

__version__ = "0.1.0"
