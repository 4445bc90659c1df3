"""`python -m dtr_trainer`: validate input, create the strategy first, train, export, report.

The model and the data come from the run's own code (--code FILE or --code-module NAME, docs/own-model.md)
or from the built-ins it names (--model, --dataset): the same build_model(ctx) and load_data(ctx) either way.

Imperative shell: each step is a small function; errors become one line and an exit code.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from types import MappingProxyType

from dtr_contract import flags, layout, objectstore, summary
from dtr_contract.container import TERMINATION_MESSAGE_PATH
from dtr_contract.progress import HEARTBEAT, trainer_line

from dtr_trainer import (
    backup_s3,
    cpus,
    data,
    data_s3,
    divergence,
    experiment,
    export,
    export_s3,
    failures,
    fetch,
    iterators,
    lineage,
    memory,
    ownership,
    pid1,
    preflight,
    rendezvous,
    tracking,
    user,
    userdata,
    volume,
    worker_log,
)
from dtr_trainer.argtypes import non_negative_int, positive_float, positive_int
from dtr_trainer.cluster import ClusterInfo, parse_tf_config
from dtr_trainer.errors import (
    EXIT_CODE_CHANGED,
    DivergedError,
    TrainerError,
    UsageError,
)
from dtr_trainer.lineage import RunIdentity
from dtr_trainer.models import BUILT_IN, MODELS
from dtr_trainer.sigterm import TERMINATION

# Defaults chosen by bench/trainer (see bench/trainer/results.md).
# 50 steps per tf.function call: each call ends in a metric read (4 all-reduces) and a trip through
# Python during which neither worker computes; at 10 per call that was 0.812 vs 0.885 scaling
# efficiency (bench/trainer/results.md). Epoch logs and backups are per epoch either way, and Keras
# shortens a call that would cross an epoch's end.
DEFAULT_STEPS_PER_EXECUTION = 50
DEFAULT_BYTES_PER_PACK = 0  # 0 = all gradients in one all-reduce; 128 KiB packs measured worse
DEFAULT_LAZY_METRICS = True  # +9% MWMS examples/s over spe10 alone (bench/trainer/results-lazy.md)
DEFAULT_RETAIN_MEMORY = True  # no page faults per step from malloc trimming (dtr_trainer/memory.py)
DEFAULT_MODEL, DEFAULT_DATASET = "cnn", "mnist"  # without --code

_TASK = "worker-0"
_TERMINATION_PATH: str | None = None  # once the command line is read: where an error line goes too


def log(message: str) -> None:
    print(trainer_line(_TASK, message), file=sys.stderr, flush=True)


# ---------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage dump
        raise UsageError(f"{message} (see --help)")

    def parse_known_args(self, args=None, namespace=None):
        parsed, rest = super().parse_known_args(args, namespace)
        return self._with_code_digest(self._with_model_and_dataset(parsed)), rest

    def _with_code_digest(self, parsed: argparse.Namespace) -> argparse.Namespace:
        """--code-sha256 pins the bytes of a --code file; a module is its image's, pinned by the image's digest."""
        if parsed.code_sha256 is not None and parsed.code is None:
            self.error(f"argument {flags.CODE_SHA256}: only with {flags.CODE} (a file)")
        for flag, value in ((flags.BACKUP_ON_SIGTERM, parsed.backup_on_sigterm),
                            (flags.BACKUP_EVERY_STEPS, parsed.backup_every_steps)):
            if value and not parsed.backup_dir:
                self.error(f"argument {flag}: only with {flags.BACKUP_DIR} (where the saves go)")
        return parsed

    def _with_model_and_dataset(self, parsed: argparse.Namespace) -> argparse.Namespace:
        """Without code of its own the run trains a built-in (defaults cnn on mnist); with it, --model
        has no meaning and --dataset is only passed on to the code (ctx.dataset)."""
        if parsed.code is None and parsed.code_module is None:
            parsed.model = parsed.model or DEFAULT_MODEL
            parsed.dataset = parsed.dataset or DEFAULT_DATASET
        elif parsed.model is not None:
            self.error(f"argument {flags.MODEL}: not allowed with {flags.CODE} or {flags.CODE_MODULE} "
                       "(the code's build_model is the model)")
        return parsed


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m dtr_trainer",
                description="MultiWorkerMirroredStrategy trainer (TF_CONFIG decides the task)")
    p.add_argument(flags.MODEL, choices=MODELS, default=None, help=f"a built-in model [{DEFAULT_MODEL}]")
    sources = p.add_mutually_exclusive_group()
    sources.add_argument(flags.DATASET, default=None,
                         help=f"mnist | fashion_mnist | digits | synthetic | <file>.npz (relative to {flags.DATA_DIR}) "
                              f"[{DEFAULT_DATASET}]; with {flags.CODE}: any text, passed on as ctx.dataset")
    fetch.add_arguments(p, sources)
    code = p.add_mutually_exclusive_group()
    code.add_argument(flags.CODE, default=None, metavar="FILE",
                      help="your own model and data: a Python file defining build_model(ctx) and load_data(ctx) "
                           "(docs/own-model.md)")
    code.add_argument(flags.CODE_MODULE, default=None, metavar="MODULE",
                      help="the same as an importable module (an image built FROM the trainer's)")
    p.add_argument(flags.CODE_SHA256, type=fetch.sha256_hex, default=None, metavar="HEX",
                   help=f"the {flags.CODE} file's SHA-256 as the run recorded it; other bytes are refused (exit "
                        f"{EXIT_CODE_CHANGED}) before any of them runs")
    p.add_argument(flags.METRIC, default=None,
                   help="the evaluation metric the summary heads with [accuracy if the model reports it, else loss]")
    p.add_argument(flags.EPOCHS, type=positive_int, default=3)
    p.add_argument(flags.BATCH_SIZE_PER_WORKER, type=positive_int, default=64)
    p.add_argument(flags.STEPS_PER_EPOCH, type=positive_int, default=None,
                   help="default: training examples // global batch")
    p.add_argument(flags.LEARNING_RATE, type=positive_float, default=0.001)
    p.add_argument(flags.SEED, type=non_negative_int, default=42)
    experiment.add_arguments(p)
    p.add_argument(flags.DATA_DIR, default=layout.data_dir())
    p.add_argument(flags.EXPORT_DIR, required=True, help="the model lands in <export-dir>/<version>/")
    ownership.add_argument(p)
    p.add_argument(flags.BACKUP_DIR, default=None, help="BackupAndRestore state (fault tolerance)")
    p.add_argument(flags.BACKUP_ON_SIGTERM, action="store_true",
                   help=f"with {flags.BACKUP_DIR}: a worker told to stop (SIGTERM) saves with its peers at the end of "
                        "the next execution, so a restart resumes inside the epoch (docs/trainer.md#a-save-on-sigterm)")
    p.add_argument(flags.BACKUP_EVERY_STEPS, type=non_negative_int, default=0, metavar="N",
                   help=f"with {flags.BACKUP_DIR}: also save every N steps inside an epoch, at the end of the "
                        "execution reaching them; 0 = at epochs' ends only [0] (docs/trainer.md#saves-every-n-steps)")
    p.add_argument(flags.BACKUP_URI, default=None, help="s3://bucket/prefix: the backup dir kept there (backup_s3.py)")
    p.add_argument(flags.TENSORBOARD_DIR, default=None, help="TensorBoard logs (chief only)")
    p.add_argument(flags.TERMINATION_MESSAGE_PATH, default=TERMINATION_MESSAGE_PATH)
    p.add_argument(flags.LOG_DIR, default=None,
                   help="also append this worker's log lines to <log-dir>/<task>.log (worker-0.log, ...)")
    tuning = p.add_argument_group("performance (defaults from bench/trainer)")
    tuning.add_argument("--steps-per-execution", type=positive_int, default=DEFAULT_STEPS_PER_EXECUTION)
    tuning.add_argument("--bytes-per-pack", type=non_negative_int, default=DEFAULT_BYTES_PER_PACK,
                        help="gradient all-reduce packing (0 = TensorFlow default)")
    tuning.add_argument("--lazy-metrics", action=argparse.BooleanOptionalAction, default=DEFAULT_LAZY_METRICS,
                        help="read (all-reduce) the training metrics only at the end of each execution")
    tuning.add_argument("--cache", action=argparse.BooleanOptionalAction, default=True,
                        help="cache the decoded training set in memory")
    tuning.add_argument("--threads-from-cpu-limit", action=argparse.BooleanOptionalAction, default=True,
                        help="TensorFlow's compute threads from the container's CPU limit (dtr_trainer/cpus.py; "
                             "TF_NUM_INTRAOP_THREADS, when set, wins)")
    tuning.add_argument("--retain-memory", action=argparse.BooleanOptionalAction, default=DEFAULT_RETAIN_MEMORY,
                        help="keep memory freed by one step for the next (glibc malloc thresholds)")
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


# ---------------------------------------------------------------- TensorFlow steps


def make_strategy(bytes_per_pack: int):
    """The first TF call of the process: MWMS reads TF_CONFIG and starts its gRPC server here."""
    import tensorflow as tf

    from dtr_trainer import replica_threads

    replica_threads.join_promptly()  # each strategy.run traced cost a second of waiting (replica_threads.py)
    options = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=bytes_per_pack,
        implementation=tf.distribute.experimental.CommunicationImplementation.AUTO,
    )
    with TERMINATION.default_while_held():  # a peer that never comes holds the main thread here, GIL and all
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


@dataclass
class TrainOutcome:
    model: object
    evaluation: dict[str, float]  # every figure evaluate() reported, by name
    metric: str  # the headline among them
    examples_per_second: float
    global_batch: int
    steps_per_epoch: int
    stopped_early: dict | None = None  # experiment.stopped_early: a callback of the user's stopped it


def headline(requested: str | None, names: Sequence[str]) -> str:
    """--metric, which the model must report, else dtr_contract.summary.default_metric."""
    if requested is None:
        return summary.default_metric(names)
    if requested not in names:
        raise UsageError(f"{flags.METRIC} {requested}: the model reports {', '.join(names)}")
    return requested


def with_data(ctx: user.Context, loaded: userdata.Data) -> user.Context:
    """build_model's context: load_data's, and what the data say about themselves."""
    return replace(ctx, input_shape=loaded.input_shape, label_shape=loaded.label_shape,
                   num_classes=loaded.num_classes)


def train(args: argparse.Namespace, cluster: ClusterInfo, strategy, code: user.Code, ctx: user.Context,
          loaded: userdata.Data, after_backup: Callable[[], object] | None = None) -> TrainOutcome:
    import tensorflow as tf

    from dtr_trainer.compiling import prepare
    from dtr_trainer.progress import History, Progress, StopOnDivergence, epoch_callbacks

    global_batch = ctx.global_batch_size
    steps = args.steps_per_epoch or data.steps_for(loaded.train_size, global_batch)
    log(f"{cluster.num_workers} worker(s), {strategy.num_replicas_in_sync} replica(s), global batch {global_batch}, "
        f"{steps} steps/epoch, {experiment.sizes(loaded)}; params {experiment.shown(args.params)}")
    with strategy.scope():
        train_ds, eval_ds = data.make_datasets(loaded, global_batch, args.seed, cache=args.cache)
        final_ds = data.evaluation_pipeline(loaded.final, global_batch)
        prepared = prepare(code, with_data(ctx, loaded), loaded, args)
        own = experiment.user_callbacks(code, with_data(ctx, loaded))
    log(prepared.describe())
    model, metric = prepared.model, headline(args.metric, prepared.names)
    iterators.keep_until_exit(model)  # destroying them waited seconds; leave() never does (iterators.py)

    history = History(layout.history_file(args.log_dir), log) if cluster.is_chief and args.log_dir else None
    history = tracking.TRACKER.watching(history)  # each epoch's figures to MLflow too (the chief's, when set)
    progress = Progress(args.epochs, steps * global_batch, log, history)
    backup = step_backup(args, cluster, steps, progress, after_backup)
    stop = experiment.Stop()
    callbacks = epoch_callbacks(StopOnDivergence(args.epochs, steps, args.learning_rate), progress, args.backup_dir,
                                after_backup, backup, experiment.watched(own, stop))
    if cluster.is_chief and args.tensorboard_dir:
        callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=args.tensorboard_dir, profile_batch=0,
                                                        write_graph=False, update_freq="epoch"))
    model.fit(train_ds, epochs=args.epochs, steps_per_epoch=steps, callbacks=callbacks, verbose=0,
              **experiment.fit_validation(eval_ds, args.validate_every))
    stopped = experiment.stopped_early(stop, args.epochs, log)
    experiment.restore_best(own, stop, args.epochs, model, log)
    results = model.evaluate(final_ds, verbose=0, return_dict=True)
    evaluation = {name: float(value) for name, value in results.items()}
    return TrainOutcome(model, evaluation, metric, progress.examples_per_second(), global_batch, steps, stopped)


def step_backup(args: argparse.Namespace, cluster: ClusterInfo, steps: int, progress,
                after_backup: Callable[[], object] | None):
    """The BackupAndRestore that also saves inside an epoch (dtr_trainer.step_backup: --backup-on-sigterm,
    --backup-every-steps), or None: fit's default one."""
    if not (args.backup_on_sigterm or args.backup_every_steps):
        return None
    from dtr_trainer.step_backup import StepBackup

    backup = StepBackup(args.backup_dir, steps, args.steps_per_execution, cluster.num_workers, cluster.worker_index,
                        log, after_backup, on_sigterm=args.backup_on_sigterm, every_steps=args.backup_every_steps)
    progress.resumed_step, progress.steps_per_epoch = backup.resumed_step, steps
    return backup


