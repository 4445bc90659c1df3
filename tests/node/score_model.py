"""Score an exported model on digits' held-out split: `python score_model.py MODEL_DIR` -> JSON line.

Runs in the trainer's environment (TensorFlow 2.11), on what the chief wrote to the volume.
"""

import json
import sys

import numpy as np
import tensorflow as tf
from dtr_trainer.data import load_arrays

model_dir = sys.argv[1]
serve = tf.saved_model.load(model_dir).signatures["serving_default"]
# The examples' seed (42) picks the same held-out split the trainer evaluated on.
splits = load_arrays("digits", "", seed=42)
probs = serve(images=tf.constant(splits.x_eval, dtype=tf.float32))["probabilities"].numpy()
accuracy = float(np.mean(probs.argmax(axis=1) == splits.y_eval))
print(json.dumps({"accuracy": accuracy, "examples": len(splits.y_eval)}))
