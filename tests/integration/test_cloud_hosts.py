"""The AWS fake's instances as faithful remote hosts (tests/fakes/cloudhosts.py): through the real boto3,
RunInstances boots the user data as root inside a VM of the region's VPC; security groups are the VM's
firewall (CIDR rules, and group references matching private addresses inside the VPC); the VM reads its
spot notice from http://169.254.169.254 with IMDSv2; TerminateInstances and a reclaim pull the plug.
Needs root and nft (scripts/ensure_hosts.sh), as tests/integration/test_faithful_hosts.py."""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from tests.fakes import hosts as H
from tests.fakes.aws import DLAMI_IMAGE_ID, SPOT_RECLAIM_CODE, FakeAws
from tests.fakes.cloudhosts import HostHypervisor
from tests.fakes.metadata import FakeMetadata

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EAST, WEST = "us-east-1", "us-west-2"
PORT = 7000
REFUSE_S = 1.5  # how long a probe waits for a connection that must not happen

SERVER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
print("listening on", sys.argv[1], flush=True)
while True:
    conn, peer = s.accept()
    conn.sendall(f"peer {peer[0]}\n".encode())
    conn.close()
"""

# the user data: as root, a user, a file under /etc, a TCP server on PORT; its output is the console
USER_DATA = f"""#!/bin/bash
set -e
echo "user data runs as $(id -un) on $(hostname) in $PWD"
useradd -m -s /bin/bash trainer
echo "written by the user data" > /etc/geotrain-user-data
cat > /root/serve.py <<'EOF'
{SERVER}
EOF
nohup python3 -u /root/serve.py {PORT} &
echo "user data done"
"""

# the spot watch: IMDSv2 as the AWS docs show it, from the default address
WATCH = r"""
import time, urllib.error, urllib.request
BASE = "http://169.254.169.254"
def call(method, path, headers):
    request = urllib.request.Request(BASE + path, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=2) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
