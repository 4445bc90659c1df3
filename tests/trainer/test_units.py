"""Pure functions of the trainer (no TensorFlow process): TF_CONFIG, data shaping, versions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from dtr_contract import exits, summary
from dtr_trainer import compiling, data, divergence, errors, export, failures, main, models, user, userdata
from dtr_trainer.cluster import LOCAL, parse_tf_config
from dtr_trainer.errors import ConfigError, DataError
from dtr_trainer.lineage import RunIdentity


def cfg(cluster, task) -> str:
    return json.dumps({"cluster": cluster, "task": task})


@pytest.mark.parametrize("raw, expected", [
    (None, (LOCAL.task_type, 0, 1, True, False)),
    ("  ", (LOCAL.task_type, 0, 1, True, False)),
    (cfg({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": 0}), ("worker", 0, 2, True, True)),
    (cfg({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": 1}), ("worker", 1, 2, False, True)),
    (cfg({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": "1"}), ("worker", 1, 2, False, True)),
    (cfg({"chief": ["c:1"], "worker": ["a:1"]}, {"type": "chief", "index": 0}), ("chief", 0, 2, True, True)),
    (cfg({"chief": ["c:1"], "worker": ["a:1"]}, {"type": "worker", "index": 0}), ("worker", 0, 2, False, True)),
])
def test_parse_tf_config(raw, expected):
    info = parse_tf_config(raw)
    assert (info.task_type, info.task_index, info.num_workers, info.is_chief, info.distributed) == expected


@pytest.mark.parametrize("raw", [
    "[]", "{", cfg({}, {"type": "worker", "index": 0}), cfg({"worker": "a:1"}, {"type": "worker", "index": 0}),
    cfg({"worker": ["a:1"]}, {"type": "ps", "index": 0}), cfg({"worker": ["a:1"]}, {"type": "worker", "index": -1}),
    cfg({"worker": ["a:1"]}, {"type": "worker", "index": True}),
    cfg({"worker": ["nohost"]}, {"type": "worker", "index": 0}),
    cfg({"chief": ["a:1", "b:1"]}, {"type": "chief", "index": 0}),
])
def test_parse_tf_config_rejects(raw):
    with pytest.raises(ConfigError, match="bad TF_CONFIG"):
        parse_tf_config(raw)


@pytest.mark.parametrize("raw, why", [
    (cfg({"worker": ["a:1"], "ps": ["p:1"]}, {"type": "worker", "index": 0}),
     "unsupported jobs ['ps'] (MultiWorkerMirroredStrategy uses chief/worker only)"),
    (cfg({"worker": ["a:1"]}, {"type": "worker", "index": "one"}), "task.index must be an integer, got 'one'"),
    (cfg({"chief": ["c:1"], "worker": ["a:1"]}, {"type": "chief", "index": 1}),
     "task chief/1 is not in cluster.chief (1 tasks)"),
])
def test_parse_tf_config_says_why(raw, why):
    with pytest.raises(ConfigError) as err:
        parse_tf_config(raw)
    assert str(err.value) == f"bad TF_CONFIG: {why}"


def test_upscale_digits_shape_and_range():
    x = data.upscale_digits(np.full((2, 8, 8), 16.0))
    assert x.shape == (2, 28, 28, 1) and x.dtype == np.float32
    assert x[:, 2:26, 2:26].min() == 1.0 and x[:, :2].max() == 0.0 and x[:, :, 26:].max() == 0.0


def test_to_unit_images_scales_uint8_and_rejects_bad_floats():
    assert data.to_unit_images(np.full((1, 28, 28), 255, np.uint8), "t").max() == 1.0
    with pytest.raises(DataError, match="in \\[0, 1\\]"):
        data.to_unit_images(np.full((1, 28, 28), 2.0), "t")


@pytest.mark.parametrize("x, why", [
    (np.zeros((1, 13)), ("the built-in models train on images [N,H,W] or [N,H,W,C], got [1, 13]; for other data, "
                        "write your own model and loader (docs/own-model.md)")),
    (np.zeros((0, 28, 28)), "no images"),
    (np.full((1, 28, 28), -1, np.int16), "integer pixels must be in 0..255"),
    (np.full((1, 28, 28), "a"), "images must be integers 0..255 or floats 0..1, got <U1"),
    (np.full((1, 28, 28, 1), np.nan), "float pixels must be finite and in [0, 1]"),
])
def test_to_unit_images_says_why(x, why):
    with pytest.raises(DataError) as err:
        data.to_unit_images(x, "t")
    assert str(err.value) == f"t: {why}"


def test_to_unit_images_keeps_unit_floats():
    x = np.linspace(0.0, 1.0, 28 * 28).reshape(1, 28, 28, 1)
    out = data.to_unit_images(x, "t")
    assert out.dtype == np.float32 and out.shape == (1, 28, 28, 1) and np.allclose(out, x)


def test_to_labels_takes_any_number_of_classes_and_rejects_the_rest():
    assert data.to_labels(np.array([0, 10, 3.0]), 3, "t").tolist() == [0, 10, 3]
    for bad in (np.array([0, -1]), np.array([0.5, 1.0])):
        with pytest.raises(DataError, match=r"class numbers 0, 1, \.\.\.") as err:
            data.to_labels(bad, 2, "t")
        assert "docs/own-model.md" in str(err.value)


def test_an_npz_of_any_image_shape_and_class_count(tmp_path):
    x = np.random.RandomState(0).randint(0, 256, (12, 20, 30, 3)).astype(np.uint8)
    np.savez(tmp_path / "rgb.npz", x_train=x, y_train=np.arange(12) % 4)
    splits = data.load_arrays("rgb.npz", str(tmp_path), seed=0)
    assert splits.x_train.shape[1:] == (20, 30, 3) and splits.x_train.max() <= 1.0
    described = userdata.describe(splits.pairs())
    assert (described.input_shape, described.num_classes) == ((20, 30, 3), 4)


def test_hold_out_is_seeded_and_disjoint():
    x, y = np.arange(100).reshape(100, 1), np.arange(100) % 10
    a, b = data.hold_out(x, y, seed=1), data.hold_out(x, y, seed=1)
    assert np.array_equal(a.x_eval, b.x_eval) and a.x_eval.shape[0] == 20
    assert not set(a.x_train.ravel()) & set(a.x_eval.ravel())


def test_digits_are_real_and_split(tmp_path):
    splits = data.load_arrays("digits", str(tmp_path), seed=0)
    assert splits.train_size + splits.x_eval.shape[0] == 1797
    assert splits.x_train.min() >= 0.0 and splits.x_train.max() == 1.0


def test_npz_without_test_split_holds_out(tmp_path):
    np.savez(tmp_path / "d.npz", x_train=np.zeros((10, 28, 28, 1), np.float32), y_train=np.arange(10))
    splits = data.load_arrays("d.npz", str(tmp_path), seed=0)
    assert (splits.train_size, splits.x_eval.shape[0]) == (8, 2)


@pytest.mark.parametrize("name, message", [
    ("/etc/passwd.npz", "relative"), ("../x.npz", "escapes"), ("sub/../../x.npz", "escapes"),
    ("missing.npz", "not found"), ("x.csv", "unknown dataset"),
])
def test_resolve_npz_refuses(tmp_path, name, message):
    (tmp_path / "data").mkdir()
    (tmp_path / "x.npz").write_bytes(b"")
    with pytest.raises(DataError, match=message):
        data.resolve_npz(str(tmp_path / "data"), name)


def test_resolve_npz_refuses_symlink_out(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "x.npz").write_bytes(b"")
    (tmp_path / "data" / "link.npz").symlink_to(tmp_path / "x.npz")
    with pytest.raises(DataError, match="escapes"):
        data.resolve_npz(str(tmp_path / "data"), "link.npz")


@pytest.mark.parametrize("names, expected", [
    ([], 1), (["1", "2", "x", ".staging-3-ab"], 3), (["10", "9"], 11), (["1", "claim-1", "claim-2"], 3),
    (["claim-x", "-1", "claim-", "staging-4-ab-cd"], 1),
])
def test_next_version(names, expected):
    assert export.next_version(names) == expected


def test_claim_version_is_recorded_and_reused(tmp_path):
    models, backup = tmp_path / "models", tmp_path / "backup"
    (models / "4").mkdir(parents=True)
    run = RunIdentity(name="r", uid="u1")
    claim = export.claim_version(str(models), str(backup), run)
    assert claim.version == 5
    assert export.claim_token(str(models), 5) == claim.token
    (models / "5").mkdir()  # exported, then the chief restarted
    assert export.claim_version(str(models), str(backup), run) == claim
    export.clear_backup(str(backup))
    assert export.claim_version(str(models), str(backup), run).version == 6
def test_the_summary_line_is_one_line_the_operator_reads_back_on_the_trainers_python():
    line = summary.summary_json({"loss": 0.1, "accuracy": 0.95}, "accuracy", 3, 1234.56, "/mnt/dtr/models/m/1", 1)
    assert "\n" not in line
    assert summary.parse_summary(f"a log line\n{line}\n") == summary.Summary(
        loss=0.1, accuracy=0.95, epochs=3, examples_per_second=1234.6, model_path="/mnt/dtr/models/m/1",
        model_version=1, metric="accuracy", evaluation=(("accuracy", 0.95), ("loss", 0.1)))


def test_a_regression_summary_has_its_own_metrics_and_no_accuracy():
    line = summary.summary_json({"loss": 0.5, "mae": 0.25}, "mae", 2, 10.0, "/m/1", 1)
    assert json.loads(line)["metrics"] == {"loss": 0.5, "mae": 0.25} and "accuracy" not in json.loads(line)
    read = summary.parse_summary(line)
    assert read.accuracy is None and read.headline() == ("mae", 0.25)


@pytest.mark.parametrize("names, requested, expected", [
    (["loss", "accuracy"], None, "accuracy"), (["loss", "mae"], None, "loss"), (["loss", "mae"], "mae", "mae"),
])
def test_the_headline_metric(names, requested, expected):
    assert main.headline(requested, names) == expected


def test_a_headline_the_model_does_not_report_is_a_usage_error():
    with pytest.raises(errors.UsageError, match="--metric auc: the model reports loss, mae"):
        main.headline("auc", ["loss", "mae"])


@pytest.mark.parametrize("argv, why", [
    (["--code", "a.py", "--code-module", "m"], "not allowed with argument --code"),
    (["--code", "a.py", "--model", "cnn"], "--model: not allowed with --code or --code-module"),
])
def test_code_excludes_a_second_code_and_a_built_in_model(argv, why):
    with pytest.raises(errors.UsageError, match=why):
        main.parse_args([*argv, "--export-dir", "/x"])


def test_with_code_the_dataset_is_passed_on_as_given_and_the_built_ins_have_defaults():
    assert (main.parse_args(["--code", "a.py", "--export-dir", "/x"]).dataset, ) == (None, )
    assert main.parse_args(["--code", "a.py", "--dataset", "wine.npz", "--export-dir", "/x"]).dataset == "wine.npz"
    parsed = main.parse_args(["--export-dir", "/x"])
    assert (parsed.model, parsed.dataset, parsed.metric) == ("cnn", "mnist", None)


def test_the_worker_index_counts_the_chief_first():
    cluster = {"chief": ["c:1"], "worker": ["a:1", "b:1"]}
    assert [parse_tf_config(cfg(cluster, {"type": t, "index": i})).worker_index
            for t, i in (("chief", 0), ("worker", 0), ("worker", 1))] == [0, 1, 2]


@pytest.mark.parametrize("labels, units, activation, expected", [
    (np.arange(6) % 3, 3, "softmax", ("sparse_categorical_crossentropy", False, "accuracy")),
    (np.arange(6) % 3, 5, "linear", ("sparse_categorical_crossentropy", True, "accuracy")),
    (np.arange(6) % 2, 1, "sigmoid", ("binary_crossentropy", False, "accuracy")),
    (np.arange(6) % 2, 1, None, ("binary_crossentropy", True, "accuracy")),
    (np.linspace(0, 1, 6), 1, None, ("mse", False, "mae")),
])
def test_the_loss_rule(labels, units, activation, expected):
    described = userdata.describe(((np.ones((6, 2)), labels), (np.ones((2, 2)), labels[:2])))
    rule = compiling.choose_rule(described, units, activation)
    assert (rule.loss, rule.from_logits, rule.metric) == expected


def test_regression_shapes_must_match_a_trailing_one_aside():
    compiling.check_regression_shapes((), (1,))
    compiling.check_regression_shapes((3,), (3,))
    with pytest.raises(ValueError, match=r"outputs \[3\] per example but the targets have shape \[\]"):
        compiling.check_regression_shapes((), (3,))


@pytest.mark.parametrize("shape, classes, why", [
    ((13,), 3, "trains on images [H, W, C], and these examples have shape [13]"),
    ((8, 8, 1), 10, "needs images of at least 18x18, got 8x8"),
    ((28, 28, 1), None, "the labels are not integers"),
    ((28, 28, 1), 1, "the labels are all 0"),
])
def test_a_built_in_model_refuses_data_it_cannot_take(shape, classes, why):
    ctx = user.Context(0, 1, True, 8, 8, "/d", 0, 1, 0.1, None, input_shape=shape, label_shape=(),
                       num_classes=classes)
    with pytest.raises(DataError) as err:
        models.image_shape(ctx, "cnn")
    assert why in str(err.value) and "docs/own-model.md" in str(err.value)


def test_the_trainers_exit_codes_fall_in_the_classes_the_operator_acts_on():
    permanent = [errors.EXIT_INTERNAL, errors.EXIT_USAGE, errors.EXIT_TF_CONFIG, errors.EXIT_DATA,
                 errors.EXIT_DOWNLOAD, errors.EXIT_EXPORT, errors.EXIT_VOLUME, errors.EXIT_USER_CODE,
                 errors.EXIT_DIVERGED]
    assert not any(exits.is_retryable(code) for code in permanent) and len(set(permanent)) == len(permanent)
    assert exits.is_user_code(errors.EXIT_USER_CODE) and not exits.is_user_code(errors.EXIT_DATA)
    assert exits.is_diverged(errors.DivergedError.exit_code) and not exits.is_diverged(errors.EXIT_USER_CODE)
    assert exits.is_retryable(errors.EXIT_PEER_LOST) and exits.is_peer_lost(errors.EXIT_PEER_LOST)
    assert exits.is_retryable(errors.EXIT_TERMINATED) and not exits.is_peer_lost(errors.EXIT_TERMINATED)


@pytest.mark.parametrize("type_name, message, retryable", [
    ("UnavailableError", "Graph execution error:\n\nConnection reset by peer", True),
    ("DeadlineExceededError", "collective timed out", True),
    ("InternalError", "Socket closed", True),
    ("InvalidArgumentError", "Only compiling NCCL/auto collective is supported, got: ring", False),
    ("UnimplementedError", "Collectives are not yet implemented for CPU devices when compiling with XLA", False),
    ("ValueError", "unavailable", False),
])
def test_is_peer_failure(type_name, message, retryable):
    assert failures.is_peer_failure(type_name, message) is retryable


@pytest.mark.parametrize(("message", "code"), [
    ("UnknownError: : curlCode: 7, Couldn't connect to server", exits.OBJECT_STORE_UNREACHABLE),
    ("Graph execution error:\n\nUnknownError: curlCode: 28, Timeout was reached", exits.OBJECT_STORE_UNREACHABLE),
    ("PermissionDenied: AccessDenied: curlCode: 0", errors.EXIT_INTERNAL),  # the keys: not a store away
    ("Connection reset by peer", errors.EXIT_PEER_LOST),
])
def test_a_store_away_under_tensorflow_is_retryable_and_says_so(message: str, code: int, monkeypatch):
    monkeypatch.setenv("S3_ENDPOINT", "http://s3.example:8333")
    line, got = failures.classified(RuntimeError(message) if code != errors.EXIT_PEER_LOST else
                                    type("InternalError", (Exception,), {})(message))  # fmt: skip
    assert got == code, line
    if code == exits.OBJECT_STORE_UNREACHABLE:
        assert line.startswith("the object store http://s3.example:8333 does not answer") and "tries again" in line


def test_one_line_skips_the_node_trace():
    message = ("Graph execution error:\n\nDetected at node 'x' defined at (most recent call last):\n"
               "    File \"a.py\", line 1\nNode: 'x'\nConnection reset by peer\n\t [[{{node x}}]]")
    assert errors.one_line(message, "UnavailableError") == "Connection reset by peer"
    assert errors.one_line("Graph execution error:\n", "UnavailableError") == "UnavailableError"


@pytest.mark.parametrize("logs, loss", [
    ({"loss": np.float32("nan"), "accuracy": 0.1}, "nan"),
    ({"loss": float("inf")}, "inf"),
    ({"loss": np.float64("-inf")}, "-inf"),
    ({"loss": np.float32(2.5), "accuracy": float("nan")}, None),  # only the loss: a metric may be NaN for a while
    ({"loss": 1e30}, None),  # huge is not yet diverged
    ({"accuracy": float("nan")}, None),
    ({"loss": "not a number"}, None),
    ({}, None),
    (None, None),
])  # fmt: skip
def test_a_run_has_diverged_when_its_loss_is_nan_or_infinite(logs, loss):
    found = divergence.non_finite_loss(logs)
    assert (None if found is None else str(found)) == loss


def test_the_divergence_line_names_the_epoch_the_step_and_the_learning_rate():
    line = divergence.diverged_message(float("nan"), 3, 10, 50, 117, 5.0)
    assert line.startswith("training diverged: the loss became nan in epoch 3/10 (by step 50/117, learning rate 5)")
    assert "lower the learning rate" in line and "\n" not in line
    assert "learning rate" not in divergence.diverged_message(float("inf"), 1, 1, 1, 1, None).split(";")[0]


def test_the_divergence_record_beside_the_backup(tmp_path):
    backup = str(tmp_path / "backup" / "run" / "uid")
    assert divergence.recorded(backup) is None and divergence.recorded(None) is None
    divergence.record(backup, "training diverged: the loss became nan in epoch 1/3 (by step 4/4)")
    assert divergence.recorded(backup) == "training diverged: the loss became nan in epoch 1/3 (by step 4/4)"
    assert [p.name for p in Path(backup).iterdir()] == [divergence.RECORD], "no partial file left"
    divergence.record(None, "nowhere")  # no --backup-dir: nothing to keep


def test_leave_runs_the_atexit_handlers_flushes_and_exits_with_the_code():
    """main.leave skips only the interpreter's finalization (TensorFlow's took seconds after a finished run)."""
    import subprocess
    import sys

    script = ("import atexit, logging, sys\n"
              "from dtr_trainer.main import leave\n"
              "atexit.register(lambda: print('atexit ran', flush=True))\n"
              "logging.basicConfig(stream=sys.stderr)\n"
              "print('summary', end='')\n"
              "logging.warning('logged')\n"
              "leave(7)\n"
              "print('never')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (7, "summaryatexit ran\n")
    assert "logged" in done.stderr


def test_digits_are_scikit_learns_without_importing_it():
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    images, labels = data.digits_arrays()
    bunch = load_digits()
    assert images.dtype == bunch.images.dtype and labels.dtype == bunch.target.dtype
    np.testing.assert_array_equal(images, bunch.images)
    np.testing.assert_array_equal(labels, bunch.target)
    # the reason: the built-in dataset is read in a process that never imports scikit-learn
    probe = ("import sys; from dtr_trainer import data; data.DATASETS['digits']('/nowhere', 42); "
             "print('sklearn' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "False\n"


@pytest.mark.parametrize("cluster, task, leader", [
    ({"worker": ["w0:1", "w1:1"]}, {"type": "worker", "index": 1}, "w0:1"),
    ({"chief": ["c:2"], "worker": ["w0:1"]}, {"type": "worker", "index": 0}, "c:2"),
    ({"chief": ["c:2"], "worker": ["w0:1"]}, {"type": "chief", "index": 0}, "c:2"),
])
def test_the_leader_is_the_chief_s_address(cluster, task, leader):
    assert parse_tf_config(cfg(cluster, task)).leader == leader
    assert LOCAL.leader is None


def test_a_worker_polls_the_chief_until_it_answers_or_gives_up():
    from dtr_trainer import rendezvous

    clock = iter(range(100))
    answers = iter([False] * 12 + [True])
    naps = []
    assert rendezvous.wait_for("c:1", 50, lambda a: next(answers), lambda: next(clock), naps.append)
    assert naps[:3] == pytest.approx([0.05, 0.075, 0.1125]) and naps[-1] == rendezvous.MAX_POLL_SECONDS
    assert len(naps) == 12
    clock = iter(range(100))
    assert not rendezvous.wait_for("c:1", 3, lambda a: False, lambda: next(clock), lambda s: None)


def test_answers_is_a_tcp_connection():
    import socket

    from dtr_trainer import rendezvous

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        assert rendezvous.answers(address)
    assert not rendezvous.answers(address)  # closed now
    assert not rendezvous.answers("127.0.0.1:not-a-port") and not rendezvous.answers("nonsense")


def test_the_export_record_is_kept_by_clear_backup_and_read_only_for_the_same_run(tmp_path):
    backup = tmp_path / "backup"
    (backup / "chief").mkdir(parents=True)
    run = RunIdentity(name="r", uid="u1")
    export.record_exported(str(backup), run, '{"modelVersion": 1}')
    export.clear_backup(str(backup))
    assert [p.name for p in backup.iterdir()] == [export.EXPORTED_RECORD]
    assert export.exported_before(str(backup), run) == '{"modelVersion": 1}'
    assert export.exported_before(str(backup), RunIdentity(name="r", uid="u2")) is None  # a new run of that name
    assert export.exported_before(str(backup), RunIdentity(name="r")) is None  # a local run has no uid
    export.record_exported(str(tmp_path / "local"), RunIdentity(name="r"), "{}")
    assert not (tmp_path / "local").exists()  # locally each dtr run trains
    (backup / export.EXPORTED_RECORD).write_text("not json")
    assert export.exported_before(str(backup), run) is None


def test_files_larger_than_32_mib_warn_once_naming_the_largest():
    from dtr_trainer import preflight

    assert preflight.large_files_warning([8 * 2**20] * 100) is None
    warning = preflight.large_files_warning([8 * 2**20, 33 * 2**20, 150 * 2**20])
    assert warning is not None and warning.startswith("warning: 2 file(s) over 32 MiB (the largest 150 MiB)")
    assert "docs/object-storage.md#memory" in warning
