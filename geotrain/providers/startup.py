"""The startup script a cloud VM runs at first boot (AWS user data, GCP ``startup-script`` metadata,
Azure custom data): :func:`ssh_startup_script`, an sshd of geotrain's own, through which the launcher
does everything else (``geotrain.providers.cloudnodes``). Nothing is installed from a package index at
boot: the launcher ships geotrain itself (``geotrain.providers.shipping``).
"""

from __future__ import annotations

import shlex

import geotrain

NODE_UID = 3847  # the node user's uid where the image has it free (the same on every VM of a run)
PUBLIC_INTERFACE = "gtpub"  # holds the VM's public address, for workers across networks (GLOO_SOCKET_IFNAME)
METADATA = "http://169.254.169.254"
_PUBLIC_ADDRESS = {  # how each cloud's metadata service tells a VM its public address
    "aws": (f"T=$(curl -sf -m 2 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' {METADATA}/latest/api/token)"
            f" && curl -sf -m 2 -H \"X-aws-ec2-metadata-token: $T\" {METADATA}/latest/meta-data/public-ipv4"),
    "gcp": (f"curl -sf -m 2 -H 'Metadata-Flavor: Google' "
            f"{METADATA}/computeMetadata/v1/instance/network-interfaces/0/access-configs/0/external-ip"),
    "azure": (f"curl -sf -m 2 -H 'Metadata: true' '{METADATA}/metadata/instance/network/interface/0/ipv4/ipAddress/0/"
              "publicIpAddress?api-version=2021-02-01&format=text'"),
}


def public_address_block(cloud: str, ssh_port: int) -> str:
    """Root's part of a VM's first boot that lets workers bind its public address, which 1:1 NAT keeps off
    its interfaces: the address (from the metadata service) on an interface of its own
    (``PUBLIC_INTERFACE``, a veth end), connections from it leave with the private address (which the
    cloud's NAT maps back to the public one), and connections that arrive from outside the private
    ranges at the private address (the cloud's NAT turned the public one into it) reach the public one,
    but for geotrain's sshd. A run whose nodes are in several networks starts its workers with
    ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` set to it. A VM without a public address, or an image
    without ``ip`` or ``nft``, boots without it (said on its console)."""
    fetch = _PUBLIC_ADDRESS.get(cloud)
    if fetch is None:
        return ""
    return f"""if [ -z "${{GEOTRAIN_NODE_ROOT:-}}" ]; then  # (not on a test's loopback "VM": that is this machine)
  (
    set +e
    PUB=""
    for _ in $(seq 30); do PUB=$({fetch}); [ -n "$PUB" ] && break; sleep 1; done
    ROUTE=$(ip -4 route get 1.1.1.1 2> /dev/null)
    PRIV=$(echo "$ROUTE" | awk '{{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1)}}')
    DEV=$(echo "$ROUTE" | awk '{{for (i = 1; i < NF; i++) if ($i == "dev") print $(i + 1)}}')
    if [ -n "$PUB" ] && [ -n "$PRIV" ] && ip link add {PUBLIC_INTERFACE} type veth peer name {PUBLIC_INTERFACE}x &&
        ip addr add "$PUB/32" dev {PUBLIC_INTERFACE} && ip link set {PUBLIC_INTERFACE} up &&
        ip link set {PUBLIC_INTERFACE}x up && nft -f - <<GEOTRAIN_NAT
table ip geotrain {{
  chain out {{ type nat hook postrouting priority srcnat; ip saddr $PUB oifname "$DEV" snat to $PRIV; }}
  chain in {{ type nat hook prerouting priority dstnat; iifname "$DEV" ip daddr $PRIV ip saddr != {{ 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10 }} tcp dport != {int(ssh_port)} dnat to $PUB; }}
}}
GEOTRAIN_NAT
    then echo "geotrain: public address $PUB on {PUBLIC_INTERFACE}"
    else echo "geotrain: the public address is not bound (${{PUB:-none}}): this node trains within its network only" >&2
    fi
  ) &
fi
"""


