"""Writing models and backups to S3 through TensorFlow (tensorflow-io 0.31's s3:// file system).

    .venv/trainer/bin/python -m bench.s3.write [--env-file DIR/s3.env] [--rounds 5]

- SavedModel: the trainer's cnn saved as the trainer exports it (dtr_trainer.export._save, Keras' model.save
  without layer traces) to disk and to s3://, alternating; loaded back from each (tf.saved_model.load) and its
  serving signature compared with the model's own predictions.
- What a reader sees meanwhile: a larger model (20 M parameters, 80 MB) saved to s3:// while another thread lists
  the prefix every few milliseconds (ListObjectsV2): every key seen, when, and whether the listing ever showed
  saved_model.pb beside variables that were not complete yet, or temporary keys.
- BackupAndRestore(backup_dir=s3://...): the seconds each epoch's backup takes (disk and s3, alternating), the keys
  it leaves, and a fit stopped after epoch 2 of 4 resuming from the bucket's backup at epoch 3.
Results: bench/s3/results-write.{json,md}.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.s3 import common


def save_and_load(srv: common.Server, local: Path, rounds: int) -> list[dict]:
    import numpy as np
    import tensorflow as tf
    from dtr_trainer import export

    model = common.cnn()
    x = np.random.RandomState(0).uniform(0, 1, size=(8, *common.IMAGE_SHAPE)).astype(np.float32)
    expected = model.predict(x, verbose=0)
    out = []
    for r in range(rounds):
        targets = [("disk", str(local / f"models/cnn/{r}")), ("s3", srv.url(f"write/models/cnn/{r}"))]
        for where, path in targets if r % 2 == 0 else reversed(targets):
            t0 = time.monotonic()
            export._save(model, path, layer_traces=False)
            saved = time.monotonic() - t0
            t0 = time.monotonic()
            loaded = tf.saved_model.load(path)
            got = loaded.signatures["serving_default"](images=tf.constant(x))["probabilities"].numpy()
            load = time.monotonic() - t0
            size = sum(tf.io.gfile.stat(f"{d}/{f}").length for d, _, fs in tf.io.gfile.walk(path) for f in fs)
            out.append({"round": r, "where": where, "save_seconds": round(saved, 3), "load_seconds": round(load, 3),
                        "bytes": size, "same_predictions": bool(np.allclose(got, expected, atol=1e-6))})  # fmt: skip
            print(f"save {out[-1]}", file=sys.stderr)
    return out


def big_model():
    import tensorflow as tf

    inputs = tf.keras.Input(shape=common.IMAGE_SHAPE, name="images")
    x = tf.keras.layers.Flatten()(inputs)
    x = tf.keras.layers.Dense(4096, activation="relu")(x)
    x = tf.keras.layers.Dense(4096, activation="relu")(x)
    outputs = tf.keras.layers.Dense(common.CLASSES, activation="softmax", name="probabilities")(x)
    return tf.keras.Model(inputs, outputs)


class Lister(threading.Thread):
    """Lists a prefix as fast as it can until stopped: every distinct listing, with the time it was first seen."""

    def __init__(self, srv: common.Server, prefix: str):
        super().__init__(daemon=True)
        self.client, self.bucket, self.prefix = srv.client(), srv.bucket, prefix
        self.seen: list[tuple[float, dict[str, int]]] = []
        self.lists = 0
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        while not self.stop.is_set():
            listing = {o.key[len(self.prefix):]: o.size for o in self.client.list(self.bucket, self.prefix)}
            self.lists += 1
            if not self.seen or self.seen[-1][1] != listing:
                self.seen.append((round(time.monotonic() - self.t0, 3), listing))
            time.sleep(0.002)


def observe_save(srv: common.Server) -> dict:
    """Save a large model to s3 while listing its prefix; what could a reader have seen?"""
    prefix = "write/observed/1/"
    model = big_model()
    lister = Lister(srv, prefix)
    lister.start()
    t0 = time.monotonic()
    model.save(srv.url(prefix.rstrip("/")), save_format="tf", include_optimizer=False)
    seconds = time.monotonic() - t0
    time.sleep(0.2)
    lister.stop.set()
    lister.join()
    final = lister.seen[-1][1]
    ever = {k for _, listing in lister.seen for k in listing}
    early_pb = [t for t, listing in lister.seen if "saved_model.pb" in listing and listing != final]
    return {"save_seconds": round(seconds, 2), "listings": lister.lists, "distinct_listings": len(lister.seen),
            "final_keys": final, "temporary_keys": sorted(ever - set(final)),
            "sequence": [{"t": t, "keys": sorted(listing)} for t, listing in lister.seen],
            "saved_model_pb_visible_while_incomplete": bool(early_pb)}  # fmt: skip


class TimedBackup:
    """BackupAndRestore whose epoch-end backup is timed."""

    def __new__(cls, backup_dir: str, durations: list[float]):
        import tensorflow as tf

        class _Timed(tf.keras.callbacks.BackupAndRestore):
            def on_epoch_end(self, epoch, logs=None):
                t0 = time.monotonic()
                super().on_epoch_end(epoch, logs)
                durations.append(time.monotonic() - t0)

        return _Timed(backup_dir, delete_checkpoint=False)


class StopAfter:
    def __new__(cls, epochs: int):
        import tensorflow as tf

        class _Stop(tf.keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                if epoch + 1 == epochs:
                    raise KeyboardInterrupt(f"stopped after epoch {epochs}")

        return _Stop()


class FirstEpoch:
    def __new__(cls, seen: list[int]):
        import tensorflow as tf

        class _First(tf.keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                seen.append(epoch)

        return _First()


def backups(srv: common.Server, local: Path, rounds: int) -> dict:
    import numpy as np

    rng = np.random.RandomState(1)
    x = rng.uniform(0, 1, size=(2048, *common.IMAGE_SHAPE)).astype(np.float32)
    y = rng.randint(0, common.CLASSES, size=2048)
    durations: dict[str, list[float]] = {"disk": [], "s3": []}
    for r in range(rounds):
        targets = [("disk", str(local / f"backup/{r}")), ("s3", srv.url(f"write/backup/{r}"))]
        for where, path in targets if r % 2 == 0 else reversed(targets):
            common.cnn().fit(x, y, batch_size=64, epochs=3, verbose=0, callbacks=[TimedBackup(path, durations[where])])
    keys = sorted(o.key for o in srv.client().list(srv.bucket, "write/backup/0/"))
    # A fit stopped after its second epoch's backup, then a new model and fit on the same backup dir.
    path = srv.url("write/backup/resume")
    with contextlib.suppress(KeyboardInterrupt):
        common.cnn().fit(x, y, batch_size=64, epochs=4, verbose=0,
                         callbacks=[TimedBackup(path, []), StopAfter(2)])  # fmt: skip
    first: list[int] = []
    common.cnn().fit(x, y, batch_size=64, epochs=4, verbose=0, callbacks=[TimedBackup(path, []), FirstEpoch(first)])
    return {"seconds_per_backup": {k: [round(v, 3) for v in vs] for k, vs in durations.items()},
            "median_seconds": {k: round(statistics.median(vs), 3) for k, vs in durations.items()},
            "keys_after_3_epochs": keys, "resumed_at_epoch": first[0] + 1 if first else None}  # fmt: skip


def markdown(results: dict) -> str:
    m = results["machine"]
    saves = results["saves"]
    lines = [
        "# Writing models and backups to S3 (tensorflow-io's s3://)",
        "",
        f"`python -m bench.s3.write`, {m['when']}, `{m['commit']}`, {m['cpus']} CPUs, load average "
        f"{m['load_average'][0]} at the end (another CI run shared the machine), TensorFlow {m['tensorflow']}, "
        f"tensorflow-io {m['tensorflow_io']}, SeaweedFS on the same machine over loopback HTTP.",
        "",
        f"## The cnn's SavedModel, as the trainer exports it ({len(saves) // 2} rounds, alternating; medians)",
        "",
        "| where | save s | load s | bytes | predictions equal |",
        "|---|---:|---:|---:|---|",
    ]
    for where in ("disk", "s3"):
        rows = [s for s in saves if s["where"] == where]
        lines.append(f"| {where} | {statistics.median(s['save_seconds'] for s in rows):.3f} | "
                     f"{statistics.median(s['load_seconds'] for s in rows):.3f} | {rows[0]['bytes']} | "
                     f"{all(s['same_predictions'] for s in rows)} |")  # fmt: skip
    o = results["observed"]
    lines += [
        "",
        f"## What a lister saw during a 20 M-parameter model.save to s3:// ({o['save_seconds']} s, "
        f"{o['listings']} listings)",
        "",
        f"saved_model.pb visible while the version was incomplete: **{o['saved_model_pb_visible_while_incomplete']}**;"
        f" temporary keys seen: {', '.join(o['temporary_keys']) or 'none'}.",
        "",
        "| t (s) | keys listed |",
        "|---:|---|",
        *[f"| {s['t']} | {', '.join(s['keys']) or '(none)'} |" for s in o["sequence"]],
        "",
        "## BackupAndRestore",
        "",
        f"Seconds per epoch-end backup (median): disk {results['backups']['median_seconds']['disk']}, "
        f"s3 {results['backups']['median_seconds']['s3']}. Keys after 3 epochs: "
        f"{', '.join(results['backups']['keys_after_3_epochs'])}. A fit stopped after epoch 2 of 4 resumed from "
        f"the bucket at epoch {results['backups']['resumed_at_epoch']}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-file", help="a running server's DIR/s3.env (default: start one)")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with common.server(args.env_file) as srv, tempfile.TemporaryDirectory(prefix="dtr-s3-write-") as tmp:
        common.use_s3(srv)
        local = Path(tmp)
        saves = save_and_load(srv, local, args.rounds)
        observed = observe_save(srv)
        backup = backups(srv, local, max(2, args.rounds // 2))
        results = {"machine": common.machine(), "saves": saves, "observed": observed, "backups": backup}
        common.write_results("results-write", results, markdown(results))
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
