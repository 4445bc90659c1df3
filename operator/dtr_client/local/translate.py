"""How a pod's container becomes a local process (pure: no I/O, no clock).

Used by `dtr run` (`dtr_client.local.runner`) to run each worker of the TFJob the operator
would create:

- Network: every TF_CONFIG address (`<job>-worker-<i>.<ns>.svc:<port>`) is rewritten to
  `127.0.0.1:<port>`, one port per address, allocated by the caller and shared by all the
  replicas of a job, so each worker binds its own port and reaches its peers at theirs.
- Volumes: a PVC is a local directory, and so is a ConfigMap the caller has a local stand-in for
  (the run's code: `dtr run --code FILE`); every value in args/env/workingDir that names a path
  under a volume's mountPath is rewritten to the same path under that directory. The
  termination-message path maps to a per-container file the same way.
- Command: `python` (and `python3`, `python3.X`) becomes the trainer's Python that `dtr run` was
  given (`--python`); anything else runs as given.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtr_contract import env as env_names
from dtr_contract.container import PORT, TERMINATION_MESSAGE_PATH

LOOPBACK = "127.0.0.1"

PathMap = Sequence[tuple[str, str]]  # (path in the container, local path), longest first

_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")


class TranslateError(ValueError):
    """The pod asks for something a local process cannot be given (one line for the pod status)."""


# --- network -------------------------------------------------------------------------------------


def tf_config_for(
    job: str, namespace: str, replicas: Mapping[str, int], task_type: str, index: int, port: int = PORT
) -> dict[str, Any] | None:
    """The TF_CONFIG the training-operator injects into a replica (None when not distributed).

    Same shape as pkg/controller.v1/tensorflow/tensorflow.go: keys are the lower-cased replica
    types, hosts `<job>-<type>-<i>.<ns>.svc:<port>`; only set when the job has more than one replica.
    """
    if sum(replicas.values()) <= 1:
        return None
    cluster = {
        rtype.lower(): [f"{job}-{rtype.lower()}-{i}.{namespace}.svc:{port}" for i in range(count)]
        for rtype, count in replicas.items()
        if count > 0
    }
    return {"cluster": cluster, "task": {"type": task_type.lower(), "index": index}, "environment": "cloud"}


def tf_config_addresses(tf_config: Mapping[str, Any]) -> list[str]:
    """Every `host:port` of the cluster, in a stable order (dense lists and the sparse dict form)."""
    out: list[str] = []
    for tasks in (tf_config.get("cluster") or {}).values():
        for addr in tasks.values() if isinstance(tasks, dict) else tasks:
            if isinstance(addr, str) and addr not in out:
                out.append(addr)
    return out


def rewrite_tf_config(tf_config: Mapping[str, Any], ports: Mapping[str, int]) -> dict[str, Any]:
    """Replace each `host:port` with `127.0.0.1:<ports[host:port]>`; everything else unchanged."""

    def local(addr: str) -> str:
        if addr not in ports:
            raise TranslateError(f"no local port allocated for TF_CONFIG address {addr}")
        return f"{LOOPBACK}:{ports[addr]}"

    cluster = {
        job: ({k: local(a) for k, a in tasks.items()} if isinstance(tasks, dict) else [local(a) for a in tasks])
        for job, tasks in (tf_config.get("cluster") or {}).items()
    }
    return {**tf_config, "cluster": cluster}


def parse_tf_config(raw: str | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TranslateError(f"TF_CONFIG is not JSON: {exc.msg}") from None
    return value if isinstance(value, dict) else None


# --- paths ---------------------------------------------------------------------------------------


def sort_path_map(entries: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Longest container path first, so a nested mount wins over its parent."""
    return sorted(((c.rstrip("/") or "/", h) for c, h in entries), key=lambda e: len(e[0]), reverse=True)


def map_path(path: str, path_map: PathMap) -> str | None:
    """The local path for a container path, or None when no entry covers it."""
    for inside, local in path_map:
        if path == inside:
            return local
        if path.startswith(inside.rstrip("/") + "/"):
            return local.rstrip("/") + path[len(inside.rstrip("/")) :]
    return None