# ---------------------------------------------------------------- the whole run


def exporter(export_dir: str):
    """Where versions go: export_s3 for a bucket (--export-dir s3://...), export for the volume."""
    return export_s3 if objectstore.is_s3_uri(export_dir) else export


def volume_dirs(args: argparse.Namespace, cluster: ClusterInfo) -> list[str]:
    """The directories this worker writes on the volume: the backup dir; the chief's --export-dir unless a bucket."""
    exports = cluster.is_chief and not objectstore.is_s3_uri(args.export_dir)
    return [d for d in (args.backup_dir, args.export_dir if exports else None) if d]


def claim_export_version(args: argparse.Namespace, run_identity: RunIdentity) -> export.Claim:
    """Chief only, before the strategy: the model name checked and taken if nobody owns it (ownership.py), then a
    version of its own on the volume or in the bucket (docs/models.md)."""
    ownership.admit(args.export_dir, run_identity, args.allowed_publishers, take=True)
    claim = exporter(args.export_dir).claim_version(args.export_dir, args.backup_dir, run_identity)
    removed = exporter(args.export_dir).remove_stale_staging(args.export_dir, claim)
    log(f"model version {claim.version} claimed in {args.export_dir}"
        + (f" (removed stale {', '.join(sorted(removed))})" if removed else ""))
    return claim


