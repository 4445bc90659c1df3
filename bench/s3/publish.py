"""A publish protocol for model versions in a bucket (S3 has no rename), tried against SeaweedFS, with kills.

    .venv/trainer/bin/python -m bench.s3.publish [--env-file DIR/s3.env] [--kills 12] [--racers 8] [--claims 12]

The protocol (a prototype: standard library S3 calls, bench/s3/sigv4.py; the SavedModel itself is written by
TensorFlow to the local disk first, as the trainer's other workers already do under $TMPDIR):

1. claim: N = 1 + the largest number under <base>/.dtr/claims/, then PutObject <base>/.dtr/claims/N with
   `If-None-Match: *`; 412 (taken) -> N+1. Exactly one writer gets each N (the server checks and writes as one).
2. stage: every file of the SavedModel is uploaded to <base>/.dtr/staging/N-<token>/ (no reader looks there).
3. publish: each staged object is copied server-side (CopyObject) to <base>/N/, saved_model.pb last of the model's
   files (what a loader opens first: TF Serving, KServe and tf.saved_model.load need it), then the manifest
   <base>/N/_MANIFEST.json (every file's size and SHA-256) last of all; then the staging objects are deleted.
4. a reader (dtr model get, the client, the operator) takes N only when _MANIFEST.json is there and every file it
   names is listed with its size (and checks each SHA-256 as it downloads). A reader that knows nothing of the
   manifest (TF Serving's polling of <base>) takes the highest N/ holding saved_model.pb.

Measured: claims raced by several processes at once (every number once?), the time of each step for the cnn and a
20 M-parameter model, and publishers killed (SIGKILL) at random moments while two readers poll: did either reader
ever take an incomplete version? Results: bench/s3/results-publish.{json,md}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.s3 import common
from bench.s3.sigv4 import Client

MANIFEST = "_MANIFEST.json"
LOADER_FILE = "saved_model.pb"


# ---------------------------------------------------------------- the protocol


def claims_prefix(base: str) -> str:
    return f"{base}/.dtr/claims/"


def claim(client: Client, bucket: str, base: str, owner: str) -> tuple[int, int]:
    """(version, tries): the lowest free number above every claim, taken with a conditional PutObject."""
    taken = [int(o.key.rsplit("/", 1)[1]) for o in client.list(bucket, claims_prefix(base))
             if o.key.rsplit("/", 1)[1].isdigit()]  # fmt: skip
    version = max(taken, default=0) + 1
    body = json.dumps({"owner": owner, "claimedAt": time.time()}).encode()
    for tries in range(1, 1001):
        if client.put_if_absent(bucket, f"{claims_prefix(base)}{version}", body):
            return version, tries
        version += 1
    raise RuntimeError("no free version in 1000 tries")


def model_files(root: Path) -> list[tuple[str, Path]]:
    """(relative key, path) of every file of a SavedModel, the loader's file last."""
    files = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file())
    return sorted(files, key=lambda item: item[0] == LOADER_FILE)


