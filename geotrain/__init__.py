"""geotrain: plan, launch and account for deep-learning training on spot VMs across clouds."""

__version__ = "0.1.0"
