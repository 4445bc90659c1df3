"""The chief's MLflow tracking (docs/tracking.md): the calls tracking_plan.py decides, sent to the server the
operator names in MLFLOW_TRACKING_URI (dtr_contract.env), with the standard library.

A tracking server that is down or slow never fails or stalls training: the calls go out from a thread of their
own (training only queues them), each waits at most TIMEOUT seconds, and the first that fails turns tracking off for
the rest of the run with one warning line that says so; the chief waits for what is still queued at most FINISH_WAIT
seconds after the export (FAILED_WAIT after an error, STOPPED_WAIT after SIGTERM) before it exits.

TRACKER is the process's one tracker, as sigterm.TERMINATION is its one SIGTERM handler: main.run starts it in
the chief once the version is claimed, Progress hands it each epoch through the history (watching), and the
export and the error path end it. Off (no URI, not the chief) every call is a no-op.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Callable

from dtr_contract import env

from dtr_trainer import lineage
from dtr_trainer import tracking_plan as plan

TIMEOUT = 5.0  # seconds per request: a server that answers slower is a server that is down
FINISH_WAIT = 20.0  # seconds the chief waits after the export for the params, figures and the registration
FAILED_WAIT = 5.0  # after an error: marking the run FAILED is worth less than exiting promptly
STOPPED_WAIT = 2.0  # after SIGTERM: inside the pod's grace period, after the backup's own wait
MAX_ANSWER = 1024 * 1024  # bytes read of an answer


class TrackingError(Exception):
    """A call that failed: the server is unreachable, slow, or refused it."""


def now_ms() -> int:
    return int(time.time() * 1000)


def send(uri: str, call: plan.Call, timeout: float = TIMEOUT) -> dict[str, Any]:
    """One call, its JSON answer; TrackingError saying what went wrong (MLflow's error_code and message)."""
    url = uri.rstrip("/") + plan.API + call.path
    if call.query:
        url += "?" + urllib.parse.urlencode(call.query)
    data = None if call.body is None else json.dumps(call.body).encode()
    request = urllib.request.Request(url, data=data, method=call.method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            text = answer.read(MAX_ANSWER)
    except urllib.error.HTTPError as err:
        raise TrackingError(f"{call.path}: HTTP {err.code} {_error(err)}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:  # refused, unresolvable, timed out, a bad URI
        reason = getattr(err, "reason", None) or err
        raise TrackingError(f"{call.path}: {reason}") from None
    try:
        doc = json.loads(text or b"{}")
    except ValueError:
        raise TrackingError(f"{call.path}: the answer is not JSON (is {uri} an MLflow server?)") from None
    return doc if isinstance(doc, dict) else {}


def _error(err: urllib.error.HTTPError) -> str:
    """MLflow's error_code: message, else the status's reason."""
    try:
        doc = json.loads(err.read(4096) or b"{}")
    except (OSError, ValueError):
        doc = {}
    if isinstance(doc, dict) and doc.get("error_code"):
        return f"{doc['error_code']}: {str(doc.get('message', ''))[:300]}"
    return str(err.reason)


def _already_exists(err: TrackingError) -> bool:
    return "RESOURCE_ALREADY_EXISTS" in str(err)


class Tracker:
    def __init__(self) -> None:
        self.uri = ""
        self.who: plan.Identity | None = None
        self.claim: str | None = None  # the run's PVC, for the version's source
        self.run_id: str | None = None
        self.skipped: str | None = None  # why tracking went off
        self.log: Callable[[str], None] = print
        self.queue: queue.Queue[Callable[[], None]] = queue.Queue()
        self.thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.thread is not None

    # ------------------------------------------------------------ what the run calls

    def start(self, uri: str, who: plan.Identity, claim: str | None, params: Mapping[str, str],
              log: Callable[[str], None]) -> None:
        self.uri, self.who, self.claim, self.log = uri, who, claim, log
        self.thread = threading.Thread(target=self._work, name="dtr-tracking", daemon=True)
        self.thread.start()
        self.queue.put(lambda: self._open(dict(params)))

    def watching(self, history: Any) -> Any:
        """The chief's History (or None), with each epoch also sent here: the same figures the file gets."""
        return _Tee(history, self) if self.active else history

    def epoch(self, epoch: int, metrics: Mapping[str, float], seconds: float, rate: float) -> None:
        when, figures = now_ms(), dict(metrics)
        self.queue.put(lambda: self._send(plan.log_epoch(self._run(), epoch, figures, seconds, rate, when)))

    def finish(self, evaluation: Mapping[str, float], epochs: int, model_path: str,
               extra: Mapping[str, str] | None) -> None:
        """After the export: every param (the lineage's), the final figures, the version registered, FINISHED."""
        if not self.active:
            return
        training = json.loads(extra[lineage.LINEAGE_PATH]).get("training", {}) if extra else {}
        self.queue.put(lambda: self._finish(plan.flatten(training), dict(evaluation), epochs, model_path))
        self._wait(FINISH_WAIT)

    def failed(self) -> None:
        self._end("FAILED", FAILED_WAIT)

    def stopped(self) -> None:
        """Told to stop (SIGTERM: a suspend, a drain, a sweep's early stop): the run KILLED, not left RUNNING; a
        chief started again (a resume) makes it RUNNING again, as after FAILED."""
        self._end("KILLED", STOPPED_WAIT)

    def _end(self, status: str, wait: float) -> None:
        if self.active:
            self.queue.put(lambda: self._send(plan.update_run(self._run(), status, now_ms())))
            self._wait(wait)

    # ------------------------------------------------------------ the thread's side

    def _work(self) -> None:
        while True:
            job = self.queue.get()
            if self.skipped is not None and not isinstance(job, _Done):
                continue  # off: what is still queued is dropped
            try:
                job()
            except TrackingError as err:
                self.skipped = str(err)
                self.log(f"warning: MLflow tracking at {self.uri} skipped for the rest of this run ({err}); "
                         "training goes on")

    def _wait(self, seconds: float) -> None:
        done = _Done()
        self.queue.put(done)
        if not done.event.wait(seconds) and self.skipped is None:
            self.skipped = f"not done within {seconds:.0f} s"
            self.log(f"warning: MLflow tracking at {self.uri} skipped: the server did not take this run's calls "
                     f"within {seconds:.0f} s; the run goes on without them")

    def _send(self, call: plan.Call) -> dict[str, Any]:
        return send(self.uri, call)

    def _run(self) -> str:
        if self.run_id is None:
            raise TrackingError("no MLflow run")
        return self.run_id

    def _open(self, params: dict[str, str]) -> None:
        assert self.who is not None
        experiment = self._experiment(self.who.experiment)
        found = plan.run_id(self._send(plan.search_run(experiment, self.who.key)))
        if found is not None:  # a restarted chief: the run it began
            self._send(plan.update_run(found, "RUNNING"))
        else:
            found = plan.run_id(self._send(plan.create_run(experiment, self.who, now_ms())))
        self.run_id = self._checked(found, "runs/create")
        for call in plan.log_params(self.run_id, params):
            self._send(call)
        self.log(f"tracking in MLflow at {self.uri}: experiment {self.who.experiment}, run {self.run_id} "
                 f"({plan.run_page(self.uri, experiment, self.run_id)})")

    def _experiment(self, name: str) -> str:
        try:
            return self._checked(plan.experiment_id(self._send(plan.get_experiment(name))), "get-by-name")
        except TrackingError as err:
            if "RESOURCE_DOES_NOT_EXIST" not in str(err):
                raise
        try:
            return self._checked(plan.experiment_id(self._send(plan.create_experiment(name))), "create")
        except TrackingError as err:  # another run created it meanwhile
            if not _already_exists(err):
                raise
        return self._checked(plan.experiment_id(self._send(plan.get_experiment(name))), "get-by-name")

    @staticmethod
    def _checked(value: str | None, what: str) -> str:
        if value is None:
            raise TrackingError(f"{what}: no id in the answer")
        return value

    def _finish(self, params: dict[str, str], evaluation: dict[str, float], epochs: int, model_path: str) -> None:
        assert self.who is not None
        run, name = self._run(), self.who.model_name
        for call in [*plan.log_params(run, params), plan.log_final(run, evaluation, epochs, now_ms()),
                     plan.version_tags(run, self.who.version, model_path), plan.update_run(run, "FINISHED", now_ms())]:
            self._send(call)  # the run complete first: a registry that refuses the version leaves it logged
        try:
            self._send(plan.create_registered_model(name))
        except TrackingError as err:
            if not _already_exists(err):
                raise
        source = plan.model_source(model_path, self.who.export_dir, self.claim)
        answer = self._send(plan.create_model_version(name, source, run, self.who))
        registered = (answer.get("model_version") or {}).get("version", "?")
        self.log(f"tracked in MLflow at {self.uri}: run {run}, registered model {name} version {registered} "
                 f"({source})")


class _Done:
    """The marker _wait queues behind the calls: set once the thread has reached it."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self) -> None:
        self.event.set()


class _Tee:
    """progress.History's append, to the file (when there is one) and to the tracker."""

    def __init__(self, history: Any, tracker: Tracker):
        self.history, self.tracker = history, tracker

    def append(self, epoch: int, epochs: int, metrics: Mapping[str, float], seconds: float, rate: float) -> None:
        if self.history is not None:
            self.history.append(epoch, epochs, metrics, seconds, rate)
        self.tracker.epoch(epoch, metrics, seconds, rate)


TRACKER = Tracker()


def start(environ: Mapping[str, str], args: Any, workers: int, run: lineage.RunIdentity, code: dict | None,
          version: int | None, log: Callable[[str], None]) -> None:
    """The chief (version: the one it claimed; None elsewhere) starts TRACKER when MLFLOW_TRACKING_URI is set, with
    the params known before training under the lineage's names (lineage.document's `training`)."""
    uri = environ.get(env.MLFLOW_TRACKING_URI, "").strip()
    if version is None or not uri:
        return
    model_name = os.path.basename(os.path.normpath(args.export_dir))
    who = plan.Identity(model_name, version, args.export_dir, run.name, run.namespace, run.uid, run.sweep, run.trial)
    TRACKER.start(uri, who, plan.claim_of(run.name, run.spec), plan.flatten(settings(args, workers, code)), log)


def settings(args: Any, workers: int, code: dict | None) -> dict[str, Any]:
    """What lineage.document's `training` will say, of what is known before the data are loaded (a test holds the
    two to the same names and values); `params` once the trainer has them (spec.training.params, --params)."""
    source = {"url": args.dataset_url, "sha256": args.dataset_sha256} if args.dataset_url else None
    return {"model": args.model, "dataset": args.dataset, "code": code, "seed": args.seed, "epochs": args.epochs,
            "batchSizePerWorker": args.batch_size_per_worker, "globalBatchSize": args.batch_size_per_worker * workers,
            "learningRate": float(args.learning_rate), "workers": workers, "datasetSource": source,
            "params": getattr(args, "params", None), "validateEvery": args.validate_every}  # fmt: skip
