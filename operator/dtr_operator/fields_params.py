"""spec.training.params and spec.training.validateEvery, declared as fields.py declares the rest (fields.py imports
them into TRAINING). Pure data. docs/experiments.md.

params' values are numbers, strings or booleans, which no structural schema types as one: the CRD keeps each value
untyped (x-kubernetes-preserve-unknown-fields) and bounds what it can (the entries, a string's length, no object or
list with anything in it), which also leaves it out of CEL; deploy/base/admission.yaml's policy refuses the rest at
admission (a name outside the grammar, an empty object or list), and the parser (spec.py) all of it, with the
bounds of dtr_contract.params.
"""

from __future__ import annotations

from dtr_contract import flags
from dtr_contract import params as run_params

from .schema import Field, To

PARAMS = Field("params", "params",
    f"Hyperparameters of your own, passed to your code as ctx.params: at most {run_params.MAX_PARAMS} names "
    f"(letters, digits and '_', not starting with a digit, at most {run_params.MAX_NAME_LENGTH}) to numbers, "
    f"strings (at most {run_params.MAX_VALUE_LENGTH} characters) or booleans. `dtr submit/run --param name=value` "
    "sets them.",
    attr="training.params", max_items=run_params.MAX_PARAMS, to=To("trainer", flags.PARAMS),
    doc="[experiments.md](experiments.md#params)",
    items=Field("value", "scalar", max_length=run_params.MAX_VALUE_LENGTH))  # fmt: skip

VALIDATE_EVERY = Field("validateEvery", "integer",
    "Evaluate the eval split every this many epochs during training, its figures as val_* in status.progress and "
    "the history ({bounds}, default {default}; 0: only once, after the last epoch).",
    attr="training.validate_every", default=1, format="int32", minimum=0, maximum=1000,
    to=To("trainer", flags.VALIDATE_EVERY), doc="[experiments.md](experiments.md#validation)")  # fmt: skip

# The CRD's schema of one value (crd.py): untyped, so a number, a string or a boolean; an object or list only empty.
SCALAR_SCHEMA = {"x-kubernetes-preserve-unknown-fields": True, "maxProperties": 0, "maxItems": 0}