def lineage_file(args: argparse.Namespace, cluster: ClusterInfo, run_identity: RunIdentity, origin: user.Origin,
                 outcome: TrainOutcome, claim: export.Claim) -> dict[str, str]:
    """{path inside the version dir: text}: the lineage, written before the version appears."""
    import tensorflow as tf

    training = lineage.Training(
        model=args.model, dataset=args.dataset, code=origin.lineage(), seed=args.seed, epochs=args.epochs,
        batch_size_per_worker=args.batch_size_per_worker, global_batch=outcome.global_batch,
        steps_per_epoch=outcome.steps_per_epoch, learning_rate=args.learning_rate, workers=cluster.num_workers,
        dataset_url=args.dataset_url, dataset_sha256=args.dataset_sha256, params=args.params,
        validate_every=args.validate_every, stopped_early=outcome.stopped_early,
    )
    figures = lineage.Figures(outcome.evaluation, outcome.metric, outcome.examples_per_second)
    doc = lineage.document(run_identity, training, figures, os.path.basename(os.path.normpath(args.export_dir)),
                           claim.version, tf.__version__, lineage.utc_now())
    return {lineage.LINEAGE_PATH: lineage.render(doc)}


def train_or_record_divergence(args: argparse.Namespace, cluster: ClusterInfo, strategy, code: user.Code,
                               ctx: user.Context, loaded: userdata.Data,
                               bucket: backup_s3.BucketBackup | backup_s3.NoCopy) -> TrainOutcome:
    try:
        return train(args, cluster, strategy, code, ctx, loaded, bucket.push)
    except DivergedError as exc:
        divergence.record(args.backup_dir, str(exc))
        bucket.push()
        raise