def ssh_startup_script(*, cloud: str, login_public: str, host_private: str, ssh_port: int,
                       node_user: str = "geotrain") -> str:
    """A VM's first boot when the launcher reaches it over SSH (``geotrain.providers.cloudnodes``): make
    the node's user if the image lacks one (unlocked for key login, no password), and start an sshd of
    geotrain's own on ``ssh_port`` with the node's host key, that lets in only that user with the run's
    login key. Nothing is installed and nothing else is started: the launcher does the rest over SSH.

    Variables, unset on a real VM, let a test run it as a "VM" on this machine: ``GEOTRAIN_NODE_USER``
    (a user of this machine instead of ``node_user``), ``GEOTRAIN_NODE_ROOT`` (the VM's folder: sshd's
    files go in its ``ssh/``, not /etc/geotrain-ssh, and sshd does not insist on its parents' modes,
    such as a shared /tmp's), ``GEOTRAIN_SSH_BIND`` (the address sshd listens
    on, default all), and ``GEOTRAIN_METADATA_URL`` (the fake metadata endpoint, handed to the node's
    commands by sshd).
    """
    for name, text in (("login key", login_public), ("host key", host_private)):
        if "GEOTRAIN_" in text:
            raise ValueError(f"a {name} cannot contain GEOTRAIN_")
    if "\n" in login_public.strip() or not login_public.startswith("ssh-"):
        raise ValueError("the login key is one public key line")
    return f"""#!/bin/bash
# geotrain {geotrain.__version__}: an sshd of its own for the launcher ({cloud})
set -euo pipefail
U="${{GEOTRAIN_NODE_USER:-{node_user}}}"
if ! id -u "$U" > /dev/null 2>&1; then  # one uid on every VM, so that a shared file system (EFS, NFS) sees one owner
  if getent passwd {NODE_UID} > /dev/null || getent group {NODE_UID} > /dev/null; then
    useradd --create-home --shell /bin/bash "$U"
  else
    useradd --create-home --shell /bin/bash --uid {NODE_UID} --user-group "$U"
    groupmod -g {NODE_UID} "$U" 2> /dev/null || true
  fi
fi
[ "$U" = root ] || usermod -p '*' "$U"  # sshd refuses a locked user; there is no password
D="${{GEOTRAIN_NODE_ROOT:+$GEOTRAIN_NODE_ROOT/ssh}}"
D="${{D:-/etc/geotrain-ssh}}"
install -d -m 755 "$D"
umask 077
cat > "$D/host_ed25519" <<'GEOTRAIN_HOST_KEY'
{host_private.strip()}
GEOTRAIN_HOST_KEY
umask 022
printf '%s\\n' {shlex.quote(login_public.strip())} > "$D/authorized_keys"
if [ "$U" = root ]; then ROOT_LOGIN=prohibit-password; else ROOT_LOGIN=no; fi
cat > "$D/sshd_config" <<GEOTRAIN_SSHD
Port {int(ssh_port)}
ListenAddress ${{GEOTRAIN_SSH_BIND:-0.0.0.0}}
HostKey $D/host_ed25519
AuthorizedKeysFile $D/authorized_keys
AllowUsers $U
PermitRootLogin $ROOT_LOGIN
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowTcpForwarding yes
X11Forwarding no
PidFile $D/sshd.pid
${{GEOTRAIN_METADATA_URL:+SetEnv GEOTRAIN_METADATA_URL=$GEOTRAIN_METADATA_URL}}
${{GEOTRAIN_NODE_ROOT:+StrictModes no}}
GEOTRAIN_SSHD
if [ ! -x /usr/sbin/sshd ]; then  # an image without OpenSSH's server
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server > "$D/install.log" 2>&1 || \\
    {{ echo "geotrain: no sshd on this image and it could not be installed" >&2; exit 1; }}
fi
{public_address_block(cloud, ssh_port)}mkdir -p /run/sshd
# in the foreground: the script's process is the node's sshd (cloud-init's last stage waits on it)
exec /usr/sbin/sshd -D -e -f "$D/sshd_config"
"""
