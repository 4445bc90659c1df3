"""`dtr render` (through main(), as a user runs it), the operator settings, and the one way from a command's error
to its exit code."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import yaml
from dtr_cli import cli
from dtr_cli.command import EXIT_BAD_INPUT, BadInput, Failed, run_command
from dtr_client import InvalidRun, RunNotFound, TensorBoardError
from dtr_client.copier import CopyError
from dtr_client.local.source import RunError
from dtr_client.local.translate import TranslateError
from dtr_client.logs import LogsError
from dtr_client.runfile import RunFileError
from dtr_client.submit import SubmitError
from dtr_client.transfer import TransferError
from dtr_operator import settings as cfg
from dtr_operator.kube import ApiError, NoCredentials
from dtr_operator.settings import SettingsError
from dtr_operator.spec import SpecError

from support.repo import REPO


def render_docs(capsys, *argv):
    assert cli.main(["render", *argv]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def test_render_mnist_example(capsys):
    pvc, job = render_docs(capsys, str(REPO / "examples" / "mnist.yaml"))
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["metadata"]["name"] == "mnist-cnn-data"
    assert job["kind"] == "TFJob" and job["metadata"]["name"] == "mnist-cnn"
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    (container,) = worker["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow"
    assert container["ports"][0]["name"] == "tfjob-port" and container["ports"][0]["containerPort"] == 2222
    assert container["volumeMounts"][0]["mountPath"] == "/mnt/dtr"
    assert worker["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "mnist-cnn-data"
    args = container["args"]
    assert args[args.index("--dataset") + 1] == "mnist"
    assert args[args.index("--export-dir") + 1] == "/mnt/dtr/models/mnist-cnn"
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}


def test_render_digits_example_is_offline_data(capsys):
    _, job = render_docs(capsys, str(REPO / "examples" / "digits.yaml"))
    args = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--dataset") + 1] == "digits"


def test_render_uses_the_trainer_image_flag(capsys):
    _, job = render_docs(capsys, str(REPO / "examples" / "digits.yaml"), "--trainer-image", "reg/t:9")
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] == "reg/t:9"


def test_render_several_runs_and_an_existing_claim(tmp_path, capsys):
    f = tmp_path / "runs.yaml"
    f.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n"
        "apiVersion: distml.dev/v1alpha1\nkind: DistTrainingRun\nmetadata: {name: a}\n"
        "spec: {storage: {claimName: shared}}\n---\n"
        "apiVersion: distml.dev/v1alpha1\nkind: DistTrainingRun\nmetadata: {name: b}\n"
    )
    kinds = [(d["kind"], d["metadata"]["name"]) for d in render_docs(capsys, str(f))]
    assert kinds == [("TFJob", "a"), ("PersistentVolumeClaim", "b-data"), ("TFJob", "b")]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "No such file"),
        ("a: [1\n", "run.yaml: line 2 not valid YAML: expected ',' or ']'"),
        ("a: \x07\n", "run.yaml: not valid YAML: unacceptable character #x0007"),
        ("", "no DistTrainingRun in this file (found nothing; want apiVersion"),
        ("- 1\n", "must be a mapping"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
         "no DistTrainingRun in this file (found Pod; want apiVersion: distml.dev/v1alpha1, kind: DistTrainingRun)"),
        ("kind: DistTrainingRun\nmetadata: {name: r}\n", "apiVersion not set (want apiVersion: distml.dev/v1alpha1"),
        ("apiVersion: distml.dev/v1alpha1\nmetadata: {name: r}\n", "kind not set"),
        ("apiVersion: v1\nkind: Pod\n---\napiVersion: distml.dev/v1\nkind: DistTrainingRun\n",
         "document 2: apiVersion distml.dev/v1 is not served for DistTrainingRun: use distml.dev/v1alpha1"),
        (
            "apiVersion: distml.dev/v1alpha1\nkind: DistTrainingRun\nmetadata: {name: r}\nspec: {workers: 0}\n",
            "DistTrainingRun r: spec.workers: must be between 1 and 64, got 0",
        ),
        (
            ("apiVersion: distml.dev/v1alpha1\nkind: DistTrainingRun\nmetadata: {name: r}\n"
             "spec: {workers: 2, ttlSecondsAfterFinished: 5}\n"),
            "spec.ttlSecondsAfterFinished: must be at least 60, got 5",
        ),
    ],
)
def test_render_errors_are_one_clear_line(tmp_path, capsys, content, expected):
    f = tmp_path / "run.yaml"
    if content is not None:
        f.write_text(content)
    assert cli.main(["render", str(f)]) == EXIT_BAD_INPUT
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith("dtr render: ") and expected in out.err and out.err.count("\n") == 1


def test_render_lists_every_error_of_a_run_each_with_its_field_and_near_misses_named(tmp_path, capsys):
    f = tmp_path / "run.yaml"
    f.write_text("apiVersion: distml.dev/v1alpha1\nkind: DistTrainingRun\nmetadata: {name: Bad_Name}\n"
                 "spec: {workrs: 2, restartPolicy: onfailure, backoffLimit: 500, training: {epochs: 0, modle: cnn}}\n")
    assert cli.main(["render", str(f)]) == EXIT_BAD_INPUT
    head, *lines = capsys.readouterr().err.splitlines()
    assert head == f"dtr render: {f}: DistTrainingRun Bad_Name: 6 errors:"
    fields = [line.split(":")[0].strip() for line in lines]
    assert fields == ["metadata.name", "spec.workrs", "spec.training.modle", "spec.training.epochs",
                      "spec.restartPolicy", "spec.backoffLimit"]  # fmt: skip
    assert "unknown field (did you mean 'workers'?)" in lines[1] and "(did you mean 'model'?)" in lines[2]
    assert "unsupported value 'onfailure' (did you mean 'OnFailure'?)" in lines[4]


@pytest.mark.parametrize("command", ["render", "run", "logs", "operator"])
def test_an_unknown_option_is_named_with_its_subcommands_usage(capsys, command):
    args = [] if command == "operator" else ["examples/digits.yaml"]
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--bogus", *args])
    assert exit_.value.code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith(f"usage: dtr {command} ") and f"dtr {command}: error: unrecognized arguments: --bogus" in err


def _operator_args(*argv):
    p = argparse.ArgumentParser()
    cfg.add_arguments(p)
    return p.parse_args(list(argv))


def test_settings_defaults():
    s = cfg.from_args(_operator_args(), {})
    assert s == cfg.Settings()
    assert s.all_namespaces and s.trainer_image == cfg.DEFAULT_TRAINER_IMAGE and s.log_format == "plain"
    assert s.liveness_endpoint == "http://0.0.0.0:8080/healthz" and s.metrics_port == 9090


def test_settings_from_env():
    env = {
        "DTR_NAMESPACE": "a, b",
        "DTR_TRAINER_IMAGE": "reg/t:2",
        "DTR_LOG_FORMAT": "json",
        "DTR_LIVENESS_PORT": "0",
        "DTR_METRICS_PORT": "9999",
    }
    s = cfg.from_args(_operator_args(), env)
    assert s.namespaces == ("a", "b") and not s.all_namespaces
    assert s.trainer_image == "reg/t:2" and s.log_format == "json"
    assert s.liveness_endpoint is None and s.metrics_port == 9999


def test_flags_win_over_env():
    env = {"DTR_NAMESPACE": "a", "DTR_TRAINER_IMAGE": "reg/t:2", "DTR_LIVENESS_PORT": "1"}
    args = _operator_args("-n", "x", "--namespace", "y,z", "--trainer-image", "i:3", "--liveness-port", "0")
    s = cfg.from_args(args, env)
    assert s.namespaces == ("x", "y", "z") and s.trainer_image == "i:3" and s.liveness_port == 0
    assert cfg.from_args(_operator_args("--all-namespaces"), env).all_namespaces


def test_progress_interval_default_env_flag_and_off():
    assert cfg.from_args(_operator_args(), {}).progress_interval == 5.0
    assert cfg.from_args(_operator_args(), {"DTR_PROGRESS_INTERVAL": "2"}).progress_interval == 2.0
    flag = _operator_args("--progress-interval", "0")
    assert cfg.from_args(flag, {"DTR_PROGRESS_INTERVAL": "2"}).progress_interval == 0


@pytest.mark.parametrize(
    ("env", "argv", "named"),
    [
        ({"DTR_LOG_FORMAT": "xml"}, (), "DTR_LOG_FORMAT"),
        ({"DTR_LIVENESS_PORT": "http"}, (), "DTR_LIVENESS_PORT"),
        ({"DTR_METRICS_PORT": "70000"}, (), "DTR_METRICS_PORT"),
        ({}, ("--metrics-port", "-1"), "--metrics-port"),
        ({"DTR_PROGRESS_INTERVAL": "soon"}, (), "DTR_PROGRESS_INTERVAL"),
        ({}, ("--progress-interval", "0.5"), "--progress-interval"),
        ({}, ("--progress-interval", "7200"), "--progress-interval"),
    ],
)
def test_bad_settings_name_the_setting(env, argv, named):
    with pytest.raises(cfg.SettingsError, match=named):
        cfg.from_args(_operator_args(*argv), env)


def test_operator_with_bad_settings_exits_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv("DTR_LOG_FORMAT", "xml")
    assert cli.main(["operator"]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err.startswith("dtr operator: DTR_LOG_FORMAT: must be plain or json")


def test_operator_without_credentials_exits_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli.main(["operator", "--liveness-port", "0", "--metrics-port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dtr operator: no Kubernetes credentials") and str(tmp_path / "missing") in err
    assert err.count("\n") == 1


def test_the_operator_command_loads_none_of_the_local_tooling():
    """`dtr operator` imports what it runs: not `dtr run`'s runner, translate or kubelet modules."""
    code = (
        "import sys\n"
        "from dtr_cli import cli\n"
        "cli.build_parser().parse_args(['operator', '--all-namespaces'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('dtr_client.local')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_allowed_images_default_to_the_default_image_only():
    s = cfg.from_args(_operator_args(), {})
    assert s.image_refusal(cfg.DEFAULT_TRAINER_IMAGE) is None
    refusal = s.image_refusal("busybox:1.36")
    assert refusal and "--allowed-images" in refusal and f"only the default {cfg.DEFAULT_TRAINER_IMAGE}" in refusal


def test_allowed_images_are_globs_from_env_or_flag():
    env = {"DTR_ALLOWED_IMAGES": "registry.example.com/ml/*, distml/trainer:*"}
    s = cfg.from_args(_operator_args(), env)
    assert s.allowed_images == ("registry.example.com/ml/*", "distml/trainer:*")
    assert s.image_refusal("registry.example.com/ml/trainer:2") is None
    assert s.image_refusal("distml/trainer:0.2.0") is None
    assert s.image_refusal("registry.example.com/other/trainer:2") is not None
    assert s.image_refusal("evil.example.com/distml/trainer:1") is not None  # patterns match the whole name
    flag = cfg.from_args(_operator_args("--allowed-images", "x/*"), env)
    assert flag.allowed_images == ("x/*",) and flag.image_refusal("distml/trainer:0.2.0") is not None


# ---- one way from an error to an exit code (dtr_cli.command.run_command) -----------------------------


@pytest.mark.parametrize(("error", "code", "line"), [
    (BadInput("DEST '/etc' must be a path on the volume"), 2, "DEST '/etc' must be a path on the volume"),
    (SpecError("spec.workers: must be between 1 and 64, got 0", "spec.x: unknown field", where="run.yaml"), 2,
     "run.yaml: 2 errors:\n  spec.workers: must be between 1 and 64, got 0\n  spec.x: unknown field"),
    (RunFileError("run.yaml: line 2 not valid YAML"), 2, "run.yaml: line 2 not valid YAML"),
    (SettingsError("DTR_LOG_FORMAT: must be plain or json"), 2, "DTR_LOG_FORMAT: must be plain or json"),
    (SubmitError("wine.py:2: SyntaxError: invalid syntax"), 2, "wine.py:2: SyntaxError: invalid syntax"),
    (InvalidRun("not a DistTrainingRun document"), 2, "not a DistTrainingRun document"),
    (RunError("run.yaml: spec.suspend is true"), 2, "run.yaml: spec.suspend is true"),
    (TranslateError("env TOKEN: its valueFrom cannot be resolved"), 2, "env TOKEN: its valueFrom cannot be resolved"),
    (Failed("empty: no finished epoch to plot (yet)"), 1, "empty: no finished epoch to plot (yet)"),
    (NoCredentials("no Kubernetes credentials: ~/.kube/config"), 1, "no Kubernetes credentials: ~/.kube/config"),
    (ApiError(403, "Forbidden", "pods is forbidden"), 1, "the API server said 403 Forbidden: pods is forbidden"),
    (RunNotFound("no DistTrainingRun r in namespace ml"), 1, "no DistTrainingRun r in namespace ml"),
    (LogsError("r has no worker pods now"), 1, "r has no worker pods now"),
    (TransferError("no version 7"), 1, "no version 7"),
    (CopyError("SHA-256 mismatch for f.bin"), 1, "SHA-256 mismatch for f.bin"),
    (TensorBoardError("TensorBoard exited"), 1, "TensorBoard exited"),
    (FileNotFoundError(2, "No such file or directory", "x/ab.png"), 1, "x/ab.png: No such file or directory"),
    (OSError(98, "Address already in use"), 1, "Address already in use"),
])  # fmt: skip
def test_an_error_a_command_ends_with_is_one_line_and_its_exit_code(capsys, error, code, line):
    def command(_args):
        raise error

    assert run_command("thing", command, argparse.Namespace()) == code
    assert capsys.readouterr().err == f"dtr thing: {line}\n"


def test_ctrl_c_is_130_and_a_bug_keeps_its_traceback(capsys):
    def interrupted(_args):
        raise KeyboardInterrupt

    def bug(_args):
        raise KeyError("spec")

    assert run_command("thing", interrupted, argparse.Namespace()) == 130
    with pytest.raises(KeyError):
        run_command("thing", bug, argparse.Namespace())
    assert capsys.readouterr().err == ""
    assert run_command("thing", lambda _args: None, argparse.Namespace()) == 0
