"""queuemgr: a queue-based, fair-share GPU quota manager for Kubernetes."""

__version__ = "0.1.0"
