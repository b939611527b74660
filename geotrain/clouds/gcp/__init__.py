"""Google Cloud as both the price source and the provider reach it: credential and project discovery
(``credentials``), the client libraries' own exception classes (``errors``) and Compute Engine's
accelerator names (``accelerators``)."""
