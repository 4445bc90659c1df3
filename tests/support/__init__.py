"""What the test tiers share (and bench/, as `tests.support`): one module per kind of helper.

- `runs`: DistTrainingRun documents (`run_doc`; `make_run` for the unit tier, `digits_run` for real training)
- `cluster`: a cluster as kubectl sees it (`Cluster`); the fixtures that start one are in tests/conftest.py
- `api`: the API client (`Api`, the kubernetes package, in-process)
- `fake_kube`: the unit tier's in-memory fake of the API as `dtr_operator.kube.Kube` presents it (`FakeKube`)
- `reconciler`: the operator's Reconciler on that fake, and what it wrote; `local_exec`: the transfer pod's exec as
  a local process on a stand-in volume (`VolumeKube`); `tfjobs`: a run's TFJob, pods and chief's log for the
  status tests
- `operator`: the operator under test, in this process (`Operator`, kopf's KopfRunner) or as a `dtr operator`
  subprocess (`OperatorProcess`)
- `wait`: `poll`, `wait_for`, `wait_status`
- `node`: the real node (`RealNode`, `start_real_node`) and its fixtures
- `trainer`: the trainer as local processes (`Volume`, `start_workers`, `run_trainer`)
- `repo`: the repository's root and a clean environment for the commands the tests run

`__init__`, `cluster`, `wait`, `repo` and `trainer` also run on the trainer tier's Python 3.9.
"""
