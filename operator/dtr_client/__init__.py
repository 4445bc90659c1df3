"""The Python client for DistTrainingRuns (docs/client.md): TrainingClient, on a cluster or with local processes.

    client.py   TrainingClient: create, get, list, wait, progress, logs, history, plot, delete, suspend, resume
    results.py  what it returns and raises, and the run document from a file, a dict or a model file (pure)
    curves.py   a run's history file as Progress items, and dtr compare's table (pure)
    plots.py    the curves as a matplotlib Figure (matplotlib imported only there)
    cluster.py  the cluster backend (dtr_operator.kube)
    local.py    the local backend (`dtr run` processes, dtr_operator.local)
"""

from .client import TrainingClient
from .results import InvalidRun, Progress, RunFailed, RunNotFound, RunStatus

__all__ = ["InvalidRun", "Progress", "RunFailed", "RunNotFound", "RunStatus", "TrainingClient"]