def stage(client: Client, bucket: str, base: str, version: int, token: str, root: Path) -> dict:
    """Upload the model's files to the staging prefix; its manifest (size and SHA-256 of each)."""
    staging = f"{base}/.dtr/staging/{version}-{token}/"
    manifest = {}
    for rel, path in model_files(root):
        body = path.read_bytes()
        reply = client.put(bucket, staging + rel, body)
        if reply.status != 200:
            raise OSError(f"put {staging + rel}: HTTP {reply.status} {reply.code}")
        manifest[rel] = {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    return {"staging": staging, "files": manifest}


def publish(client: Client, bucket: str, base: str, version: int, staged: dict) -> None:
    """Copy the staged files to <base>/N/ (the loader's file last), write the manifest, drop the staging copy."""
    target = f"{base}/{version}/"
    names = sorted(staged["files"], key=lambda rel: rel == LOADER_FILE)
    for rel in names:
        reply = client.copy(bucket, staged["staging"] + rel, target + rel)
        if reply.status != 200:
            raise OSError(f"copy to {target + rel}: HTTP {reply.status} {reply.code}")
    manifest = json.dumps({"version": version, "files": staged["files"]}, indent=1).encode()
    reply = client.put(bucket, target + MANIFEST, manifest)
    if reply.status != 200:
        raise OSError(f"put {target + MANIFEST}: HTTP {reply.status} {reply.code}")
    for rel in names:
        client.delete(bucket, staged["staging"] + rel)


def complete_versions(client: Client, bucket: str, base: str) -> dict[int, dict]:
    """The reader's rule: N with a manifest whose every file is listed at its size."""
    listing: dict[str, int] = {o.key[len(base) + 1:]: o.size for o in client.list(bucket, base + "/")}
    found = {}
    for key in listing:
        version, _, name = key.partition("/")
        if name != MANIFEST or not version.isdigit():
            continue
        reply = client.get(bucket, f"{base}/{key}")
        if reply.status != 200:
            continue
        files = json.loads(reply.body)["files"]
        if all(listing.get(f"{version}/{rel}") == meta["size"] for rel, meta in files.items()):
            found[int(version)] = files
    return found


# ---------------------------------------------------------------- experiments


def conditions(srv: common.Server) -> dict[str, str]:
    """What the server answers to each conditional write: the status, or S3's error code."""
    client, bucket, key = srv.client(), srv.bucket, f"publish/conditions-{secrets.token_hex(4)}"

    def answer(reply) -> str:
        return str(reply.status) if reply.status < 300 else reply.code or str(reply.status)

    out = {"put If-None-Match: * (new key)": answer(client.put(bucket, key, b"one", {"If-None-Match": "*"})),
           "put If-None-Match: * (key exists)": answer(client.put(bucket, key, b"two", {"If-None-Match": "*"}))}
    out["content after both"] = client.get(bucket, key).body.decode()
    etag = client.head(bucket, key).headers.get("etag", "")
    out["put If-Match: wrong etag"] = answer(client.put(bucket, key, b"three", {"If-Match": '"0123"'}))
    out["put If-Match: its etag"] = answer(client.put(bucket, key, b"three", {"If-Match": etag}))
    out["put If-Match: (no such key)"] = answer(client.put(bucket, key + "-none", b"x", {"If-Match": etag}))
    out["copy If-None-Match: * (new key)"] = answer(client.copy(bucket, key, key + "-copy", {"If-None-Match": "*"}))
    out["copy If-None-Match: * (key exists)"] = answer(client.copy(bucket, key, key + "-copy", {"If-None-Match": "*"}))
    return out


def _racer(args: tuple) -> list[tuple[int, int]]:
    endpoint, access, secret, ca, bucket, base, count, barrier = args
    client = Client(endpoint, access, secret, ca)
    barrier.wait()
    return [claim(client, bucket, base, f"pid-{os.getpid()}") for _ in range(count)]


def race(srv: common.Server, racers: int, claims_each: int) -> dict:
    """`racers` processes, started together, each claiming `claims_each` versions of one model."""
    base = f"publish/race-{secrets.token_hex(4)}"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(racers)
        t0 = time.monotonic()
        with ctx.Pool(racers) as pool:
            got = pool.map(_racer, [(srv.endpoint, srv.access_key, srv.secret_key, srv.ca, srv.bucket, base,
                                     claims_each, barrier)] * racers)  # fmt: skip
        seconds = time.monotonic() - t0
    versions = [v for per in got for v, _ in per]
    tries = [t for per in got for _, t in per]
    return {"racers": racers, "claims_each": claims_each, "claimed": len(versions), "distinct": len(set(versions)),
            "highest": max(versions), "max_tries": max(tries), "mean_tries": round(statistics.mean(tries), 2),
            "seconds": round(seconds, 2)}  # fmt: skip


def saved_models(local: Path) -> dict[str, Path]:
    from dtr_trainer import export

    from bench.s3.write import big_model

    paths = {"cnn": local / "cnn", "20M": local / "big"}
    export._save(common.cnn(), str(paths["cnn"]), layer_traces=False)
    big_model().save(str(paths["20M"]), save_format="tf", include_optimizer=False)
    return paths


def timed_publish(srv: common.Server, name: str, root: Path, rounds: int) -> list[dict]:
    client = srv.client()
    base = f"publish/timed-{name}"
    out = []
    for _ in range(rounds):
        t0 = time.monotonic()
        version, _ = claim(client, srv.bucket, base, "timed")
        t1 = time.monotonic()
        staged = stage(client, srv.bucket, base, version, secrets.token_hex(4), root)
        t2 = time.monotonic()
        publish(client, srv.bucket, base, version, staged)
        t3 = time.monotonic()
        ok = version in complete_versions(client, srv.bucket, base)
        size = sum(f["size"] for f in staged["files"].values())
        out.append({"model": name, "bytes": size, "files": len(staged["files"]), "claim_s": round(t1 - t0, 3),
                    "stage_s": round(t2 - t1, 3), "publish_s": round(t3 - t2, 3), "complete": ok})  # fmt: skip
    return out


class Readers(threading.Thread):
    """Poll the model's prefix: the manifest reader's versions and the serving reader's (saved_model.pb), each
    checked against the model's full file list at that moment."""

    def __init__(self, srv: common.Server, base: str, expected: set[str]):
        super().__init__(daemon=True)
        self.client, self.bucket, self.base, self.expected = srv.client(), srv.bucket, base, expected
        self.stop = threading.Event()
        self.polls = 0
        self.manifest_accepted: set[int] = set()
        self.serving_seen: set[int] = set()
        self.incomplete_accepted: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            time.sleep(0.003)

    def poll(self) -> None:
        listing = {o.key[len(self.base) + 1:]: o.size for o in self.client.list(self.bucket, self.base + "/")}
        self.polls += 1
        versions: dict[str, dict[str, int]] = {}
        for key, size in listing.items():
            version, _, rel = key.partition("/")
            if version.isdigit():
                versions.setdefault(version, {})[rel] = size
        for v, files in versions.items():
            if LOADER_FILE in files:
                self.serving_seen.add(int(v))
                if not self.expected <= set(files):
                    self.incomplete_accepted.append(f"serving reader: {v}/ has {LOADER_FILE}, lacks "
                                                    f"{sorted(self.expected - set(files))}")  # fmt: skip
            if MANIFEST in files:
                reply = self.client.get(self.bucket, f"{self.base}/{v}/{MANIFEST}")
                named = json.loads(reply.body)["files"]
                self.manifest_accepted.add(int(v))
                if any(files.get(rel) != meta["size"] for rel, meta in named.items()):
                    self.incomplete_accepted.append(f"manifest reader: {v}/ has {MANIFEST}, not every file")


def kill_trials(srv: common.Server, root: Path, trials: int) -> dict:
    """Publishers (fresh processes) killed with SIGKILL: every other one at a random moment of its whole life
    (claim, stage or publish), the others at a random moment of the publish step (after it printed `staged`)."""
    base = f"publish/killed-{secrets.token_hex(4)}"
    expected = {rel for rel, _ in model_files(root)}
    env = {**os.environ, **common.s3_env(srv)}
    cmd = [sys.executable, "-m", "bench.s3.publish", "--child", srv.endpoint, srv.bucket, base, str(root)]
    # One publish uninterrupted: how long it takes, and its publish step, so that the kills land anywhere in them.
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=common.REPO, stdout=subprocess.PIPE, text=True)
    marks = {line.strip(): time.monotonic() - t0 for line in proc.stdout}
    proc.wait()
    full, publish_s = time.monotonic() - t0, marks["published"] - marks["staged"]
    readers = Readers(srv, base, expected)
    readers.start()
    rng = random.Random(7)
    outcomes = []
    for trial in range(trials):
        proc = subprocess.Popen(cmd, env=env, cwd=common.REPO, stdout=subprocess.PIPE, text=True)
        done = []
        if trial % 2:
            while (line := proc.stdout.readline().strip()) and line != "staged":
                done.append(line)
            done += [line] if line else []
            delay = rng.uniform(0.0, publish_s)
            phase = "publish"
        else:
            delay = rng.uniform(0.05, full)
            phase = "any"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        outcomes.append({"phase": phase, "kill_after_s": round(delay, 2), "finished_first": proc.returncode == 0,
                         "steps_done": done + out.split()})  # fmt: skip
    time.sleep(0.3)
    readers.stop.set()
    readers.join()
    client = srv.client()
    claims = sorted(int(o.key.rsplit("/", 1)[1]) for o in client.list(srv.bucket, claims_prefix(base)))
    complete = sorted(complete_versions(client, srv.bucket, base))
    staging_left = [o for o in client.list(srv.bucket, f"{base}/.dtr/staging/") if not o.key.endswith("/")]
    partial = sorted({int(o.key[len(base) + 1:].split("/")[0]) for o in client.list(srv.bucket, base + "/")
                      if o.key[len(base) + 1:].split("/")[0].isdigit()} - set(complete))  # fmt: skip
    return {"uninterrupted_s": round(full, 2), "uninterrupted_publish_step_s": round(publish_s, 2), "trials": trials,
            "outcomes": outcomes, "claims": claims, "claims_distinct": len(set(claims)) == len(claims),
            "complete_versions": complete, "partial_version_dirs": partial,
            "staging_objects_left": len(staging_left), "staging_bytes_left": sum(o.size for o in staging_left),
            "reader_polls": readers.polls, "manifest_reader_accepted": sorted(readers.manifest_accepted),
            "serving_reader_saw": sorted(readers.serving_seen),
            "incomplete_accepted": readers.incomplete_accepted}  # fmt: skip


