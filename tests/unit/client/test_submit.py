"""`dtr submit FILE.py` and `dtr run` with a model file: the file's checks, the ConfigMap and the run they make,
the order of the API calls, and the local stand-in for the ConfigMap (no cluster, no TensorFlow)."""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from dtr_cli import cli
from dtr_cli import submit as submit_command
from dtr_client import submit
from dtr_client.local import runner, source, translate
from dtr_client.local.console import Console
from dtr_contract import flags, layout
from dtr_operator.builders import CODE_FILE_MODE, build_tfjob
from dtr_operator.kube import ApiError
from dtr_operator.spec import parse_run

from support.fake_kube import FakeKube

SOURCE = "import numpy as np\n\n\ndef build_model(ctx):\n    return None\n\n\ndef load_data(ctx):\n    return None\n"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "wine_v2.py"
    path.write_text(SOURCE)
    return path


# ---- the file ---------------------------------------------------------------------------------


def test_a_file_is_read_as_its_key_and_bytes(model: Path) -> None:
    assert submit.read_code(model) == submit.CodeFile("wine_v2.py", SOURCE.encode())


def test_a_syntax_error_names_the_file_and_line_before_anything_is_sent(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def build_model(ctx):\n    return (\n\ndef load_data(ctx):\n    pass\n")
    with pytest.raises(submit.SubmitError, match=rf"^{broken}:2: SyntaxError: "):
        submit.read_code(broken)


def test_a_file_over_the_configmap_limit_is_refused_pointing_to_an_image(tmp_path: Path) -> None:
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" + "#" * submit.CONFIGMAP_BYTES)
    with pytest.raises(submit.SubmitError) as err:
        submit.read_code(big)
    assert "over the 1 MiB a ConfigMap holds" in str(err.value) and "FROM the trainer image" in str(err.value)
    fits = tmp_path / "fits.py"
    fits.write_text("#" * (submit.CONFIGMAP_BYTES - 1) + "\n")
    assert len(submit.read_code(fits).content) == submit.CONFIGMAP_BYTES


@pytest.mark.parametrize("name", ["model.txt", "my model.py", "model"])
def test_a_file_name_that_is_no_python_key_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(SOURCE)
    with pytest.raises(submit.SubmitError, match=r"must end in \.py"):
        submit.read_code(path)


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(submit.SubmitError, match="No such file"):
        submit.read_code(tmp_path / "gone.py")


@pytest.mark.parametrize(("given", "path", "name"), [
    (None, "wine_v2.py", "wine-v2"), (None, "My.Model.py", "my-model"), ("wine", "x.py", "wine"),
])  # fmt: skip
def test_the_run_is_named_by_the_option_or_the_file(given: str | None, path: str, name: str) -> None:
    assert submit.run_name(given, path) == name


@pytest.mark.parametrize(("given", "path", "words"), [
    (None, "2024.py", "the file name 2024.py"), ("Wine", "x.py", "--name"), ("a" * 53, "x.py", "--name"),
])  # fmt: skip
def test_a_name_that_is_no_run_name_asks_for_one(given: str | None, path: str, words: str) -> None:
    with pytest.raises(submit.SubmitError, match="give one with --name") as err:
        submit.run_name(given, path)
    assert words in str(err.value)


# ---- the manifests ----------------------------------------------------------------------------


def test_the_configmap_is_immutable_labelled_and_holds_the_file_under_its_name() -> None:
    code = submit.CodeFile("wine.py", SOURCE.encode())
    cm = submit.code_configmap("wine", "ml", code)
    assert cm == {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "wine-code", "namespace": "ml", "labels": {"distml.dev/run": "wine"}},
                  "immutable": True, "data": {"wine.py": SOURCE}}  # fmt: skip
    latin = submit.CodeFile("old.py", "# -*- coding: latin-1 -*-\nx = 'caf\xe9'\n".encode("latin-1"))
    binary = submit.code_configmap("old", "ml", latin)
    assert "data" not in binary and base64.b64decode(binary["binaryData"]["old.py"]) == latin.content


def test_the_run_names_the_configmap_and_only_the_options_given() -> None:
    given = {"workers": 3, "epochs": 5, "dataset": "tables/wine.csv", "metric": "auc", "learning_rate": None}
    doc = submit.code_run_doc("wine", "ml", "wine.py", given, {"storage.claimName": "data", "image": None})
    assert doc["metadata"] == {"name": "wine", "namespace": "ml"}
    assert doc["spec"] == {"training": {"code": {"configMap": "wine-code", "key": "wine.py"}, "epochs": 5,
                                        "dataset": "tables/wine.csv", "metric": "auc"},
                           "workers": 3, "storage": {"claimName": "data"}}  # fmt: skip
    run = parse_run(doc)
    args = build_tfjob(run)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index(flags.CODE) + 1] == layout.code_file("wine.py")


