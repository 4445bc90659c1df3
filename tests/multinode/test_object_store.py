"""A run with no volume at all across two nodes (issue 40, item 4): data read from the S3 server on the cluster
(Cluster.install_s3, SeaweedFS as a pod), epoch backups mirrored into the bucket (`spec.storage.volume: false`,
`spec.storage.backupUri`), the model published there (`spec.export.storageUri`); its chief's container SIGKILLed
after an epoch was backed up: every worker's container empties its emptyDir and fills it from the bucket's current
generation first thing (trainer/dtr_trainer/backup_s3.py), so the chief's new container resumes from the bucket. (A
pod deleted instead raced the training-operator here, as a drained node's does, tests/multinode/test_node_faults.py:
it failed the TFJob, "1 Worker replica(s) failed", in the second the pod went.) And the same run with a wrong key
fails naming the keys before any training step (docs/object-storage.md#when-it-fails).

The data are TFRecord shards of the built-in schema written by this test (support.tfrecord: no TensorFlow in the
operator's environment), put into the bucket through the pod's address."""

from __future__ import annotations

import io
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from dtr_contract import env as contract_env
from dtr_contract import exits, published
from dtr_contract.objectstore import connect, parse_uri

from support import tfrecord
from support.multinode import S3, MultiNode, s3_secret, spread_run, worker_nodes
from support.node import TRAINER_PYTHON, RealNode, dtr
from support.wait import wait_for

EPOCHS = 10
TRAIN, EVAL, SHARDS = 3000, 600, 2  # 47 steps of 64 an epoch: seconds each here, so the kill lands mid-run
KILL_AFTER = 2  # epochs ended (and backed up) before the chief's container is killed
RESUMED = re.compile(r"resumed from backup at epoch (\d+)/(\d+)")
PULLED = re.compile(r"backup: generation (\d+) of (s3://\S+), (\d+) file")


# The published model as a user checks it: loaded with the trainer's TensorFlow and scored on the run's own held-out
# shard (the run trains on support.tfrecord's synthetic data, not the digits of tests/node/score_model.py).
SCORE = """
import json, sys
import numpy as np
import tensorflow as tf
from dtr_trainer import records
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
images, labels = zip(*tf.data.TFRecordDataset(sys.argv[2]).map(records.parse).as_numpy_iterator())
probs = serve(images=tf.constant(np.stack(images)))["probabilities"].numpy()
print(json.dumps({"accuracy": float(np.mean(probs.argmax(axis=1) == np.array(labels)))}))
"""


def put_dataset(s3: S3, prefix: str) -> list[str]:
    """The shards under s3://<bucket>/<prefix>/; their keys."""
    client = s3.client()
    keys = []
    for name, body in tfrecord.dataset(TRAIN, EVAL, SHARDS).items():
        keys.append(f"{prefix}/{name}")
        client.put_object(s3.bucket, keys[-1], io.BytesIO(body), len(body))
    return keys


def bucket_run(name: str, s3: S3, secret: str, epochs: int = EPOCHS) -> dict[str, Any]:
    """examples/digits-spread.yaml's two workers on two nodes (a required anti-affinity term), with no volume
    (examples/s3-no-volume.yaml): data, backups and the model in the bucket, an emptyDir where the claim would be."""
    doc = spread_run(name, epochs=epochs)
    spec = doc["spec"]
    spec["objectStore"] = {"endpoint": s3.endpoint, "credentialsSecret": secret}
    spec["training"]["dataset"] = f"s3://{s3.bucket}/data/{name}"
    spec["export"] = {"storageUri": f"s3://{s3.bucket}/models/{name}"}
    spec["storage"] = {"volume": False, "size": "512Mi", "backupUri": f"s3://{s3.bucket}/backups/{name}"}
    return doc


def keys_under(s3: S3, prefix: str) -> list[str]:
    return [o.object_name for o in s3.client().list_objects(s3.bucket, prefix=f"{prefix}/", recursive=True)]


