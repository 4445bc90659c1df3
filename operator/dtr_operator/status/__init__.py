"""What the run's status should say, from what exists (TFJob, its pods) and what it said before. Pure.

The operator writes the result with a merge patch; everything here is deterministic given its inputs (the clock is a
parameter), so the same observation twice gives the same status and no write.

    compute.py     the whole status (tfjob_status, state_status, ...) and what to write (next_status)
    state.py       a run's State; the TFJob's state; text cleaned as a status holds it
    pods.py        what the worker pods tell: exits, causes, disruptions, pods that cannot start
    waiting.py     a run waiting for its worker pods, or short of them
    progress.py    status.progress from the chief's log
    conditions.py  status.conditions
    summary.py     the chief's summary: metrics, headline, model
    code.py        status.code: the run's code as the operator read it
"""
