"""A real Kubernetes control plane (etcd, kube-apiserver, controller-manager,
scheduler) built from Go modules, for the integration tests."""
