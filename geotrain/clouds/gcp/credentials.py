"""Application Default Credentials and the project, found once for the price source and the provider."""

from __future__ import annotations

import os
from typing import Any

from geotrain.errors import CredentialsError

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
PROJECT_ENV_VARS = ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "GCLOUD_PROJECT")
CREDENTIALS_HINT = ("set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file or run "
                    "`gcloud auth application-default login`")
PROJECT_HINT = "set GOOGLE_CLOUD_PROJECT or run `gcloud config set project PROJECT_ID`"


def environment_project(project: str | None = None) -> str | None:
    """``project``, else the first of GOOGLE_CLOUD_PROJECT, CLOUDSDK_CORE_PROJECT, GCLOUD_PROJECT set."""
    return project or next((os.environ[v] for v in PROJECT_ENV_VARS if os.environ.get(v)), None)


def default_credentials(project: str | None = None, *, anonymous: bool = False) -> tuple[Any, str]:
    """(credentials, project): Application Default Credentials (``anonymous``: none, for a local fake),
    and the project given, from the environment, or the credentials' own. CredentialsError says what to
    set."""
    project = environment_project(project)
    if anonymous:
        from google.auth.credentials import AnonymousCredentials

        credentials: Any = AnonymousCredentials()
    else:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            credentials, found = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        except DefaultCredentialsError as exc:
            raise CredentialsError(f"no Google Cloud credentials found: {CREDENTIALS_HINT}, and {PROJECT_HINT}",
                                   scope="gcp") from exc
        project = project or found
    if not project:
        raise CredentialsError(f"no Google Cloud project: {PROJECT_HINT}", scope="gcp")
    return credentials, project
