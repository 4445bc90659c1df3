"""Unit tests of bench/scaling/run.py's pure parts: the jobs it builds, the pair's overlap, the summary."""

from __future__ import annotations

import pytest

from bench.scaling.run import (
    CONFIGMAP,
    Config,
    Job,
    ceiling_objects,
    epoch_marks,
    markdown,
    overlap,
    pod_shape,
    summarize,
    trainer_objects,
)


def job(program: str, shape: str, eps: float, step: float, tag: str = "r0", i: int = 0, batch: int = 64,
        allreduce: float | None = None, window: tuple[float, float] = (0.0, 10.0)) -> Job:  # fmt: skip
    workers = 2 if shape == "mwms" else 1
    return Job(program, shape, batch, f"{program[:2]}-{shape}-{batch}-{tag}-{i}", workers, eps, step, window,
               allreduce_s=allreduce)  # fmt: skip


def test_overlap_is_the_shared_part_of_the_shorter_window() -> None:
    assert overlap((0, 10), (0, 10)) == 1.0
    assert overlap((0, 10), (5, 20)) == 0.5
    assert overlap((0, 10), (10, 20)) == 0.0
    assert overlap((0, 10), (2, 4)) == 1.0


def test_trainer_jobs_are_the_operators_pods_with_the_bench_shape_and_not_a_runs_labels() -> None:
    shape = pod_shape("1", {"TF_NUM_INTRAOP_THREADS": "1"})
    pvc, tfjob = trainer_objects("tr-x", "ns", "img", 2, Config.for_batch(256), shape)
    worker = tfjob["spec"]["tfReplicaSpecs"]["Worker"]
    container = worker["template"]["spec"]["containers"][0]
    assert worker["replicas"] == 2
    assert container["resources"]["limits"]["cpu"] == "1"
    assert {"name": "TF_NUM_INTRAOP_THREADS", "value": "1"} in container["env"]
    args = " ".join(container["args"])
    assert "--batch-size-per-worker 256 --steps-per-epoch 25" in args and "--dataset synthetic" in args
    for obj in (pvc, tfjob, worker["template"]):
        assert not any(k.startswith("distml.dev/") for k in obj["metadata"]["labels"]), obj["metadata"]["labels"]


def test_ceiling_jobs_run_the_script_from_its_configmap_in_the_same_pods() -> None:
    shape = pod_shape("1", {})
    _, tfjob = ceiling_objects("ce-x", "ns", "img", 1, Config(64, 100, 300), shape)
    spec = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["command"] == ["python", "/opt/bench/ceiling.py"]
    assert container["args"] == ["--batch", "64", "--steps", "300"]
    assert {"name": "bench", "configMap": {"name": CONFIGMAP}} in spec["volumes"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_summary_divides_mwms_by_the_pairs_sum_and_attributes_the_step() -> None:
    jobs = [
        job("trainer", "alone", 1000, 0.064), job("trainer", "pair", 900, 0.071, i=0),
        job("trainer", "pair", 900, 0.071, i=1, window=(5.0, 15.0)), job("trainer", "mwms", 1440, 0.0889),
        job("ceiling", "alone", 1100, 0.058), job("ceiling", "pair", 1000, 0.064, i=0),
        job("ceiling", "pair", 1000, 0.064, i=1), job("ceiling", "mwms", 1600, 0.08, allreduce=0.003),
    ]  # fmt: skip
    row = summarize(jobs, [64])["64"]
    assert row["trainer"]["efficiency"] == pytest.approx(1440 / 1800)
    assert row["trainer"]["efficiency_vs_alone"] == pytest.approx(1440 / 2000)
    assert row["trainer"]["pair_overlap"] == pytest.approx(0.5)
    assert row["ceiling"]["efficiency"] == pytest.approx(0.8)
    assert row["ratio_to_ceiling"] == pytest.approx((1440 / 1800) / 0.8)
    step = row["step_ms"]
    assert step["compute"] == pytest.approx(64) and step["allreduce_alone"] == pytest.approx(3)
    assert step["synchronisation"] == pytest.approx(16)
    assert step["trainer_own"] == pytest.approx(8.9)


def test_summary_takes_the_median_of_rounds_and_markdown_shows_each() -> None:
    jobs = []
    for tag, eff in (("r0", 0.7), ("r1", 0.9), ("r2", 0.8)):
        for program in ("trainer", "ceiling"):
            jobs += [job(program, "alone", 1000, 0.064, tag), job(program, "pair", 1000, 0.064, tag, 0),
                     job(program, "pair", 1000, 0.064, tag, 1),
                     job(program, "mwms", 2000 * eff, 0.08, tag, allreduce=0.002)]  # fmt: skip
    summary = summarize(jobs, [64])
    assert summary["64"]["trainer"]["efficiency"] == pytest.approx(0.8)
    assert sorted(summary["64"]["trainer"]["efficiency_rounds"]) == pytest.approx([0.7, 0.8, 0.9])
    doc = {"command": "python -m bench.scaling.run", "finished": "now", "commit": "abc", "cpus": 2,
           "loadavg_before": [1.0], "loadavg_after": [2.0], "rounds": 3, "cpu": "1", "env": [],
           "summary": summary, "jobs": [vars(j) for j in jobs]}  # fmt: skip
    text = markdown(doc)
    assert "**0.800** (0.700, 0.900, 0.800)" in text
    assert "| 64 | **1.000** |" in text


def test_epoch_marks_read_the_chiefs_begin_and_end_lines() -> None:
    log = "\n".join([
        "2026-12-02T02:00:00.000000000Z dtr_trainer[worker-0]: epoch 1/4 begin",
        "2026-12-02T02:00:05.500000000Z dtr_trainer[worker-0]: epoch 1/4 end accuracy=0.1 loss=2.3",
        "2026-12-02T02:00:05.750000000Z dtr_trainer[worker-0]: epoch 2/4 begin",
        "2026-12-02T02:00:09.000000000Z dtr_trainer[worker-0]: alive",
    ])  # fmt: skip
    begins, ends = epoch_marks(log)
    assert list(begins) == [1, 2] and list(ends) == [1]
    assert begins[2] - ends[1] == pytest.approx(0.25)
