"""Every name the operator speaks on the wire, declared once: the API groups, versions, kinds and plurals of what it
reads and writes, the labels and annotations it sets or reads, and the runPolicy values it writes. Pure; imports
nothing of the operator, so the transport (kube.py), the builders and the status read names from here, not from
each other (docs/architecture.md#where-to-add-things).
"""

from __future__ import annotations

# ---- DistTrainingRun (this project's custom resource) ---------------------------------------------
GROUP = "distml.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "DistTrainingRun"
PLURAL = "disttrainingruns"
# DistTrainingSweep: trials of a run template (sweep/); its trials are runs it owns, labelled SWEEP_LABEL.
SWEEP_KIND = "DistTrainingSweep"
SWEEP_PLURAL = "disttrainingsweeps"

# ---- the Kubeflow training-operator's TFJob -----------------------------------------------------
TFJOB_GROUP = "kubeflow.org"
TFJOB_VERSION = "v1"
TFJOB_PLURAL = "tfjobs"
TFJOB_API_VERSION = f"{TFJOB_GROUP}/{TFJOB_VERSION}"
TFJOB_KIND = "TFJob"
TFJOB_CRD = f"{TFJOB_PLURAL}.{TFJOB_GROUP}"
# The training-operator only wires TF_CONFIG and the services into a container with this name.
CONTAINER_NAME = "tensorflow"
PORT_NAME = "tfjob-port"
KEEP_PODS = "None"  # runPolicy.cleanPodPolicy values of the training-operator
RELEASE_RUNNING_PODS = "Running"

NETWORK_POLICY_GROUP = "networking.k8s.io"
NETWORK_POLICY_API_VERSION = f"{NETWORK_POLICY_GROUP}/v1"
NETWORK_POLICY_KIND = "NetworkPolicy"
NETWORK_POLICY_PLURAL = "networkpolicies"

# A run's PodDisruptionBudget (spec.disruption.protect).
PDB_API_VERSION = "policy/v1"
PDB_KIND = "PodDisruptionBudget"

# (apiVersion, kind) -> plural, for every kind the operator reads or writes by name.
PLURALS: dict[tuple[str, str], str] = {
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("v1", "Pod"): "pods",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Namespace"): "namespaces",  # cluster-scoped: read with namespace "" (its Pod Security labels)
    (TFJOB_API_VERSION, TFJOB_KIND): TFJOB_PLURAL,
    (API_VERSION, KIND): PLURAL,
    (API_VERSION, SWEEP_KIND): SWEEP_PLURAL,
    (NETWORK_POLICY_API_VERSION, NETWORK_POLICY_KIND): NETWORK_POLICY_PLURAL,
    (PDB_API_VERSION, PDB_KIND): "poddisruptionbudgets",
}

# ---- labels -----------------------------------------------------------------------------------
RUN_LABEL = "distml.dev/run"
SWEEP_LABEL = "distml.dev/sweep"  # on a sweep's trials (runs): the sweep's name
TRIAL_LABEL = "distml.dev/trial"  # on a sweep's trials: the trial's index
MANAGED_BY = {"app.kubernetes.io/managed-by": "dtr-operator"}

# Labels the training-operator puts on the pods it creates (kubeflow.org/v1 common_types.go).
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
TFJOB_CONTROLLER = "tfjob-controller"  # its controller's name (tensorflow/tfjob_controller.go)
WORKER = "worker"  # the replica type Worker, as its label says it

# The node label that makes each node its own topology domain.
HOSTNAME_LABEL = "kubernetes.io/hostname"

# The label Kueue reads to queue a job in a LocalQueue (kueue.x-k8s.io/v1beta1).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The label Kueue reads for a job's WorkloadPriorityClass.
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"

# ---- annotations --------------------------------------------------------------------------------
# On a TFJob the operator suspended (spec.suspend): only such a suspension is the operator's to undo; one by a
# queue manager or a person stays theirs.
SUSPENDED_BY_ANNOTATION = "distml.dev/suspended-by"
SUSPENDED_BY = "dtr-operator"
