"""DistTrainingRun operator: DistTrainingRun (distml.dev/v1alpha1) -> Kubeflow TFJob + PVC.

Layout (functional core, imperative shell):
    spec.py      the run's spec as typed values, parsed from the custom resource (pure)
    builders.py  spec -> TFJob and PVC manifests (pure)
    status.py    TFJob (+ chief pod) -> run status (pure)
    kube.py      the only module that talks to the Kubernetes API
    handlers.py  kopf handlers: thin glue between kube.py and the pure modules
    settings.py  operator settings from flags and environment
    cli.py       the `dtr` command
"""

__version__ = "0.1.0"