def child(endpoint: str, bucket: str, base: str, root: str) -> None:
    """One publisher: claim, stage, publish; prints each step as it is done (the parent kills it anywhere)."""
    client = Client(endpoint, os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
                    os.environ.get("S3_CA_FILE"))  # fmt: skip
    version, _ = claim(client, bucket, base, f"pid-{os.getpid()}")
    print("claimed", flush=True)
    staged = stage(client, bucket, base, version, secrets.token_hex(4), Path(root))
    print("staged", flush=True)
    publish(client, bucket, base, version, staged)
    print("published", flush=True)


# ---------------------------------------------------------------- report


def markdown(results: dict) -> str:
    m, r, k = results["machine"], results["race"], results["kills"]
    lines = [
        "# Publishing model versions to a bucket: claims, staging, copies, a manifest last",
        "",
        f"`python -m bench.s3.publish`, {m['when']}, `{m['commit']}`, {m['cpus']} CPUs, load average "
        f"{m['load_average'][0]} at the end (another CI run shared the machine), SeaweedFS on the same machine.",
        "",
        "## Conditional writes",
        "",
        "| request | answer |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in results["conditions"].items()],
        "",
        "## Claims raced",
        "",
        f"{r['racers']} processes started together, each claiming {r['claims_each']} versions of one model with "
        f"`If-None-Match: *`: {r['claimed']} claims, **{r['distinct']} distinct** (highest {r['highest']}), at most "
        f"{r['max_tries']} tries for one claim (mean {r['mean_tries']}), {r['seconds']} s in all.",
        "",
        "## Time per step (medians)",
        "",
        "| model | bytes | files | claim s | stage s (upload) | publish s (copies + manifest) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in dict.fromkeys(t["model"] for t in results["timed"]):
        rows = [t for t in results["timed"] if t["model"] == name]
        med = {f: statistics.median(t[f] for t in rows) for f in ("claim_s", "stage_s", "publish_s")}
        lines.append(f"| {name} | {rows[0]['bytes']} | {rows[0]['files']} | {med['claim_s']:.3f} | "
                     f"{med['stage_s']:.3f} | {med['publish_s']:.3f} |")  # fmt: skip
    lines += [
        "",
        f"## Publishers killed (SIGKILL) at random moments ({k['trials']} trials, the 20 M model; uninterrupted: "
        f"{k['uninterrupted_s']} s from its process start, {k['uninterrupted_publish_step_s']} s of it the publish "
        "step; every other kill lands in that step)",
        "",
        f"- claims: {k['claims']} (distinct: {k['claims_distinct']})",
        f"- complete versions (manifest and every file): {k['complete_versions']}",
        f"- version dirs left partial by a kill: {k['partial_version_dirs']}; staging objects left: "
        f"{k['staging_objects_left']} ({k['staging_bytes_left'] / 1e6:.0f} MB)",
        f"- readers polled {k['reader_polls']} times; the manifest reader took {k['manifest_reader_accepted']}, the "
        f"serving reader (saved_model.pb) saw {k['serving_reader_saw']}",
        f"- **incomplete versions taken by a reader: {len(k['incomplete_accepted'])}** "
        f"{'; '.join(k['incomplete_accepted'][:5])}",
        "",
        "| killed in | after s | finished first | steps done |",
        "|---|---:|---|---|",
        *[f"| {o['phase']} | {o['kill_after_s']} | {o['finished_first']} | {' '.join(o['steps_done']) or '-'} |"
          for o in k["outcomes"]],
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    if "--child" in sys.argv:
        child(*sys.argv[sys.argv.index("--child") + 1:][:4])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-file", help="a running server's DIR/s3.env (default: start one)")
    p.add_argument("--kills", type=int, default=12)
    p.add_argument("--racers", type=int, default=8)
    p.add_argument("--claims", type=int, default=12, help="versions each racer claims")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with common.server(args.env_file) as srv, tempfile.TemporaryDirectory(prefix="dtr-s3-publish-") as tmp:
        common.use_s3(srv)
        answers = conditions(srv)
        print(f"conditions: {answers}", file=sys.stderr)
        raced = race(srv, args.racers, args.claims)
        print(f"race: {raced}", file=sys.stderr)
        models = saved_models(Path(tmp))
        timed = [t for name, root in models.items() for t in timed_publish(srv, name, root, args.rounds)]
        kills = kill_trials(srv, models["20M"], args.kills)
        results = {"machine": common.machine(), "conditions": answers, "race": raced, "timed": timed,
                   "kills": kills}
        common.write_results("results-publish", results, markdown(results))
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