def before_exit_on_sigterm(line: str) -> None:
    log(line)
    tracking.TRACKER.stopped()
    worker_log.stop()


def meet_the_chief(cluster: ClusterInfo) -> None:
    """Another worker waits for the chief's port to answer, so that the strategy's first connection succeeds
    (rendezvous.py); the chief, and a single process, go on."""
    if not cluster.distributed or cluster.is_chief or cluster.leader is None:
        return
    if not rendezvous.wait_for(cluster.leader):
        log(f"the chief at {cluster.leader} does not answer after {rendezvous.WAIT_SECONDS:.0f} s; "
            "joining the cluster anyway")


def load_code(args: argparse.Namespace, s3_files: Sequence[str] | None = None,
              checked: bytes | None = None) -> user.Code:  # fmt: skip
    """The run's code, imported and its two functions checked (before the strategy: no TF op yet); s3_files: an
    s3:// dataset's files, as the preflight listed them; checked: a --dataset-url file's bytes, as hashed."""
    if args.code is not None:
        return user.load_file(args.code, args.code_sha256)
    if args.code_module is not None:
        return user.load_module(args.code_module)
    if s3_files is not None:
        return user.builtin(args.model, BUILT_IN[args.model], args.dataset, data_s3.loader(args.dataset, s3_files, log))
    data.validate_dataset_name(args.dataset, args.data_dir)
    return user.builtin(args.model, BUILT_IN[args.model], args.dataset, data.loader(args.dataset, checked))


