"""The operator's decisions in order: read, decide with the pure core, write. Knows nothing of kopf.

    reconciler.py  the Reconciler: the facade whose entry points the handlers and loops call
    decide.py      what exists -> one action (pure): Create, Sync, Record, Suspend, FailClosed
    children.py    a run created or resumed: its NetworkPolicy, PVC and TFJob (observe -> decide -> act)
    guard.py       the run's NetworkPolicy held (netpolicy.py decides), the namespace's other policies reported
    budget.py      the run's PodDisruptionBudget (spec.disruption.protect): made before its TFJob, let go once it ends
    mirror.py      TFJob (+ pods once finished) -> the run's status
    progress.py    a running run's chief log -> status.progress
    stall.py       the stall watchdog's actions (its decisions: watchdog.py)
    waiting.py     why a run's worker pods do not start
    writes.py      the writes to a run's TFJob, one helper each
    context.py     what every part shares: the client, events, the clock, retries, the one status write
"""
