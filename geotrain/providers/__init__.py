"""Providers: where nodes come from (the ``local`` provider runs them as processes on this machine)."""