def test_dry_run_prints_both_objects_and_creates_nothing(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["submit", str(model), "-n", "ml", flags.EPOCHS, "4", flags.METRIC, "mae", "--dry-run"]
    assert cli.main(argv) == 0
    cm, run = yaml.safe_load_all(capsys.readouterr().out)
    assert cm["kind"] == "ConfigMap" and cm["data"] == {"wine_v2.py": SOURCE}
    assert run["kind"] == "DistTrainingRun" and run["metadata"]["name"] == "wine-v2"
    assert run["spec"]["training"] == {"code": {"configMap": "wine-v2-code", "key": "wine_v2.py"}, "epochs": 4,
                                       "metric": "mae"}  # fmt: skip


def test_params_go_into_the_run_typed_as_written(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["submit", str(model), "-n", "ml", "--param", "width=64", "--param", "dropout=0.25", "--param", "deep=true",
            "--param", "opt=sgd", "--param", 'tag="7"', "--param", "width=32", "--dry-run"]
    assert cli.main(argv) == 0
    _, run = yaml.safe_load_all(capsys.readouterr().out)
    params = run["spec"]["training"]["params"]
    assert params == {"width": 32, "dropout": 0.25, "deep": True, "opt": "sgd", "tag": "7"}, "the last width wins"
    assert parse_run(run).training.params == params


def test_the_lines_after_a_submit_with_params_name_them(model: Path) -> None:
    cm, doc = submit.manifests(str(model), {"name": None, "claim": None, "image": None,
                                            submit.PARAMS: {"width": 64, "deep": True}}, "ml")  # fmt: skip
    assert submit_command._watch_lines(doc, cm)[0].endswith("; params deep=true width=64")


def test_dtr_run_takes_params_as_dtr_submit_does(model: Path) -> None:
    run, _ = source.code_run(str(model), {"name": None, submit.PARAMS: {"width": 8}})
    assert run.training.params == {"width": 8}


@pytest.mark.parametrize(("extra", "words"), [
    (["--param", "width"], "argument --param: 'width': give name=value"),
    (["--param", "1w=2"], "argument --param: '1w' is not a name"),
    (["--param", "w=" + "x" * 33], "argument --param: w: must be at most 32 characters"),
])  # fmt: skip
def test_a_param_that_is_no_assignment_is_a_usage_error(model: Path, capsys: pytest.CaptureFixture[str],
                                                        extra: list[str], words: str) -> None:  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        cli.main(["submit", str(model), "-n", "ml", "--dry-run", *extra])
    assert exit_.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "words"), [
    ([arg for i in range(13) for arg in ("--param", f"p{i}=1")], "spec.training.params: must have at most 12"),
    ([flags.EPOCHS, "0"], "spec.training.epochs: must be between 1 and 1000"),
    ([flags.DATASET, "/etc"], "spec.training.dataset: must be"),
    ([flags.METRIC, "val loss"], "spec.training.metric: must be a metric name"),
])  # fmt: skip
def test_a_run_the_api_server_would_refuse_is_bad_input(model: Path, capsys: pytest.CaptureFixture[str],
                                                        extra: list[str], words: str) -> None:  # fmt: skip
    assert cli.main(["submit", str(model), "-n", "ml", "--dry-run", *extra]) == 2
    assert words in capsys.readouterr().err


