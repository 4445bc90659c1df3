"""dtr_trainer: the DistTrainingRun trainer (TensorFlow 2.11 MultiWorkerMirroredStrategy)."""

__version__ = "0.1.0"
