"""`python -m dtr_cli ...` is the `dtr` command."""

import sys

from .cli import main

sys.exit(main())
