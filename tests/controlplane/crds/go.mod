// The upstream CustomResourceDefinitions the integration tests' kube-apiserver
// serves (tests/integration/k8s/crds.py). Nothing here is built: the go command
// only downloads these modules, at these versions, and the tests read each
// CRD's YAML from the module cache. Never vendored, never copied into the repo.
module queuemgr.test/controlplane/crds

go 1.26.0

require (
	github.com/kubeflow/training-operator v1.8.1
	github.com/ray-project/kuberay/ray-operator v1.5.0
	k8s.io/autoscaler/cluster-autoscaler/apis v0.0.0-20240627115740-d52e4b9665d7
	sigs.k8s.io/jobset v0.11.1
)
