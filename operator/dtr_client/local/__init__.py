"""Running DistTrainingRuns without a cluster: `dtr run` (runner.py), built on translate.py (pod
container -> local process) and kubelet.py (what a kubelet decides and reports); backend.py, the client's
local backend, starts and reads `dtr run` processes. The operator itself never imports this package. A real
cluster on this machine: devcluster/node.py."""
