"""spec.disruption, declared as fields.py declares the rest (fields.py imports it into SPEC). Pure data.

What a run does when Kubernetes takes its workers away (a drain, an eviction, a node lost or declared out of
service, a preemption): start again from its last finished epoch (resume), or keep the drain waiting (protect).
docs/clusters.md#when-kubernetes-takes-a-worker-away.
"""

from __future__ import annotations

from dtr_contract import flags

from .schema import Field

DISRUPTION = Field("disruption", "object",
    "What the run does when Kubernetes takes a worker away: a drain or another eviction, its node lost or declared "
    "out of service, a preemption.",
    attr="disruption", default={}, doc="[clusters.md](clusters.md#when-kubernetes-takes-a-worker-away)",
    fields=(
    Field("resume", "boolean",
          "true: a run whose TFJob failed only because workers were taken away (or lost a peer to that) is started "
          "again by the operator from its last finished epoch, on the nodes that are left or come back; false: it "
          "fails, naming the workers and their nodes (default true).",
          attr="disruption.resume", default=True),
    Field("maxResumes", "integer",
          "Resumes after disruptions before the run fails as the TFJob did ({bounds}, default {default}).",
          attr="disruption.max_resumes", default=3, format="int32", minimum=0, maximum=20),
    Field("waitSeconds", "integer",
          "How long a resumed run may wait for its workers to start again (the node of its ReadWriteOnce volume gone, "
          "a pod of a lost node not gone, no room left) before it fails naming the nodes it lost ({bounds}, default "
          "{default}).",
          attr="disruption.wait_seconds", default=900, format="int32", minimum=60, maximum=604800),
    Field("protect", "boolean",
          "true: the operator makes a PodDisruptionBudget over the run's workers (named like the run, owned by it), so "
          "that a drain or another eviction of them waits (the Eviction API answers 429) while the run trains; a node "
          "lost or a preemption still takes workers (resume says what follows); false: no budget (default false).",
          attr="disruption.protect", default=False),
    Field("saveOnStop", "boolean",
          "true: a worker told to stop (SIGTERM: a drain, an eviction, a suspend, a preemption) saves with its peers "
          f"inside the epoch before it leaves, so the resume loses less than an epoch (the trainer's "
          f"{flags.BACKUP_ON_SIGTERM}); false: the resume starts from the last finished epoch (default false).",
          attr="disruption.save_on_stop", default=False, doc="[trainer.md](trainer.md#a-save-on-sigterm)"),
))  # fmt: skip
