"""The local cluster this repository develops and tests against (docs/cluster.md).

A real control plane (etcd, kube-apiserver, kube-controller-manager, the training-operator) and a
real node (containerd, kubelet, kube-scheduler, kube-proxy, CoreDNS, local-path), built from source
by build.sh and build_node.sh at the pins in versions.env and run as local processes. Used by
`make dev-cluster`, the test tiers (tests/conftest.py, tests/support) and bench/.

    python -m devcluster.controlplane up|down|status [--dir DIR]
    python -m devcluster.node up|down|status [--install] [--dir DIR]   (root)

Run from the repository root. Standard library and PyYAML only; controlplane is imported by the
trainer tier too (Python 3.9).
"""
