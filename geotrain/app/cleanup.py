"""``geotrain cleanup``: remove what emulated-WAN runs left behind (network namespaces, delay lines), and
with ``--cloud``, release a run's cloud resources found by their tags from any machine (:func:`cloud_cleanup`)."""

from __future__ import annotations

from collections.abc import Sequence

from geotrain.errors import InputError
from geotrain.providers.sweep import Say, Swept

CLOUDS = ("aws", "gcp", "azure")


def cleanup(*, everything: bool = False) -> list[str]:
    """Namespaces and delay lines of runs whose launcher is gone (``everything``: of every run, live
    or not), removed; what was removed, in words. Nothing to do without the privileges to list them."""
    from geotrain.wan import cleanup as remove_leftovers
    from geotrain.wan import privileges

    if privileges() is not None:
        return []
    return remove_leftovers(everything=everything)


def cloud_cleanup(cloud: str, *, run_id: str | None = None, regions: Sequence[str] = (), dry_run: bool = False,
                  say: Say | None = None) -> list[Swept]:
    """Every resource of ``run_id`` (None: of every geotrain run) on ``cloud`` — instances, their disks and
    addresses, network interfaces, security groups / firewall rules / resource groups — found by the
    ``geotrain-run`` tag or label in every region the account has (or ``regions``), with no local state,
    and released unless ``dry_run``. The credentials are the cloud's usual ones (as for ``launch``)."""
    cloud = cloud.lower()
    if cloud not in CLOUDS:
        raise InputError(f"--cloud {cloud!r}: one of {', '.join(CLOUDS)}")
    if cloud == "aws":
        import boto3
        from botocore.exceptions import BotoCoreError

        from geotrain.errors import CredentialsError
        from geotrain.clouds.aws.clients import default_client_factory
        from geotrain.clouds.aws.errors import CREDENTIALS_HINT
        from geotrain.providers.aws.sweep import sweep as aws_sweep

        try:
            home = boto3.session.Session().region_name or "us-east-1"
        except BotoCoreError as exc:
            raise CredentialsError(f"AWS: {exc}; {CREDENTIALS_HINT}", scope="aws") from exc
        return aws_sweep(default_client_factory(), run_id=run_id, regions=regions, dry_run=dry_run, say=say,
                         home_region=home)
    if cloud == "gcp":
        from geotrain.providers.gcp.sweep import sweep as gcp_sweep

        return gcp_sweep(run_id=run_id, regions=regions, dry_run=dry_run, say=say)
    from geotrain.providers.azure.sweep import sweep as azure_sweep

    return azure_sweep(run_id=run_id, regions=regions, dry_run=dry_run, say=say)
