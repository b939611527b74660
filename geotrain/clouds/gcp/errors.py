"""The Google client libraries' exception classes that are no API answer at all."""

from __future__ import annotations


def sdk_errors() -> tuple[type[BaseException], ...]:
    """``GoogleAPIError`` (a retry given up, …; an API's error answer is its ``GoogleAPICallError``),
    ``GoogleAuthError`` (a token endpoint out of reach: ``TransportError``, ``RefreshError``), and the
    HTTP library's (``requests``, under the REST transport, which does not wrap them)."""
    import requests
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError

    return (GoogleAPIError, GoogleAuthError, requests.RequestException)
