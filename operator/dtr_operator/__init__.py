"""DistTrainingRun operator: DistTrainingRun (distml.dev/v1alpha1) -> Kubeflow TFJob + PVC.

The operator and its API, functional core and imperative shell (every module, layer by layer:
docs/architecture.md#the-packages):
    api.py, reasons.py, fields.py, status_fields.py   every wire name, reason, spec field and status field, once
    spec.py, builders.py, status/, policy.py          the pure core: spec -> manifests, observed state -> status
    kube.py                                           the only module that talks to the Kubernetes API
    reconcile/                                        the Reconciler: observe -> decide (pure) -> act
    runtime/                                          where the operator stands in for kopf
    handlers.py, main.py                              kopf's registration, and `dtr operator`'s process
The `dtr` command is dtr_cli, the Python client and the tooling dtr_client.
"""

__version__ = "0.1.0"
