"""Pure translation of a pod's container into a local process (dtr_client.local.translate)."""

import json

import pytest
from dtr_client.local import translate as t

TWO_WORKERS = {
    "cluster": {"worker": ["d-worker-0.ns.svc:2222", "d-worker-1.ns.svc:2222"]},
    "task": {"type": "worker", "index": 1},
    "environment": "cloud",
}


def test_tf_config_for_matches_the_training_operator_shape():
    assert t.tf_config_for("d", "ns", {"Worker": 2}, "Worker", 1) == TWO_WORKERS


@pytest.mark.parametrize("replicas", [{"Worker": 1}, {"Worker": 0}, {}])
def test_tf_config_for_a_single_replica_is_none(replicas):
    assert t.tf_config_for("d", "ns", replicas, "Worker", 0) is None


def test_tf_config_for_several_replica_types():
    cfg = t.tf_config_for("j", "x", {"Chief": 1, "Worker": 2}, "chief", 0, port=3000)
    assert cfg["cluster"] == {
        "chief": ["j-chief-0.x.svc:3000"],
        "worker": ["j-worker-0.x.svc:3000", "j-worker-1.x.svc:3000"],
    }
    assert cfg["task"] == {"type": "chief", "index": 0}


def test_addresses_dense_and_sparse_in_order_without_duplicates():
    cfg = {"cluster": {"worker": ["a:1", "b:1"], "ps": {"0": "c:1", "1": "a:1"}}}
    assert t.tf_config_addresses(cfg) == ["a:1", "b:1", "c:1"]


def test_rewrite_tf_config_maps_each_address_to_its_loopback_port_and_keeps_the_task():
    ports = {"d-worker-0.ns.svc:2222": 21001, "d-worker-1.ns.svc:2222": 21002}
    out = t.rewrite_tf_config(TWO_WORKERS, ports)
    assert out["cluster"] == {"worker": ["127.0.0.1:21001", "127.0.0.1:21002"]}
    assert out["task"] == TWO_WORKERS["task"] and out["environment"] == "cloud"
    assert (
        TWO_WORKERS["cluster"]["worker"][0] == "d-worker-0.ns.svc:2222"
    )  # input untouched


def test_rewrite_tf_config_sparse_form():
    out = t.rewrite_tf_config(
        {"cluster": {"worker": {"1": "h:2"}}, "task": {}}, {"h:2": 9}
    )
    assert out["cluster"] == {"worker": {"1": "127.0.0.1:9"}}


def test_rewrite_tf_config_without_a_port_is_a_clear_error():
    with pytest.raises(t.TranslateError, match=r"d-worker-1\.ns\.svc:2222"):
        t.rewrite_tf_config(TWO_WORKERS, {"d-worker-0.ns.svc:2222": 1})


@pytest.mark.parametrize("raw", ["{nope", "[1"])
def test_parse_tf_config_rejects_non_json(raw):
    with pytest.raises(t.TranslateError, match="not JSON"):
        t.parse_tf_config(raw)


PM = t.sort_path_map(
    [
        ("/mnt/dtr", "/v/claim"),
        ("/mnt/dtr/cache", "/scratch"),
        ("/dev/termination-log", "/p/term"),
    ]
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/mnt/dtr", "/v/claim"),
        ("/mnt/dtr/", "/v/claim/"),
        ("/mnt/dtr/models/m", "/v/claim/models/m"),
        ("/mnt/dtr/cache/x", "/scratch/x"),  # the nested mount wins
        (
            "/mnt/dtrx/models",
            "/mnt/dtrx/models",
        ),  # a sibling with the same prefix is not under the mount
        ("--export-dir=/mnt/dtr/models/m", "--export-dir=/v/claim/models/m"),
        ("--export-dir=/elsewhere", "--export-dir=/elsewhere"),
        ("/dev/termination-log", "/p/term"),
        ("cnn", "cnn"),
        ("", ""),
    ],
)
def test_rewrite_value(value, expected):
    assert t.rewrite_value(value, PM) == expected


