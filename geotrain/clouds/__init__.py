"""What geotrain knows of each cloud, below both of its users: the price sources
(``geotrain.pricing.live``) and the providers (``geotrain.providers``) stand on it.

- ``aws``, ``gcp``, ``azure``: the SDK client factories, credential and project discovery, the error
  tables (which codes are throttling, refused permissions, rejected credentials) and the SDK's own
  exception classes, and the shapes both sides read the same way;
- ``retry``: the one backoff policy for throttling;
- ``geography``: which region is on which continent, and the AWS zone kinds.
"""
