"""What runs on a node that is not this machine (a cloud VM, an on-prem host): the node agent and its
watch on the cloud's instance metadata for preemption notices. Standard library only: a VM runs it
before anything else is installed."""