def test_volume_dirs_and_mounts():
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "run-data"}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "host", "hostPath": {"path": "/srv/x"}},
        {"name": "token", "projected": {"sources": []}},
    ]
    dirs = t.volume_dirs(volumes, lambda c: f"/state/volumes/ns/{c}", "/pod/volumes")
    assert dirs == {
        "data": "/state/volumes/ns/run-data",
        "tmp": "/pod/volumes/tmp",
        "host": "/srv/x",
    }
    mounts = [
        {"name": "data", "mountPath": "/mnt/dtr"},
        {"name": "data", "mountPath": "/sub", "subPath": "models"},
        {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
    ]
    assert t.mount_path_map(mounts, dirs) == [
        ("/mnt/dtr", "/state/volumes/ns/run-data"),
        ("/sub", "/state/volumes/ns/run-data/models"),
    ]


@pytest.mark.parametrize(
    "python", ["python", "python3", "python3.9", "/usr/bin/python3"]
)
def test_local_argv_maps_python_to_the_environment(python):
    argv = t.local_argv(
        [python, "-m", "dtr_trainer"],
        ["--data-dir", "/mnt/dtr/data"],
        "/venv/bin/python",
        PM,
    )
    assert argv == [
        "/venv/bin/python",
        "-m",
        "dtr_trainer",
        "--data-dir",
        "/v/claim/data",
    ]


def test_local_argv_keeps_other_programs_and_needs_a_command():
    assert t.local_argv(["sh", "-c"], ["true"], "/py", PM) == ["sh", "-c", "true"]
    assert t.local_argv([], ["python3", "x.py"], "/py", PM) == ["/py", "x.py"]
    with pytest.raises(t.TranslateError, match="no command"):
        t.local_argv([], [], "/py", PM)


def test_resolve_env_values_field_refs_and_expansion():
    env = [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "$(A)-$(NOPE)-$$(A)"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "LIMIT", "valueFrom": {"fieldRef": {"fieldPath": "status.unknown"}}},
        {"name": "EMPTY"},
    ]
    out, missing = t.resolve_env(env, {"metadata.name": "p-0"})
    assert out == {"A": "1", "B": "1-$(NOPE)-$(A)", "POD": "p-0", "EMPTY": ""}
    assert missing == ["SECRET", "LIMIT"]


def container(**extra):
    return {
        "name": "tensorflow",
        "image": "localhost/distml/trainer:test",
        "command": ["python", "-m", "dtr_trainer"],
        "args": [
            "--export-dir",
            "/mnt/dtr/models/m",
            "--termination-message-path",
            "/dev/termination-log",
        ],
        "env": [
            {"name": "TF_CONFIG", "value": json.dumps(TWO_WORKERS)},
            {"name": "OUT", "value": "/mnt/dtr/out"},
        ],
        "volumeMounts": [{"name": "data", "mountPath": "/mnt/dtr"}],
        **extra,
    }


def translate(c, **kw):
    args = {
        "python": "/venv/bin/python",
        "ports": {"d-worker-0.ns.svc:2222": 21001, "d-worker-1.ns.svc:2222": 21002},
        "claim_dir": lambda claim: f"/state/volumes/ns/{claim}",
        "scratch_dir": "/pod/volumes",
        "termination_path": "/pod/tensorflow.termination-log",
        "fields": {},
        "base_env": {"PATH": "/bin", "OUT": "base"},
    }
    args.update(kw)
    return t.translate_container(
        c,
        [{"name": "data", "persistentVolumeClaim": {"claimName": "run-data"}}],
        **args,
    )


