"""The launcher: provision a plan, run training on it, recover from preemptions and launch failures."""
