"""`python -m dtr_operator ...` is the `dtr` command."""

import sys

from .cli import main

sys.exit(main())
