"""`dtr run FILE`: train a run file, or your own model file, with local processes and no cluster; the runner is
dtr_client.local.runner."""

from __future__ import annotations

import argparse
from pathlib import Path

from dtr_contract import flags

from dtr_client import submit

from .command import BadInput
from .submit import add_training_options, given_params


def is_sweep(path: str) -> bool:
    """Whether FILE is a DistTrainingSweep (`dtr run sweep.yaml`: its trials as local runs)."""
    if not path.endswith((".yaml", ".yml")):
        return False
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return False  # the run file's own reader says what is wrong with it
    return isinstance(doc, dict) and doc.get("kind") == "DistTrainingSweep"


def _sweep(args: argparse.Namespace, base_dir: Path, python: str) -> int:
    from dtr_client.local.sweeps import run_sweep_file
    from dtr_client.sweeps import trial_lines

    if args.code or args.name or given_params(args) or args.data or args.backup:
        raise BadInput("a sweep file takes --dir, --python and --host-network only: its template says the rest")

    def say(status: dict) -> None:
        print("\n".join(trial_lines(status)), flush=True)

    return run_sweep_file(Path(args.file), base_dir, python, say, host_network=args.host_network)


def _run(args: argparse.Namespace) -> int:
    from dtr_client.local import netns, runner  # only when running: `dtr operator` never imports it

    base_dir = args.dir if args.dir is not None else runner.default_base_dir()
    python = args.python if args.python is not None else runner.default_python()
    if is_sweep(args.file):
        return _sweep(args, Path(base_dir), python)
    given = {dest: getattr(args, dest) for dest, *_ in submit.OPTIONS} | {"name": args.name,
                                                                          submit.PARAMS: given_params(args)}
    network = netns.host_network if args.host_network else netns.private_network
    return runner.run_file(args.file, base_dir=base_dir, python=python, code=args.code, given=given, network=network,
                           loopback_only=not args.host_network, backup=args.backup, data=args.data)


def add_backup_and_data_options(p: argparse.ArgumentParser) -> None:
    """--data, --resume and --fresh (dtr_client.local.start): what is on the run's local volume when it starts."""
    p.add_argument("--data", metavar="PATH",
                   help="copy a local file or directory into the run's data directory first, as DIR/volumes/<claim>/"
                   f"data/<its name> (what `dtr data put` does on a cluster); {flags.DATASET} NAME tells your "
                   "load_data its name")  # fmt: skip
    choice = p.add_mutually_exclusive_group()
    choice.add_argument("--resume", dest="backup", action="store_const", const="resume",
                        help="resume the backup an earlier run of this name left (only one made by the same file and "
                        "options); without it, a run starts fresh unless it is the same run, suspended "
                        "(docs/local.md#a-fresh-run-is-fresh)")  # fmt: skip
    choice.add_argument("--fresh", dest="backup", action="store_const", const="fresh",
                        help="start from epoch 1 even when the same run was suspended: its backup is discarded")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="train a run file, or your own model file, with local processes, no cluster (the embedded default)",
        description="Train the DistTrainingRun in FILE on this machine: the TFJob the operator would create, "
        "its workers as local processes (TF_CONFIG on loopback ports), the PVC as DIR/volumes/<claim>. "
        "FILE.py trains your own model file as `dtr submit FILE.py` would on a cluster (the options below); "
        f"{flags.CODE} FILE gives a run file's code. Streams the workers' logs, prints the final status as the cluster "
        "would report it, and exits 0 when the run Succeeded (1 Failed, 2 bad input).",
    )
    p.add_argument("file", metavar="FILE", help="a YAML file with one DistTrainingRun (or a DistTrainingSweep: its "
                   "trials as local runs, docs/experiments.md#sweeps), or your model's FILE.py")
    # The trainer's flag name, on purpose: the same file the trainer gets as --code in the pod.
    p.add_argument(flags.CODE, dest="code", metavar="FILE.py", default=None,
                   help="the run file's code: the local file stands for its spec.training.code ConfigMap")  # fmt: skip
    p.add_argument("--name", default=None, help="with FILE.py: the run's name (default: the file's name)")
    add_training_options(p)
    add_backup_and_data_options(p)
    p.add_argument("--dir", type=Path, default=None, help="volumes and logs [./.dtr, env DTR_RUN_DIR]")
    p.add_argument("--python", default=None,
                   help="the trainer's Python 3.9 [env DTR_TRAINER_PYTHON, else .venv/trainer/bin/python]")  # fmt: skip
    p.add_argument("--host-network", action="store_true",
                   help="run the workers in this machine's network, not on a loopback of their own: for a run that "
                   "downloads its data or names an object store (their TensorFlow port is then open to the network: "
                   "docs/local.md#network)")
    p.set_defaults(func=_run)
