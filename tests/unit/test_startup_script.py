"""The VM's first boot: an sshd of geotrain's own, and (as root, in the background) the public address
bound on an interface of its own, asked of each cloud's metadata service as the cloud documents it."""

import subprocess

import pytest

from geotrain.providers.startup import PUBLIC_INTERFACE, ssh_startup_script


def script(cloud: str) -> str:
    return ssh_startup_script(cloud=cloud, login_public="ssh-ed25519 AAAAC3Nz test", host_private="KEY",
                              ssh_port=7422)


@pytest.mark.parametrize(("cloud", "asks"), [
    ("aws", ["X-aws-ec2-metadata-token-ttl-seconds", "/latest/api/token", "/latest/meta-data/public-ipv4"]),
    ("gcp", ["Metadata-Flavor: Google", "/instance/network-interfaces/0/access-configs/0/external-ip"]),
    ("azure", ["Metadata: true", "/metadata/instance/network/interface/0/ipv4/ipAddress/0/publicIpAddress",
               "format=text"]),
])
def test_each_cloud_asks_its_metadata_service_for_the_public_address(cloud: str, asks: list[str]) -> None:
    text = script(cloud)
    assert all(a in text for a in asks), cloud
    assert f"ip addr add \"$PUB/32\" dev {PUBLIC_INTERFACE}" in text and "snat to $PRIV" in text
    assert "tcp dport != 7422 dnat to $PUB" in text  # geotrain's sshd is never redirected
    assert text.index("public address") < text.index("exec /usr/sbin/sshd")  # started before sshd, beside it
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_a_test_machines_loopback_vm_never_touches_this_machines_network() -> None:
    text = script("aws")
    guarded = text[text.index('if [ -z "${GEOTRAIN_NODE_ROOT:-}" ]'):]
    assert guarded.index("ip link add") > 0 and "fi\nmkdir -p /run/sshd" in guarded