def rewrite_value(value: str, path_map: PathMap) -> str:
    """Rewrite `/mnt/x/...` or `--flag=/mnt/x/...`; a value that names no mapped path is unchanged."""
    mapped = map_path(value, path_map)
    if mapped is not None:
        return mapped
    head, sep, tail = value.partition("=")
    if sep and tail.startswith("/"):
        mapped = map_path(tail, path_map)
        if mapped is not None:
            return f"{head}={mapped}"
    return value


def unmap_text(text: str, path_map: PathMap) -> str:
    """Local paths in a message (the trainer's summary, a log tail) back to the container's paths, so
    the pod status says `/mnt/dtr/models/m/1` exactly as a real container's would."""
    for inside, local in sorted(path_map, key=lambda e: len(e[1]), reverse=True):
        if local and local != "/":
            target = inside.rstrip("/") or "/"
            text = re.sub(re.escape(local.rstrip("/")) + r"(?![\w.-])", lambda _m, t=target: t, text)
    return text


def volume_dirs(
    volumes: Sequence[Mapping[str, Any]],
    claim_dir: Callable[[str], str],
    scratch_dir: str,
    config_maps: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Volume name -> local directory: a PVC -> claim_dir(claimName), emptyDir -> scratch_dir/<name>,
    hostPath -> its path, a ConfigMap -> config_maps[its name] (a directory holding its keys as files).
    Other kinds (secrets, other configMaps, projected tokens) are not provided."""
    out: dict[str, str] = {}
    for vol in volumes:
        name = vol.get("name", "")
        if "persistentVolumeClaim" in vol:
            out[name] = claim_dir(vol["persistentVolumeClaim"]["claimName"])
        elif "emptyDir" in vol:
            out[name] = os.path.join(scratch_dir, name)
        elif "hostPath" in vol:
            out[name] = vol["hostPath"]["path"]
        elif (vol.get("configMap") or {}).get("name") in (config_maps or {}):
            out[name] = (config_maps or {})[vol["configMap"]["name"]]
    return out


def mount_path_map(mounts: Sequence[Mapping[str, Any]], dirs: Mapping[str, str]) -> list[tuple[str, str]]:
    """(mountPath, local dir[/subPath]) for each mount whose volume has a local directory."""
    entries = []
    for m in mounts:
        local = dirs.get(m.get("name", ""))
        if local is not None:
            sub = m.get("subPath")
            entries.append((m["mountPath"], os.path.join(local, sub) if sub else local))
    return entries


# --- command and env -----------------------------------------------------------------------------


def local_argv(command: Sequence[str], args: Sequence[str], python: str, path_map: PathMap) -> list[str]:
    argv = [*command, *args]
    if not argv:
        raise TranslateError("the container has no command: a local process needs command (or args) set")
    if _PYTHON.match(os.path.basename(argv[0])):
        argv[0] = python
    return [argv[0], *(rewrite_value(a, path_map) for a in argv[1:])]


def resolve_env(env: Sequence[Mapping[str, Any]], fields: Mapping[str, str],
                secret_keys: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:  # fmt: skip
    """Container env -> (values, names left unresolved); fieldRef values come from `fields`, a Secret's key
    (secretKeyRef) from `secret_keys` by the key's name, whatever the Secret: a local run has no Secrets."""
    out: dict[str, str] = {}
    missing: list[str] = []
    for var in env:
        name = var["name"]
        if "value" in var:
            out[name] = _expand(str(var["value"]), out)
        elif "valueFrom" in var:
            value = _value_from(var["valueFrom"], fields, secret_keys or {})
            if value is None:
                missing.append(name)
            else:
                out[name] = value
        else:
            out[name] = ""
    return out, missing


def _value_from(source: Mapping[str, Any], fields: Mapping[str, str], secret_keys: Mapping[str, str]) -> str | None:
    """A valueFrom's value where a local process can have it: a field of `fields`, a key of `secret_keys`."""
    if "fieldRef" in source:
        return fields.get(source["fieldRef"].get("fieldPath", ""))
    if "secretKeyRef" in source:
        return secret_keys.get(source["secretKeyRef"].get("key", ""))
    return None


def _expand(value: str, defined: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion against variables defined earlier; $$ escapes."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
        lambda m: "$" if m.group(0) == "$$" else defined.get(m.group(1), m.group(0)),
        value,
    )


# The object store's keys (spec.objectStore.credentialsSecret): a local run has no Secret, so its workers get these
# from the environment dtr run was started in (docs/object-storage.md#dtr-run).
OBJECT_STORE_KEYS = (env_names.AWS_ACCESS_KEY_ID, env_names.AWS_SECRET_ACCESS_KEY)
def secret_keys_from(environ: Mapping[str, str]) -> dict[str, str]:
    """The object store's keys a local run's workers get: those set in `environ`."""
    return {key: environ[key] for key in OBJECT_STORE_KEYS if key in environ}


def unresolved(env: Sequence[Mapping[str, Any]], missing: Sequence[str]) -> str:
    """Why a local process cannot have these variables: without a cluster there is no Secret, ConfigMap or resource
    field to read (said, never dropped); for the store's keys, where a local run takes them."""
    keys = [var["valueFrom"]["secretKeyRef"]["key"] for var in env
            if var["name"] in missing and (var.get("valueFrom") or {}).get("secretKeyRef", {}).get("key")
            in OBJECT_STORE_KEYS]  # fmt: skip
    hint = f"; a local run takes a Secret's keys from its own environment: export {' '.join(keys)}" if keys else ""
    return f"env {', '.join(missing)}: its valueFrom cannot be resolved without a cluster{hint}"


PASS_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER")


def base_env(environ: Mapping[str, str], hostname: str) -> dict[str, str]:
    """What a local process gets besides the pod's env: enough of ours to run, and the pod's hostname."""
    return {**{k: environ[k] for k in PASS_ENV if k in environ}, "HOSTNAME": hostname, "PYTHONUNBUFFERED": "1"}


def default_python(environ: Mapping[str, str], repo: str) -> str:
    """$DTR_TRAINER_PYTHON, else the repository's .venv/trainer/bin/python (docs/architecture.md)."""
    return environ.get("DTR_TRAINER_PYTHON") or os.path.join(repo, ".venv", "trainer", "bin", "python")


@dataclass(frozen=True)
class LocalProcess:
    """Everything needed to start one container as a local process."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    termination_path: str
    path_map: list[tuple[str, str]]


def translate_container(
    container: Mapping[str, Any],
    volumes: Sequence[Mapping[str, Any]],
    *,
    python: str,
    ports: Mapping[str, int],
    claim_dir: Callable[[str], str],
    scratch_dir: str,
    termination_path: str,
    fields: Mapping[str, str],
    base_env: Mapping[str, str],
    config_maps: Mapping[str, str] | None = None,
    secret_keys: Mapping[str, str] | None = None,
) -> LocalProcess:
    """A pod's container -> argv, env and paths of the local process that plays it; secret_keys: resolve_env's."""
    dirs = volume_dirs(volumes, claim_dir, scratch_dir, config_maps)
    # Kubernetes' default, which is also the trainer's: the same path (dtr_contract.container).
    inside_term = container.get("terminationMessagePath") or TERMINATION_MESSAGE_PATH
    path_map = sort_path_map(
        [*mount_path_map(container.get("volumeMounts") or [], dirs), (inside_term, termination_path)]
    )
    variables = container.get("env") or []
    env, missing = resolve_env(variables, fields, secret_keys)
    if missing:
        raise TranslateError(unresolved(variables, missing))
    tf_config = parse_tf_config(env.get("TF_CONFIG"))
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(rewrite_tf_config(tf_config, ports), separators=(",", ":"))
    env = {k: rewrite_value(v, path_map) for k, v in env.items()}
    argv = local_argv(container.get("command") or [], container.get("args") or [], python, path_map)
    workdir = container.get("workingDir")
    # An image's own workingDir does not exist here; only one under a mapped volume is kept.
    cwd = map_path(workdir, path_map) if workdir else None
    return LocalProcess(
        argv=argv,
        env={**base_env, **env},
        cwd=cwd,
        termination_path=termination_path,
        path_map=path_map,
    )
