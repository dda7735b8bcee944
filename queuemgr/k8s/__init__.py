"""The Kubernetes adapter: job kinds as gangs, the admission webhook, its certificates.

Why it exists: queuemgr meets real clusters here. Jobs (``batch/v1`` Job,
JobSet, Kubeflow PyTorchJob) opt in with the ``queuemgr.io/queue-name`` label;
:mod:`queuemgr.k8s.jobs` turns each into core pod sets and builds the patches
that suspend it or run it on an admission, and :mod:`queuemgr.k8s.admission_handler`
keeps labelled jobs suspended at creation and refuses the ones that could
never run. The controller's side: :mod:`queuemgr.k8s.reflector` (list and
watch, resuming from ``resourceVersion``), :mod:`queuemgr.k8s.cluster` (the
watched jobs, pods, nodes and namespaces), :mod:`queuemgr.k8s.jobapi` (each
kind's calls), :mod:`queuemgr.k8s.jobstatus` and :mod:`queuemgr.k8s.events`
(what a job shows), :mod:`queuemgr.k8s.apiclient` (the rate-limited client);
:mod:`queuemgr.controller` joins them to the store. See docs/kubernetes.md.

What must stay true: this package imports only :mod:`queuemgr.core` and
third-party libraries (``kubernetes``, ``cryptography``), never the store,
the controller or the service; what it needs from the store comes through the narrow port in
:mod:`queuemgr.k8s.queue_directory`. Jobs are read from and patched as plain dicts,
as the dynamic client and AdmissionReview deliver them.
"""