def _objects(model: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return submit.manifests(str(model), {"name": None, "claim": None, "image": None}, "ml")


def calls(kube: FakeKube) -> list[tuple[str, ...]]:
    """Each call as (method, kind, and the name for all but a create)."""
    def one(method: str, args: dict[str, Any]) -> tuple[str, ...]:
        if method == "create":
            return (method, args["manifest"]["kind"])
        return (method, args["kind"], args["name"])

    return [one(c.method, c.args) for c in kube.calls]


def test_submit_creates_the_code_then_the_run_then_makes_the_run_its_owner(model: Path) -> None:
    kube = FakeKube()
    cm, doc = _objects(model)
    run = submit.submit(kube, cm, doc)
    stored = kube.stored("DistTrainingRun", "wine-v2")
    assert stored is not None and run["metadata"]["uid"] == stored["metadata"]["uid"], "the run as created"
    assert calls(kube) == [("create", "ConfigMap"), ("create", "DistTrainingRun"),
                           ("set_owner", "ConfigMap", "wine-v2-code")]  # fmt: skip
    owner = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "name": "wine-v2",
             "uid": stored["metadata"]["uid"]}  # fmt: skip
    assert [args["owner"] for args in kube.succeeded("set_owner")] == [owner]
    code = kube.stored("ConfigMap", "wine-v2-code")
    assert code is not None and code["metadata"]["ownerReferences"] == [owner]


def test_a_refused_run_takes_its_new_configmap_with_it(model: Path) -> None:
    kube = FakeKube()
    kube.fail("create", ApiError(422, "Invalid", "spec.workers: Invalid value"),
              when=lambda args: args["manifest"]["kind"] == "DistTrainingRun")  # fmt: skip
    with pytest.raises(ApiError):
        submit.submit(kube, *_objects(model))
    assert calls(kube) == [("create", "ConfigMap"), ("create", "DistTrainingRun"),
                           ("delete", "ConfigMap", "wine-v2-code")]  # fmt: skip
    assert kube.stored("ConfigMap", "wine-v2-code") is None


def test_a_configmap_of_that_name_already_there_is_left_alone_and_named(model: Path) -> None:
    kube = FakeKube()
    theirs = kube.put({"metadata": {"name": "wine-v2-code"}, "data": {"x": "y"}}, "ConfigMap")
    with pytest.raises(submit.SubmitError, match="ConfigMap wine-v2-code already exists in namespace ml"):
        submit.submit(kube, *_objects(model))
    assert calls(kube) == [("create", "ConfigMap")]
    assert kube.stored("ConfigMap", "wine-v2-code") == theirs


def test_the_lines_after_a_submit_say_the_digest_and_how_to_watch(model: Path) -> None:
    cm, doc = _objects(model)
    lines = submit_command._watch_lines(doc, cm)
    assert hashlib.sha256(SOURCE.encode()).hexdigest() in lines[0]
    assert lines[1].endswith("kubectl get distrainingruns wine-v2 -n ml -w") and "dtr logs wine-v2" in lines[2]


# ---- dtr run: the local file as the run's ConfigMap -------------------------------------------

RUN_FILE = ("apiVersion: distml.dev/v1alpha1\nkind: DistTrainingRun\nmetadata: {name: wine}\n"
            "spec: {training: {dataset: tables/wine}}\n")  # fmt: skip
CODE = submit.CodeFile("wine_v2.py", SOURCE.encode())


def test_a_run_file_with_code_gets_the_configmap_dtr_submit_would_make() -> None:
    run = source.load_run(RUN_FILE.replace("{dataset: tables/wine}", "{dataset: digits}"), "r.yaml", CODE)
    assert (run.code.config_map, run.code.file_key) == ("wine-code", "wine_v2.py")
    named = RUN_FILE.replace("{dataset: tables/wine}", "{dataset: w, code: {configMap: mine, key: m.py}}")
    run = source.load_run(named, "r.yaml", CODE)
    assert (run.code.config_map, run.code.file_key) == ("mine", "m.py"), "the run's own names win"


