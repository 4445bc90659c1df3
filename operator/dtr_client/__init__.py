"""The Python client for DistTrainingRuns (docs/client.md): TrainingClient, on a cluster or with local processes,
and the library under the `dtr` commands (dtr_cli).

    client.py   TrainingClient: create, get, list, wait, progress, logs, history, plot, delete, suspend, resume,
                fetch_model, evaluate, tensorboard
    results.py  what it returns and raises, and the run document from a file, a dict or a model file (pure)
    curves.py   a run's history file as Progress items, and dtr compare's table (pure)
    plots.py    the curves as a matplotlib Figure (matplotlib imported only there)
    cluster.py  the cluster backend (dtr_operator.kube)
    local/      the local backend (backend.py) and `dtr run`, which plays the training-operator and kubelet
    models.py   a model copied out of a local volume, and scored in the trainer's Python
    tensorboard.py  TensorBoard on a run's logs: a local process, or a pod and a port-forward
    runfile.py  the run files `dtr render` and `dtr run` read (pure)
    submit.py   a model file checked and sent as a ConfigMap and a run (`dtr submit`, create(FILE.py))
    logs.py     the workers' logs of a run, merged (`dtr logs`, logs())
    transfer.py, volume.py, copier.py  files in and out of a run's volume through a transfer pod: the pure
                decisions, the API calls and the copy, the copy program both ends run
    namespaces.py, cluster_check.py  which namespaces the operators watch; what they would say to a run
"""

from .client import TrainingClient
from .models import EvaluationFailed
from .results import InvalidRun, NoModel, Progress, RunFailed, RunNotFound, RunStatus
from .tensorboard import TensorBoardError, TensorBoardHandle

__all__ = ["EvaluationFailed", "InvalidRun", "NoModel", "Progress", "RunFailed", "RunNotFound", "RunStatus",
           "TensorBoardError", "TensorBoardHandle",
           "TrainingClient"]
