"""Unit tests of bench/trainer/step_backup.py's pure parts: the lines it reads, the table it writes."""

from __future__ import annotations

from bench.trainer.step_backup import CONFIGS, RESUMED, SAVED, WINDOW, markdown, round_order

W = "dtr_trainer[worker-1]: "


def test_it_reads_the_trainers_lines() -> None:
    saved = f"{W}terminated (SIGTERM): saved the training state at epoch 2, step 45/200 with the other workers; ..."
    assert SAVED.search(saved).group(1) == "45"
    peer = f"{W}a peer was told to stop (SIGTERM): saved the training state at epoch 2, step 45/200 with it; ..."
    assert SAVED.search(peer).group(1) == "45"
    assert RESUMED.search(f"{W}resumed from backup at epoch 2/5, step 46/200").group(1) == "46"
    assert RESUMED.search(f"{W}resumed from backup at epoch 3/5") is None  # an epoch's backup: no step
    window = WINDOW.search(f"{W}window epochs=4 examples=25600 wall_s=7.2000 cpu_s=9.1 max_rss_mb=480")
    assert window.groups() == ("4", "7.2000")


def test_the_rounds_alternate_the_order() -> None:
    orders = [round_order(r) for r in range(4)]
    assert orders == [["off", "sigterm", "every"], ["off", "every", "sigterm"], ["every", "off", "sigterm"],
                      ["every", "sigterm", "off"]]  # fmt: skip
    assert all(sorted(order) == sorted(CONFIGS) for order in orders)


def test_the_table_has_a_row_per_steps_per_execution_and_flags() -> None:
    figures = {"median": 9.0, "min": 8.0, "max": 10.0, "values": [8.0, 9.0, 10.0]}
    sigterm = {"codes": [138, 143], "restart_codes": [0, 0], "stop_seconds": 0.2, "saved_after_step": 45,
               "resumed_at_step": 46, "steps_redone": 0}  # fmt: skip
    doc = {"command": "python -m bench.trainer.step_backup", "time": "2026-12-05 01:00 UTC", "commit": "abc1234",
           "cpus": 2, "rounds": 1, "loadavg_before": 1.0, "loadavg_after": 1.5,
           "batch_hooks_us_per_execution": {"BackupAndRestore": 30.0, "StepBackup": 0.3},
           "one_save_in_process": {"parameters": 93322, "checkpoint_bytes": 1127165,
                                   "ms_per_save": {"median": 32.6, "min": 26.7, "max": 124.5, "values": [1.0] * 20}},
           "results": [{"steps_per_execution": 5,
                        "ms_per_step": {"off": figures, "sigterm": figures, "every": figures},
                        "ratio_of_medians": {"sigterm": 1.0, "every": 1.1},
                        "median_paired_ratio": {"sigterm": 1.01, "every": 1.12},
                        "every_ms_per_save": 6.67, "sigterm": [sigterm]}]}  # fmt: skip
    text = markdown(doc)
    assert "| 5 | off | 9.0 (8.0..10.0) |  |  |" in text
    assert "| 5 | sigterm | 9.0 (8.0..10.0) | 1.0 | 1.01 |" in text
    assert "| 5 | every | 9.0 (8.0..10.0) | 1.1 | 1.12 |" in text
    assert "6.67 ms at 5 steps/execution" in text
    assert "| 5 | 0.2 | 45 | 46 | 0 |" in text
    assert "BackupAndRestore 30.0 µs" in text and "StepBackup 0.3 µs" in text
    assert "the built-in cnn (93,322 parameters, a checkpoint of 1,127,165 bytes" in text
    assert "32.6 ms median (26.7..124.5, 20 saves)" in text
