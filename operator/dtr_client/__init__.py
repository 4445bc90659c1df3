"""The Python client for DistTrainingRuns (docs/client.md): TrainingClient, on a cluster or with local processes.

    client.py   TrainingClient: create, get, list, wait, progress, logs, history, plot, delete, suspend, resume,
                fetch_model, evaluate, tensorboard
    results.py  what it returns and raises, and the run document from a file, a dict or a model file (pure)
    curves.py   a run's history file as Progress items, and dtr compare's table (pure)
    plots.py    the curves as a matplotlib Figure (matplotlib imported only there)
    cluster.py  the cluster backend (dtr_operator.kube)
    local.py    the local backend (`dtr run` processes, dtr_operator.local)
    models.py   a model copied out of a local volume, and scored in the trainer's Python
    tensorboard.py  TensorBoard on a run's logs: a local process, or a pod and a port-forward
"""

from .client import TrainingClient
from .models import EvaluationFailed
from .results import InvalidRun, NoModel, Progress, RunFailed, RunNotFound, RunStatus
from .tensorboard import TensorBoardError, TensorBoardHandle

__all__ = ["EvaluationFailed", "InvalidRun", "NoModel", "Progress", "RunFailed", "RunNotFound", "RunStatus",
           "TensorBoardError", "TensorBoardHandle",
           "TrainingClient"]
