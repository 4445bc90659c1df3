"""DistTrainingSweep's pure core (issue 42): the search space and each trial's point (space.py), early stopping of
trials (prune.py), and what a sweep does next from its trials as observed (decide.py). No I/O, no clock."""
