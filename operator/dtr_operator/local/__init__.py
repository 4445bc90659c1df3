"""Running DistTrainingRuns without a real cluster: `dtr run` (runner.py) and the dev cluster's
process-backed node (node.py). Both share translate.py (pod container -> local process) and
kubelet.py (what a kubelet decides and reports). Development and test tooling; the operator
itself never imports this package."""
