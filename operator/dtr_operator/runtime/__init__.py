"""Where the operator stands in for kopf, in one place: what kopf would do, what the operator does instead, why, and
the test that guards it are in one table, docs/operator.md#where-the-operator-stands-in-for-kopf.

    kopf_seams.py  the two changes to kopf itself: the slimmed watch and the diff base of spec.suspend alone
    kept.py        what the operator and kopf's watch keep of a run in memory
    trackers.py    the runs waiting for pods, waiting to be tried again, and Running (instead of timers and retries)
    loops.py       the background loops that act on the trackers
"""