def test_a_run_with_no_volume_across_two_nodes_resumes_from_the_buckets_backup_and_publishes_one_version(
    multinode: MultiNode, namespace: str, s3_server: S3, s3_keys: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "no-volume"
    put_dataset(s3_server, f"data/{name}")
    t0 = time.monotonic()
    multinode.real.apply(namespace, bucket_run(name, s3_server, s3_keys))
    nodes = worker_nodes(multinode, namespace, name)
    assert len(set(nodes)) == 2, nodes
    chief = f"{name}-worker-0"
    line = f"epoch {KILL_AFTER}/{EPOCHS} end"

    def backed_up() -> str | None:
        if multinode.real.run_status(namespace, name).get("phase") in ("Succeeded", "Failed"):
            return "finished"
        current = any(k.endswith("/current") for k in keys_under(s3_server, f"backups/{name}"))
        return "due" if current and line in multinode.real.logs(namespace, chief) else None

    assert wait_for(backed_up, timeout=600, interval=1, what=f"{line!r} and a backup in the bucket") == "due", \
        "the run ended before the kill: give it more data or epochs"  # fmt: skip
    backups = keys_under(s3_server, f"backups/{name}")
    chief_node = multinode.node_of(namespace, chief)
    killed_at = time.monotonic()
    RealNode(multinode.cluster, multinode.nodes.node(chief_node)).kill_container(namespace, chief)

    def resumed() -> tuple[int, str] | None:
        pod = multinode.cluster.kubectl_json("get", "pod", chief, "-n", namespace)
        restarts = sum(s.get("restartCount", 0) for s in (pod.get("status") or {}).get("containerStatuses", []))
        log = multinode.real.logs(namespace, chief) if restarts else ""
        found, pulled = RESUMED.search(log), PULLED.search(log)
        return (int(found.group(1)), pulled.group(0)) if found and pulled else None

    epoch, pulled = wait_for(resumed, timeout=600, interval=1, what=f"{chief}'s new container resuming")
    resumed_after = time.monotonic() - killed_at
    st = multinode.real.wait_terminal(namespace, name, timeout=900)
    took = time.monotonic() - t0
    print(f"no volume, workers on {nodes}: {len(backups)} backup object(s) in the bucket when the chief's container "
          f"was killed; its new one pulled {pulled!r} and resumed at epoch {epoch}/{EPOCHS} {resumed_after:.0f} s "
          f"after; {st['phase']} {took:.0f} s after kubectl apply, accuracy {st.get('metrics', {}).get('accuracy')}")
    assert st["phase"] == "Succeeded", st
    assert epoch > 1, epoch
    uid = multinode.cluster.kubectl_json("get", "dtr", name, "-n", namespace)["metadata"]["uid"]
    assert f"of s3://{s3_server.bucket}/backups/{name}/{name}/{uid}," in pulled, pulled  # the run object's own
    assert (st.get("progress") or {}).get("epoch") == EPOCHS, st.get("progress")
    claims = multinode.cluster.kubectl("get", "pvc", "-n", namespace, "-o", "name").stdout.split()
    assert claims == [], claims
    assert not st.get("pvc"), st
    base = f"s3://{s3_server.bucket}/models/{name}"
    assert st["model"]["storageUri"] == base, st["model"]
    store = connect({contract_env.S3_ENDPOINT: s3_server.local, contract_env.AWS_ACCESS_KEY_ID: s3_server.access_key,
                     contract_env.AWS_SECRET_ACCESS_KEY: s3_server.secret_key})  # fmt: skip
    location = parse_uri(base)
    keys = keys_under(s3_server, f"models/{name}")
    assert published.version_numbers(location.key, keys) == {1}, keys  # exactly one version, whatever was claimed
    assert published.published_versions(store, location) == [1], keys
    assert published.verified_manifest(store, location, 1).files, keys
    # `dtr model get` takes it from the bucket (the keys from this machine's environment, the endpoint it reaches),
    # and it loads and scores as the run reported.
    monkeypatch.setenv(contract_env.AWS_ACCESS_KEY_ID, s3_server.access_key)
    monkeypatch.setenv(contract_env.AWS_SECRET_ACCESS_KEY, s3_server.secret_key)
    got = dtr(multinode.real, namespace, "model", "get", name, str(tmp_path / "model"), "-q",
              "--s3-endpoint", s3_server.local)  # fmt: skip
    assert got.returncode == 0 and f"from {base}/1" in got.stdout, got.stdout + got.stderr
    held_out = tmp_path / "eval.tfrecord"
    held_out.write_bytes(tfrecord.dataset(TRAIN, EVAL, SHARDS)["eval-00000-of-00001.tfrecord"])
    scored = subprocess.run([TRAINER_PYTHON, "-c", SCORE, str(tmp_path / "model"), str(held_out)],
                            capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert scored.returncode == 0, scored.stderr[-3000:]
    accuracy = json.loads(scored.stdout.splitlines()[-1])["accuracy"]
    assert abs(accuracy - st["metrics"]["accuracy"]) <= 0.02, (accuracy, st["metrics"])


def test_the_same_run_with_a_wrong_key_fails_naming_the_keys_before_any_training_step(
    multinode: MultiNode, namespace: str, s3_server: S3
) -> None:
    name = "wrong-key"
    put_dataset(s3_server, f"data/{name}")
    wrong = "W" * len(s3_server.secret_key)
    secret = s3_secret(multinode, namespace, s3_server.access_key, wrong)
    t0 = time.monotonic()
    multinode.real.apply(namespace, bucket_run(name, s3_server, secret))
    st = multinode.real.wait_terminal(namespace, name, timeout=300)
    print(f"wrong key: {st['phase']} {st.get('reason')} {time.monotonic() - t0:.0f} s after kubectl apply")
    assert (st["phase"], st.get("reason")) == ("Failed", "ObjectStoreKeysRefused"), st
    message = st["message"]
    # The first request with the keys: the backup's pull (every worker, first thing), else the dataset's listing.
    uri = f"s3://{s3_server.bucket}/(backups/{name}/{name}/[0-9a-f-]+|data/{name})"  # the backup's: per run object
    assert re.match(rf"{uri}: the object store {re.escape(s3_server.endpoint)} refused the keys", message), message
    assert f"{contract_env.AWS_ACCESS_KEY_ID} and {contract_env.AWS_SECRET_ACCESS_KEY} of " \
        "spec.objectStore.credentialsSecret" in message, message  # fmt: skip
    assert f"exit code {exits.OBJECT_STORE_KEYS})" in message, message
    assert wrong not in message and s3_server.secret_key not in message
    assert not (st.get("progress") or {}).get("epoch"), st.get("progress")  # no epoch ended, none began
    assert not keys_under(s3_server, f"models/{name}") and not keys_under(s3_server, f"backups/{name}")