def test_translate_container_end_to_end():
    p = translate(container())
    assert p.argv == [
        "/venv/bin/python",
        "-m",
        "dtr_trainer",
        "--export-dir",
        "/state/volumes/ns/run-data/models/m",
        "--termination-message-path",
        "/pod/tensorflow.termination-log",
    ]
    assert json.loads(p.env["TF_CONFIG"])["cluster"]["worker"] == [
        "127.0.0.1:21001",
        "127.0.0.1:21002",
    ]
    assert (
        p.env["OUT"] == "/state/volumes/ns/run-data/out"
    )  # the pod's env wins over the base env
    assert p.env["PATH"] == "/bin"
    assert p.cwd is None


def test_translate_container_custom_termination_path_and_workdir():
    p = translate(
        container(
            terminationMessagePath="/tmp/msg",
            workingDir="/mnt/dtr/work",
            args=["--termination-message-path", "/tmp/msg"],
        )
    )
    assert p.argv[-1] == "/pod/tensorflow.termination-log"
    assert p.cwd == "/state/volumes/ns/run-data/work"
    assert (
        translate(container(workingDir="/app")).cwd is None
    )  # the image's own dir does not exist here


def test_translate_container_without_tf_config_leaves_env_alone():
    p = translate(container(env=[{"name": "X", "value": "y"}]), ports={})
    assert "TF_CONFIG" not in p.env and p.env["X"] == "y"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"modelPath": "/v/claim/models/m/1"}',
            '{"modelPath": "/mnt/dtr/models/m/1"}',
        ),
        ("wrote /scratch/x and /v/claim", "wrote /mnt/dtr/cache/x and /mnt/dtr"),
        (
            "/v/claim-2/models",
            "/v/claim-2/models",
        ),  # another directory that only shares a prefix
        ("see /p/term", "see /dev/termination-log"),
    ],
)
def test_unmap_text_turns_local_paths_back_into_container_paths(text, expected):
    assert t.unmap_text(text, PM) == expected


def test_base_env_and_default_python():
    env = t.base_env({"PATH": "/bin", "HOME": "/root", "SECRET": "x"}, "d-worker-0")
    assert env == {
        "PATH": "/bin",
        "HOME": "/root",
        "HOSTNAME": "d-worker-0",
        "PYTHONUNBUFFERED": "1",
    }
    assert t.default_python({"DTR_TRAINER_PYTHON": "/py"}, "/repo") == "/py"
    assert t.default_python({}, "/repo") == "/repo/.venv/trainer/bin/python"


def test_an_env_var_that_needs_a_cluster_is_refused_not_dropped():
    secret = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    with pytest.raises(t.TranslateError, match="env TOKEN: its valueFrom cannot be resolved without a cluster"):
        t.translate_container(
            container(env=[secret]), [], python="/py", ports={}, claim_dir=lambda c: f"/v/{c}", scratch_dir="/s",
            termination_path="/t", fields={}, base_env={},
        )  # fmt: skip


def test_the_object_stores_keys_come_from_the_local_environment_or_the_refusal_says_to_export_them():
    keys = [{"name": key, "valueFrom": {"secretKeyRef": {"name": "s3-keys", "key": key}}}
            for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")]  # fmt: skip
    args = {"python": "/py", "ports": {}, "claim_dir": lambda c: f"/v/{c}", "scratch_dir": "/s",
            "termination_path": "/t", "fields": {}, "base_env": {}}  # fmt: skip
    got = t.translate_container(container(env=keys), [], **args,
                                secret_keys={"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"})  # fmt: skip
    assert (got.env["AWS_ACCESS_KEY_ID"], got.env["AWS_SECRET_ACCESS_KEY"]) == ("AK", "SK")
    with pytest.raises(t.TranslateError) as refused:
        t.translate_container(container(env=keys), [], **args, secret_keys={"AWS_ACCESS_KEY_ID": "AK"})
    assert str(refused.value) == ("env AWS_SECRET_ACCESS_KEY: its valueFrom cannot be resolved without a cluster; a "
                                  "local run takes a Secret's keys from its own environment: export "
                                  "AWS_SECRET_ACCESS_KEY")
