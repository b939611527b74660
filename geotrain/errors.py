"""Every failure a user can see is a :class:`GeotrainError`.

The tree, with the process exit code the CLI maps each branch to (once, in ``geotrain.cli``)::

    GeotrainError                     1  something geotrain could not do; the message says what
    ├── InputError                    2  bad input: a flag, a file, a spec; fix the input and rerun
    │   ├── CatalogError              2  an offer file or snapshot that breaks the offer schema
    │   ├── JobSpecError              2  a job spec (YAML) with a missing, unknown or invalid field
    │   └── NotFoundError             2  a named thing (snapshot id, run id, workload) does not exist
    ├── InfeasibleError               3  the planner proved no mix meets the constraints
    ├── ProviderError                 4  a cloud or local provider refused or failed
    │   ├── CredentialsError          4  missing or rejected credentials
    │   ├── CapacityError             4  the scope (zone, region) has no capacity now
    │   ├── QuotaError                4  an account quota is exhausted
    │   ├── ConfigurationError        4  the launch request can never succeed as configured (image, type, SKU)
    │   ├── ThrottledError            4  the API asked us to slow down
    │   └── ProviderTimeoutError      4  a call timed out and its outcome is unknown (list to find out)
    ├── RunError                      5  a launched run failed (training crashed, restart budget spent)
    └── SearchCutShortError           6  the planner's search ran out of time: no mix found, none proven impossible

Exit code 130 is reserved for Ctrl-C, and 0 for success. Messages are one sentence (or two) that say
what was wrong and what to do; the original exception, if any, is kept as ``__cause__``.
"""

from __future__ import annotations


class GeotrainError(Exception):
    """Base of every user-facing failure. ``exit_code`` is what the CLI exits with."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InputError(GeotrainError):
    """The user gave something geotrain cannot use: a flag value, a file, a spec."""

    exit_code = 2


class CatalogError(InputError):
    """An offer file or stored snapshot breaks the offer schema (names file, line and column)."""


class JobSpecError(InputError):
    """A job spec file has a missing, unknown or invalid field (names the field)."""


class NotFoundError(InputError):
    """A snapshot, run, workload or other named thing does not exist."""


class InfeasibleError(GeotrainError):
    """No mix of offers meets the constraints; the message names the binding one."""

    exit_code = 3


class SearchCutShortError(GeotrainError):
    """The search's time limit ran out before it found a mix that meets the goal, and nothing proved
    that none exists; the message gives the best mix it had and what to do (more time, other limits)."""

    exit_code = 6


class ProviderError(GeotrainError):
    """A provider (cloud or local) refused or failed. ``scope`` names where, e.g. a zone."""

    exit_code = 4

    def __init__(self, message: str, *, scope: str | None = None) -> None:
        super().__init__(message)
        self.scope = scope


class CredentialsError(ProviderError):
    """Credentials are missing, expired or rejected."""


class CapacityError(ProviderError):
    """The scope has no capacity for the requested offer right now."""


class QuotaError(ProviderError):
    """An account or project quota would be exceeded."""


class ConfigurationError(ProviderError):
    """The launch request can never succeed as configured, whatever the capacity: no such image (or image
    parameter) in the region, an instance type or VM size the zone, region or subscription does not offer,
    an invalid parameter. Not capacity: waiting does not help, and neither does wandering to other regions.
    The message says what to change (the image setting, the size, another region).

    ``offer_id`` names the one offer the refusal is about when it is about that offer alone (its type or
    size in its zone or region: the catalog was wrong about it), so a launcher can leave that offer out and
    keep the rest of the mix; None: the request itself is wrong (the image, a parameter) for every offer."""

    def __init__(self, message: str, *, scope: str | None = None, offer_id: str | None = None) -> None:
        super().__init__(message, scope=scope)
        self.offer_id = offer_id


class ThrottledError(ProviderError):
    """The provider's API rate-limited the request."""


class ProviderTimeoutError(ProviderError):
    """A call timed out and its outcome is unknown: a launch may or may not have made its node. The
    caller lists the run's nodes (by request id) before trying again."""


class RunError(GeotrainError):
    """A launched run failed and could not be recovered."""

    exit_code = 5


EXIT_INTERRUPTED = 130
