"""A run with no volume at all across two nodes (issue 40, item 4): data read from the S3 server on the cluster
(Cluster.install_s3, SeaweedFS as a pod), epoch backups mirrored into the bucket (`spec.storage.volume: false`,
`spec.storage.backupUri`), the model published there (`spec.export.storageUri`); its chief's pod deleted after an
epoch was backed up, so that the new pod, with a new empty emptyDir, can only resume from the bucket. And the same
run with a wrong key fails naming the keys before any training step (docs/object-storage.md#when-it-fails).

The data are TFRecord shards of the built-in schema written by this test (support.tfrecord: no TensorFlow in the
operator's environment), put into the bucket through the pod's address."""

from __future__ import annotations

import io
import re
import time
from typing import Any

from dtr_contract import env as contract_env
from dtr_contract import exits

from support import tfrecord
from support.multinode import S3, MultiNode, s3_secret, spread_run

EPOCHS = 10
TRAIN, EVAL, SHARDS = 3000, 600, 2  # 47 steps of 64 an epoch: seconds each here, so the kill lands mid-run
KILL_AFTER = 2  # epochs ended (and backed up) before the chief's pod goes
RESUMED = re.compile(r"resumed from backup at epoch (\d+)/(\d+)")


def put_dataset(s3: S3, prefix: str) -> list[str]:
    """The shards under s3://<bucket>/<prefix>/; their keys."""
    client = s3.client()
    keys = []
    for name, body in tfrecord.dataset(TRAIN, EVAL, SHARDS).items():
        keys.append(f"{prefix}/{name}")
        client.put_object(s3.bucket, keys[-1], io.BytesIO(body), len(body))
    return keys


def bucket_run(name: str, s3: S3, secret: str, epochs: int = EPOCHS, volume: bool = True) -> dict[str, Any]:
    """examples/digits-spread.yaml's two workers on two nodes (a required anti-affinity term), data and the model in
    the bucket; volume=False: no volume either, the backups in the bucket too."""
    doc = spread_run(name, epochs=epochs)
    spec = doc["spec"]
    spec["objectStore"] = {"endpoint": s3.endpoint, "credentialsSecret": secret}
    spec["training"]["dataset"] = f"s3://{s3.bucket}/data/{name}"
    spec["export"] = {"storageUri": f"s3://{s3.bucket}/models/{name}"}
    if not volume:
        spec["storage"] = {"volume": False, "backupUri": f"s3://{s3.bucket}/backups/{name}"}
    return doc


def keys_under(s3: S3, prefix: str) -> list[str]:
    return [o.object_name for o in s3.client().list_objects(s3.bucket, prefix=f"{prefix}/", recursive=True)]


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
    assert f"s3://{s3_server.bucket}/data/{name}: the object store {s3_server.endpoint} refused the keys" in message
    assert f"{contract_env.AWS_ACCESS_KEY_ID} and {contract_env.AWS_SECRET_ACCESS_KEY} of " \
        "spec.objectStore.credentialsSecret" in message, message  # fmt: skip
    assert f"exit code {exits.OBJECT_STORE_KEYS})" in message, message
    assert wrong not in message and s3_server.secret_key not in message
    assert not (st.get("progress") or {}).get("epoch"), st.get("progress")  # no epoch ended, none began
    assert not keys_under(s3_server, f"models/{name}")