def context(args: argparse.Namespace, cluster: ClusterInfo) -> user.Context:
    return user.Context(
        worker_index=cluster.worker_index, num_workers=cluster.num_workers, is_chief=cluster.is_chief,
        batch_size_per_worker=args.batch_size_per_worker,
        global_batch_size=args.batch_size_per_worker * cluster.num_workers, data_dir=args.data_dir,
        seed=args.seed, epochs=args.epochs, learning_rate=args.learning_rate, dataset=args.dataset,
        params=MappingProxyType(dict(args.params)), log_dir=args.log_dir,
    )  # fmt: skip


def tune_process(args: argparse.Namespace) -> list[str]:
    """Process-wide settings, before TensorFlow starts; what to log of them once the log is set up."""
    threads = cpus.size_thread_pools(os.environ) if args.threads_from_cpu_limit else None
    if args.retain_memory:
        memory.retain_freed_memory()
    return [f"{threads} compute thread(s), the container's CPU limit"] if threads is not None else []


def run(argv: Sequence[str] | None = None) -> int:
    global _TASK, _TERMINATION_PATH
    TERMINATION.install(before_exit_on_sigterm)
    args = parse_args(argv)
    _TERMINATION_PATH = args.termination_message_path
    notes = tune_process(args)
    cluster = parse_tf_config(os.environ.get("TF_CONFIG"))
    _TASK = cluster.name
    run_identity = RunIdentity.from_env(os.environ, warn=log)
    worker_log.start(args.log_dir, cluster.name, run_identity, warn=log)
    for note in notes:
        log(note)
    bucket = backup_s3.pulled(args.backup_uri, args.backup_dir, cluster.is_chief, log)
    divergence.stop_if_recorded(args.backup_dir)
    if (line := export.exported_before(args.backup_dir, run_identity)) is not None:
        log("this run has exported its model already: started again after it ended, nothing to train")
        if cluster.is_chief:
            export.report_summary(line, args.termination_message_path)
        return 0
    ownership.admit(args.export_dir, run_identity)  # every worker, before anything long: may the run publish?
    args.dataset, checked = fetch.dataset_from_args(args, log)  # a --dataset-url file: its path, its bytes as hashed
    code = load_code(args, preflight.checked_files(args.dataset, log), checked)
    del checked  # the loader holds them until it has made the arrays
    volume.check_writable(volume_dirs(args, cluster))
    ctx = context(args, cluster)
    loaded = user.load_data_before_strategy(code, ctx)  # NumPy data checked now; None: it needs TensorFlow
    claim = claim_export_version(args, run_identity) if cluster.is_chief else None
    tracking.start(os.environ, args, cluster.num_workers, run_identity, code.origin.lineage(),
                   claim.version if claim else None, log)  # the chief's MLflow run, when the admin names a server
    bucket.push()  # the claim's record: a chief started again elsewhere publishes the same version

    from dtr_trainer.progress import Heartbeat

    # From the peers' rendezvous to the export, the phases that wait on the other workers: a worker waiting on a
    # frozen peer still beats, the frozen one does not (the operator's stall watchdog names it).
    with Heartbeat(trainer_line(_TASK, HEARTBEAT)):
        meet_the_chief(cluster)
        strategy = make_strategy(args.bytes_per_pack)
        if loaded is None:
            loaded = user.load_data_after_strategy(code, ctx)
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the summary, whatever the code prints
            outcome = train_or_record_divergence(args, cluster, strategy, code, ctx, loaded, bucket)
        extra = lineage_file(args, cluster, run_identity, code.origin, outcome, claim) if claim else None
        recheck = partial(ownership.admit, args.export_dir, run_identity)  # the chief's, just before it publishes
        path = exporter(args.export_dir).save_everywhere(outcome.model, args.export_dir, claim, cluster.is_chief,
                                                         extra, not code.builtin, recheck)  # built-in: Keras only
    if claim is None:
        log(f"done: {outcome.metric}={outcome.evaluation[outcome.metric]:.4f} (the chief exports the model)")
        return 0
    line = summary.summary_json(outcome.evaluation, outcome.metric, args.epochs, outcome.examples_per_second,
                               str(path), claim.version, outcome.stopped_early)
    export.report_summary(line, args.termination_message_path)
    export.record_exported(args.backup_dir, run_identity, line)
    export.clear_backup(args.backup_dir)
    bucket.push()
    tracking.TRACKER.finish(outcome.evaluation, args.epochs, str(path), extra)  # bounded: tracking.FINISH_WAIT
    log(f"model exported to {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's INFO chatter out of pod logs
    try:
        return _run_reporting_errors(argv)
    finally:
        worker_log.stop()  # after the error line: it belongs in the worker's file too


def report_error(message: str) -> None:
    """The error line on stderr, and as the termination message (the run's status shows it); none when a SIGTERM
    was put off meanwhile (dtr_trainer.sigterm): the trainer stops as terminated instead."""
    TERMINATION.stop_if_requested()
    tracking.TRACKER.failed()  # the MLflow run FAILED (bounded), before the error line: it stays the last
    log(f"error: {message}")
    if _TERMINATION_PATH:
        try:
            with open(_TERMINATION_PATH, "w") as f:
                f.write(trainer_line(_TASK, f"error: {message}") + "\n")
        except OSError:
            pass  # stderr has it; Kubernetes falls back to the log's tail


def _run_reporting_errors(argv: Sequence[str] | None) -> int:
    try:
        return run(argv)
    except TrainerError as exc:
        if os.environ.get("DTR_TRACEBACK") and exc.__cause__ is not None:
            import traceback

            traceback.print_exception(type(exc.__cause__), exc.__cause__, exc.__cause__.__traceback__)
        report_error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    except Exception as exc:  # classified: never a stack trace for the user
        if os.environ.get("DTR_TRACEBACK"):
            import traceback

            traceback.print_exc()
        message, code = failures.classified(exc)
        report_error(message)
        return code


def leave(code: int) -> None:
    """Exit now with `code`, after the atexit handlers (logging's flush among them) and flushing stdout and stderr,
    without the interpreter's finalization: nothing is left to clean up by then (the model, the summary, the
    logs are written and closed), and finalizing TensorFlow took 2.2 to 2.6 s of a finished run
    (docs/performance.md#the-trainers-time-outside-its-epochs). After a lost peer its collective threads also
    aborted the process there (SIGABRT, "terminate called without an active exception") and the exit code that
    says why (138) was lost."""
    atexit._run_exitfuncs()  # what sys.exit would have run, in the same order
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(ValueError, OSError):  # closed by a logging handler's close at exit (absl's)
            stream.flush()
    os._exit(code)


def cli() -> None:
    pid1.supervise_if_pid_1()  # the trainer is its child in a container
    leave(main())