@pytest.mark.parametrize(("text", "code", "words"), [
    (RUN_FILE.replace("{dataset: tables/wine}", "{dataset: w, code: {configMap: mine}}"), None,
     "spec.training.code.configMap mine: dtr run has no cluster to read it from: give the file with --code FILE"),
    (RUN_FILE.replace("{dataset: tables/wine}", "{dataset: w, code: {module: acme.w}}"), CODE,
     "spec.training.code.module acme.w: the run's code is a module in its image; --code is for a file"),
    (RUN_FILE, None, "spec.training.dataset: must be"),  # without code, a directory is no dataset
])  # fmt: skip
def test_a_run_file_and_code_that_disagree_are_one_line(text: str, code: Any, words: str) -> None:
    with pytest.raises(source.RunError) as err:
        source.load_run(text, "r.yaml", code)
    assert words in str(err.value) and str(err.value).startswith("r.yaml")


def test_dtr_run_of_a_model_file_is_the_run_dtr_submit_sends(model: Path) -> None:
    run, code = source.code_run(str(model), {"workers": 2, "epochs": 2, "dataset": "wine", "name": None})
    doc = submit.code_run_doc("wine-v2", None, "wine_v2.py", {"workers": 2, "epochs": 2, "dataset": "wine"})
    assert run == parse_run(doc) and code == submit.read_code(model)


def test_the_local_file_is_mounted_where_the_cluster_mounts_the_configmap(model: Path, tmp_path: Path) -> None:
    run, code = source.code_run(str(model), {})
    local = runner.LocalRun(run, tmp_path / ".dtr", "/usr/bin/python3", Console(io.StringIO()), code)
    local.run_dir.mkdir(parents=True)
    local.place_code()
    placed = local.code_dir / "wine_v2.py"
    assert placed.read_bytes() == SOURCE.encode() and placed.stat().st_mode & 0o777 == CODE_FILE_MODE
    local.place_code()  # again (a second dtr run of the same name): replaced, not refused
    template = local.template
    process = translate.translate_container(
        local.replicas[0].container, template["spec"]["volumes"], python="/usr/bin/python3",
        ports={f"wine-v2-worker-{i}.default.svc:2222": 21000 + i for i in (0, 1)},
        claim_dir=local.claim_dir, scratch_dir=str(tmp_path / "s"), termination_path=str(tmp_path / "t"),
        fields={}, base_env={}, config_maps=local.config_maps(),
    )  # fmt: skip
    argv = process.argv
    assert argv[argv.index(flags.CODE) + 1] == str(placed.resolve())
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()
    assert local.code_status() == {"code": {"configMap": "wine-v2-code", "key": "wine_v2.py", "sha256": digest}}
    assert argv[argv.index(flags.CODE_SHA256) + 1] == digest, "each worker checks the copy, as on a cluster"


def test_a_configmap_without_a_local_stand_in_is_not_provided() -> None:
    volumes = [{"name": "c", "configMap": {"name": "other"}}, {"name": "d", "configMap": {"name": "mine"}}]
    assert translate.volume_dirs(volumes, str, "/s", {"mine": "/here"}) == {"d": "/here"}
    assert translate.volume_dirs(volumes, str, "/s") == {}


@pytest.mark.parametrize(("argv", "words"), [
    (["RUN.yaml", flags.EPOCHS, "3"], "the training options go with FILE.py"),
    (["RUN.yaml", "--param", "width=3"], "the training options go with FILE.py"),
    (["MODEL", flags.CODE, "MODEL"], "is the run's code already"),
])  # fmt: skip
def test_dtr_run_options_that_do_not_fit_the_file_are_bad_input(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    run_file = tmp_path / "run.yaml"
    run_file.write_text(RUN_FILE)
    argv = [str(run_file) if a == "RUN.yaml" else str(model) if a == "MODEL" else a for a in argv]
    assert cli.main(["run", *argv, "--python", "/bin/true", "--dir", str(tmp_path)]) == 2
    assert words in capsys.readouterr().err