status, token = call("PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
print("token", status, flush=True)
print("without token", call("GET", "/latest/meta-data/spot/instance-action", {})[0], flush=True)
print("before the notice", call("GET", "/latest/meta-data/spot/instance-action",
                                {"X-aws-ec2-metadata-token": token})[0], flush=True)
while True:
    status, body = call("GET", "/latest/meta-data/spot/instance-action", {"X-aws-ec2-metadata-token": token})
    if status == 200:
        print("instance-action", body, flush=True)
        break
    time.sleep(0.1)
"""
WATCH_USER_DATA = f"""#!/bin/bash
cat > /root/watch.py <<'EOF'
{WATCH}
EOF
nohup python3 -u /root/watch.py &
echo "watching"
"""

PROBE = r"""
import concurrent.futures, json, socket, sys
def one(target):
    address, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((address, int(port)), timeout=float(sys.argv[1])) as conn:
            conn.settimeout(float(sys.argv[1]))
            try:
                return "ok " + conn.recv(200).decode(errors="replace").strip()
            except OSError:
                return "ok "
    except OSError as exc:
        return f"fail {type(exc).__name__}: {exc}"
targets = sys.argv[2:]
with concurrent.futures.ThreadPoolExecutor(len(targets)) as pool:
    print(json.dumps(dict(zip(targets, pool.map(one, targets)))))
"""

# geotrain.node.notices, unchanged, on the VM (geotrain is not there: the module is stdlib only)
NOTICE_POLL = ("import sys; sys.path.insert(0, '/tmp/shipped'); import notices; "
               "print(repr(notices.notice_source('aws').poll()))")


@dataclass
class Cloud:
    world: H.World
    hv: HostHypervisor
    aws: FakeAws
    metadata: FakeMetadata

    def ec2(self, region: str = EAST):
        return boto3.client("ec2", region_name=region, endpoint_url=self.aws.endpoint_url,
                            config=Config(retries={"total_max_attempts": 1}),
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def run(self, group_id: str, user_data: str, region: str = EAST, count: int = 1, **extra) -> list[str]:
        answer = self.ec2(region).run_instances(ImageId=DLAMI_IMAGE_ID, InstanceType="t3.micro", MinCount=count,
                                                MaxCount=count, SecurityGroupIds=[group_id], UserData=user_data,
                                                **extra)
        return [i["InstanceId"] for i in answer["Instances"]]

    def group(self, name: str, region: str = EAST, *, self_referencing: bool = False) -> str:
        ec2 = self.ec2(region)
        name = f"{name}-{uuid.uuid4().hex[:8]}"  # moto's backends outlive a FakeAws
        group_id = ec2.create_security_group(GroupName=name, Description=name)["GroupId"]
        if self_referencing:
            ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=[
                {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id}]}])
        return group_id

    def describe(self, instance_id: str, region: str = EAST) -> dict:
        reservations = self.ec2(region).describe_instances(InstanceIds=[instance_id])["Reservations"]
        return reservations[0]["Instances"][0]


def _require_hosts() -> None:
    if os.geteuid() != 0:
        pytest.skip("test hosts need root (CI runs as root)")
    H.require()


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    _require_hosts()
    with H.World() as world, FakeMetadata() as metadata:
        hv = HostHypervisor(world, metadata)
        try:
            with FakeAws(hypervisor=hv) as aws:
                yield Cloud(world, hv, aws, metadata)
        finally:
            hv.close()


def tcp_port(port: int, protocol: str = "tcp") -> dict:
    return {"IpProtocol": protocol, "FromPort": port, "ToPort": port}


def launcher_connect(address: str, port: int = PORT, timeout: float = REFUSE_S) -> str:
    try:
        with socket.create_connection((address, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            try:
                return "ok " + conn.recv(200).decode(errors="replace").strip()
            except OSError:
                return "ok "
    except OSError as exc:
        return f"fail {type(exc).__name__}: {exc}"


def probe(host: H.Host, *targets: str, timeout: float = REFUSE_S) -> dict[str, str]:
    """TCP connections from inside ``host`` (as its user), all at once."""
    proc = host.run(["python3", "-c", PROBE, str(timeout), *targets], timeout=30)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def serving(cloud: Cloud, *instance_ids: str) -> None:
    for instance_id in instance_ids:
        cloud.hv.wait_console(instance_id, "user data done")
        cloud.hv.wait_console(instance_id, f"listening on {PORT}")


# ------------------------------------------------------------------------------------------------ tests


def test_user_data_runs_as_root_inside_the_vm_and_its_security_group_is_the_firewall(cloud):
    hv, ec2 = cloud.hv, cloud.ec2()
    web = cloud.group("web")
    started = time.monotonic()
    (vm,) = cloud.run(web, USER_DATA)
    serving(cloud, vm)
    booted = time.monotonic() - started
    host = hv.host(vm)

    # the script ran inside the VM, as root, as cloud-init runs it
    console = hv.console(vm)
    assert f"user data runs as root on {host.name} in /" in console, console
    assert hv.script_exit(vm) == 0
    assert booted < 60  # a boot of the harness's VM, however busy the machine: under a minute

    # what it made is the VM's only
    inside = host.run("getent passwd trainer && test -d /home/trainer && cat /etc/geotrain-user-data", root=True)
    assert inside.returncode == 0 and "written by the user data" in inside.stdout, inside
    with pytest.raises(KeyError):
        pwd.getpwnam("trainer")
    assert not Path("/etc/geotrain-user-data").exists()
    (other,) = cloud.run(web, "#!/bin/bash\necho other\n")
    hv.wait_console(other, "other")
    assert hv.host(other).run("getent passwd trainer").returncode == 2
    assert not hv.host(other).path("/etc/geotrain-user-data").exists()

    # AWS reports the host's addresses
    described = cloud.describe(vm)
    assert described["PublicIpAddress"] == hv.addresses[vm] == host.public_address
    assert described["PrivateIpAddress"] == hv.private_address(vm) == host.private_address
    assert host.private_address.replace(".", "-") in described["PrivateDnsName"]
    assert ipaddress.ip_address(host.public_address) in cloud.world.public_block

    # closed until the group admits the launcher's public address, on that port only
    assert host.run(["python3", "-c", PROBE, "2", f"127.0.0.1:{PORT}"]).stdout.count("ok peer 127.0.0.1") == 1
    assert launcher_connect(host.public_address).startswith("fail"), "the security group is closed"
    assert launcher_connect(host.private_address).startswith("fail"), "a VPC's private address is not routed"
    ec2.authorize_security_group_ingress(GroupId=web, IpPermissions=[
        {**tcp_port(PORT + 1), "IpRanges": [{"CidrIp": f"{cloud.world.launcher_public}/32"}]}])
    assert launcher_connect(host.public_address).startswith("fail"), "another port is admitted, not this one"
    ec2.authorize_security_group_ingress(GroupId=web, IpPermissions=[
        {**tcp_port(PORT), "IpRanges": [{"CidrIp": f"{cloud.world.launcher_public}/32"}]}])
    assert launcher_connect(host.public_address) == f"ok peer {cloud.world.launcher_public}"
    assert launcher_connect(host.private_address).startswith("fail")
    assert (f"{cloud.world.launcher_public}/32", "tcp", (PORT, PORT)) in cloud.aws.vms.firewall[vm]

    ec2.revoke_security_group_ingress(GroupId=web, IpPermissions=[
        {**tcp_port(PORT), "IpRanges": [{"CidrIp": f"{cloud.world.launcher_public}/32"}]}])
    assert launcher_connect(host.public_address).startswith("fail"), "revoked"


def test_a_self_referencing_group_admits_private_addresses_of_the_vpc_and_a_cidr_rule_another_region(cloud):
    hv = cloud.hv
    cluster = cloud.group("cluster", self_referencing=True)
    a, b = cloud.run(cluster, USER_DATA, count=2)
    west = cloud.group("west", WEST)
    (c,) = cloud.run(west, USER_DATA, WEST)
    serving(cloud, a, b, c)
    ha, hb, hc = hv.host(a), hv.host(b), hv.host(c)
    assert ha.lan is hb.lan and hc.lan is not ha.lan  # one VPC per region

    # inside the VPC, the group matches private addresses; through the public ones it does not
    seen = probe(ha, f"{hb.private_address}:{PORT}", f"{hb.public_address}:{PORT}")
    assert seen[f"{hb.private_address}:{PORT}"] == f"ok peer {ha.private_address}"
    assert seen[f"{hb.public_address}:{PORT}"].startswith("fail"), seen
    seen = probe(hb, f"{ha.private_address}:{PORT}", f"{ha.public_address}:{PORT}")
    assert seen[f"{ha.private_address}:{PORT}"] == f"ok peer {hb.private_address}"
    assert seen[f"{ha.public_address}:{PORT}"].startswith("fail"), seen

    # another region: neither address until a /32 rule names its public address
    seen = probe(hc, f"{ha.private_address}:{PORT}", f"{ha.public_address}:{PORT}")
    assert all(v.startswith("fail") for v in seen.values()), seen
    cloud.ec2().authorize_security_group_ingress(GroupId=cluster, IpPermissions=[
        {**tcp_port(PORT), "IpRanges": [{"CidrIp": f"{hc.public_address}/32"}]}])
    seen = probe(hc, f"{ha.private_address}:{PORT}", f"{ha.public_address}:{PORT}", f"{hb.public_address}:{PORT}")
    assert seen[f"{ha.public_address}:{PORT}"] == f"ok peer {hc.public_address}"
    assert seen[f"{hb.public_address}:{PORT}"] == f"ok peer {hc.public_address}"
    assert seen[f"{ha.private_address}:{PORT}"].startswith("fail"), seen

    # the group's members as instances come and go
    (d,) = cloud.run(cluster, USER_DATA)
    serving(cloud, d)
    hd = hv.host(d)
    seen = probe(ha, f"{hd.private_address}:{PORT}")
    assert seen[f"{hd.private_address}:{PORT}"] == f"ok peer {ha.private_address}"
    assert probe(hd, f"{ha.private_address}:{PORT}")[f"{ha.private_address}:{PORT}"] == f"ok peer {hd.private_address}"
    assert (f"{hb.private_address}/32", "all", (1, 65535)) in cloud.aws.vms.firewall[a]
    cloud.ec2().terminate_instances(InstanceIds=[b])
    assert (f"{hb.private_address}/32", "all", (1, 65535)) not in cloud.aws.vms.firewall[a]
    assert all(r.source_cidr != f"{hb.private_address}/32" for r in hv.rules(a))
    assert b not in cloud.aws.vms.firewall


def test_a_spot_vm_reads_its_notice_from_the_link_local_metadata_and_is_gone_after(cloud):
    hv = cloud.hv
    group = cloud.group("spot")
    cloud.ec2().authorize_security_group_ingress(GroupId=group, IpPermissions=[
        {**tcp_port(22), "IpRanges": [{"CidrIp": f"{cloud.world.launcher_public}/32"}]}])
    (vm,) = cloud.run(group, WATCH_USER_DATA, InstanceMarketOptions={"MarketType": "spot"})
    (bystander,) = cloud.run(group, "#!/bin/bash\necho bystander\n")
    hv.wait_console(vm, "before the notice")
    console = hv.console(vm)
    assert "token 200" in console and "without token 401" in console and "before the notice 404" in console, console
    assert "Refused" in launcher_connect(hv.addresses[vm], 22), "up (the group admits port 22, nothing listens)"

    # geotrain.node.notices with its default base URL, unchanged, on the VMs
    for instance_id in (vm, bystander):
        shipped = hv.host(instance_id).path("/tmp/shipped/notices.py")
        shipped.parent.mkdir(parents=True, exist_ok=True)
        shipped.write_text((REPO / "geotrain" / "node" / "notices.py").read_text())
        os.chown(shipped.parent, hv.host(instance_id).uid, hv.host(instance_id).gid)
    polled = hv.host(vm).run(["python3", "-c", NOTICE_POLL], timeout=30)
    assert polled.returncode == 0 and polled.stdout.strip() == "None", polled

    notice_s = 5.0
    cloud.aws.vms.reclaim(vm, notice_s=notice_s)
    given = time.monotonic()
    out = hv.wait_console(vm, "instance-action", timeout_s=notice_s)
    action = json.loads(out.split("instance-action", 1)[1].strip().splitlines()[0])
    assert action["action"] == "terminate"
    polled = hv.host(vm).run(["python3", "-c", NOTICE_POLL], timeout=30)
    assert "aws spot instance-action terminate" in polled.stdout, polled
    assert vm in cloud.metadata.first_served
    polled = hv.host(bystander).run(["python3", "-c", NOTICE_POLL], timeout=30)
    assert polled.stdout.strip() == "None", "the notice is the reclaimed VM's only"
    assert hv.alive(vm), "the reclaim comes notice_s after the notice"

    deadline = given + notice_s + 10
    while hv.alive(vm) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not hv.alive(vm) and hv.host(vm).pids() == []
    described = cloud.describe(vm)
    assert described["State"]["Name"] == "terminated"
    assert described["StateReason"]["Code"] == SPOT_RECLAIM_CODE
    assert hv.alive(bystander)
    assert "timed out" in launcher_connect(hv.addresses[vm], 22), "gone: a silent timeout"


def test_terminate_pulls_the_plug_and_nothing_is_left_after_the_world_closes():
    _require_hosts()
    with FakeMetadata() as metadata:
        world = H.World()
        try:
            hv = HostHypervisor(world, metadata)
            with FakeAws(hypervisor=hv) as aws:
                cloud = Cloud(world, hv, aws, metadata)
                group = cloud.group("web")
                cloud.ec2().authorize_security_group_ingress(GroupId=group, IpPermissions=[
                    {**tcp_port(PORT), "IpRanges": [{"CidrIp": f"{world.launcher_public}/32"}]}])
                (vm,) = cloud.run(group, USER_DATA)
                serving(cloud, vm)
                host = hv.host(vm)
                assert launcher_connect(host.public_address) == f"ok peer {world.launcher_public}"
                assert host.pids()
                cloud.ec2().terminate_instances(InstanceIds=[vm])
                assert not hv.alive(vm) and host.pids() == []  # before TerminateInstances answered
                assert launcher_connect(host.public_address).startswith("fail")
                assert cloud.describe(vm)["State"]["Name"] == "terminated"
                assert hv.running() == []
                (second,) = cloud.run(group, USER_DATA)
                serving(cloud, second)
                relays = list(hv._relays)  # noqa: SLF001 - what must not outlive the world
                pids = hv.host(second).pids()
                assert relays and pids
            hv.close()
        finally:
            world.close()
        idx = world.index
        assert all(p.poll() is not None for p in relays)
        assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
        assert not any(n.startswith(f"gt{idx}-") for n in H._netns_list())  # noqa: SLF001
        assert subprocess.run(["ip", "link", "show", f"gt{idx}l"], capture_output=True).returncode != 0
        assert subprocess.run(["nft", "list", "table", "inet", f"gt{idx}"], capture_output=True).returncode != 0
        assert H._users_of(idx) == []  # noqa: SLF001
        assert not world.root_dir.exists()  # the hosts' disks, consoles and the metadata socket
        with pytest.raises(KeyError):
            pwd.getpwnam("trainer")
