"""The `dtr` command (cli.py): one module per verb, over the client library (dtr_client) and the operator's
API (dtr_operator); command.py holds what they share, the way from an error to an exit code and to the client.
"""

import os
import signal

if os.getpid() == 1:
    # A container's first process (the operator's image runs `dtr operator`) gets no default action for SIGTERM:
    # until kopf or a command handles it, the kernel drops it, and a pod deleted in its first seconds (a rollout
    # right after an install) waited out its whole grace period, 31.6 s on the three nodes. Ended at once instead,
    # as any other process is.
    signal.signal(signal.SIGTERM, lambda signum, _frame: os._exit(128 + signum))
