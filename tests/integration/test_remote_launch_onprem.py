"""A SkyPilot task on the user's own machines, launched as a user would (`geotrain plan` and `geotrain
launch` in processes of their own) from a launcher behind NAT onto hosts that are other machines
(tests/fakes/hosts.py): each has its own user, home, network and a Python with torch but no geotrain;
none can read the launcher's files or open a connection to it.

The launch ships this geotrain as a wheel over SSH and installs it on each host, copies the task's
workdir and file mount there, and runs torchrun DDP across two hosts. Midway one host dies (the plug
is pulled: every process on it, its network gone); the launcher finds the node lost, takes the site's
third machine and resumes from the newest checkpoint, in the site's shared folder (as an NFS share
mounted at the same path on every host: the one thing the hosts share). The run completes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import hosts as H
from tests.remote_task import (
    check_resumed_and_done, check_setup_failed, launch_failing_setup, plan_and_launch, shared_folder, user_folder,
)

pytestmark = pytest.mark.slow

SHARE = "/mnt/lab-share"  # where every host of the site mounts the site's share (the launcher does not)

@pytest.fixture
def lab() -> Iterator[tuple[H.World, list[H.Host], Path]]:
    try:
        H.require()
    except H.HostsUnavailable as exc:
        pytest.fail(f"{exc} (run scripts/ensure_hosts.sh as root)")
    with H.World() as world:
        site = world.lan("lab")
        first = site.host("ws0")
        hosts = [first, *(site.host(f"ws{n}", account=first) for n in (1, 2))]  # one account on every machine
        with shared_folder(world) as share:  # the site's NFS server's export
            for host in hosts:
                host.mount_share(share, SHARE)
            yield world, hosts, share


def _user_side(tmp_path: Path, hosts: list[H.Host]) -> tuple[dict[str, str], Path]:
    """The launching user's key, known_hosts, inventory, task folder and environment."""
    home = Path(os.environ["HOME"])
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    key = ssh / f"id_lab_{tmp_path.name}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    lines = []
    for host in hosts:
        access = host.start_sshd(key.with_suffix(".pub").read_text())
        lines.append(access.known_hosts_line(host.private_address))
    known = ssh / f"known_hosts_{tmp_path.name}"
    known.write_text("".join(lines))
    machines = "\n".join(f"          - {{host: {h.private_address}, user: {h.user}, key: {key}}}" for h in hosts)
    work = user_folder(tmp_path, "infra: onprem/lab\n", "the lab's data\n")
    (work / "sites.yaml").write_text(textwrap.dedent(f"""
        sites:
          - site: lab
            continent: europe
            uplink_gbps: 1
            machines:
              - instance_type: ws
                count: {len(hosts)}
                vcpus: 2
                memory_gib: 8
                hosts:
        """) + machines + "\n")
    env = {**os.environ, "GEOTRAIN_ONPREM_INVENTORY": str(work / "sites.yaml")}
    env.pop("COLUMNS", None)
    # the provider checks host keys against ~/.ssh/known_hosts: this test's file is that one
    shutil.copyfile(known, ssh / "known_hosts")
    return env, work


def test_a_task_trains_on_machines_that_share_nothing_with_the_launcher_and_survives_losing_one(
        lab: tuple[H.World, list[H.Host], Path], tmp_path: Path) -> None:
    world, hosts, share = lab
    env, work = _user_side(tmp_path, hosts)
    for host in hosts:  # the hosts have no geotrain of their own
        assert host.run(["python3", "-c", "import geotrain"], cwd="/").returncode != 0
    lost: list[H.Host] = []

    def lose_a_machine(run_id: str, first: list[str]) -> None:
        from geotrain.providers.onprem import OnPremProvider

        address = OnPremProvider.from_environment().agent_of(first[1])["host"]
        lost.append(next(h for h in hosts if h.private_address == address))
        lost[0].kill_all()  # the machine is gone: its processes, its network

    launched = plan_and_launch(work, env, ["--onprem", "sites.yaml"],
                               ["--provider", "onprem", "--checkpoint-url", f"file://{SHARE}/checkpoints"],
                               event=lose_a_machine, checkpoints=share / "checkpoints")
    print(f"\nboot (ship + install + agent + setup) to first step: {launched.first_step_s:.1f} s; "
          f"machine lost to completion: {launched.after_event_s:.1f} s")
    check_resumed_and_done(launched, "the lab's data")  # the third machine stands in for the lost one
    for host in hosts:  # what the launch left on the hosts: a venv of this geotrain, nothing of the launcher's
        if host is lost[0]:
            continue
        listed = host.run("ls -d ~/.geotrain-node/venv-*", cwd="/")
        assert listed.stdout.split(), (host.name, listed.stderr)


def test_a_failed_setup_ends_the_run_at_once_with_exit_5_and_frees_the_machines(
        lab: tuple[H.World, list[H.Host], Path], tmp_path: Path) -> None:
    world, hosts, share = lab
    env, work = _user_side(tmp_path, hosts)
    done, took = launch_failing_setup(work, "infra: onprem/lab\n", env, ["--onprem", str(work / "sites.yaml")],
                                      ["--provider", "onprem", "--checkpoint-url", f"file://{SHARE}/checkpoints"])
    print(f"\nlaunch to exit 5 (ship, failed setup, release): {took:.1f} s")
    run_id = check_setup_failed(done)
    from geotrain.providers.onprem import OnPremProvider

    provider = OnPremProvider.from_environment()
    assert all(n.state.value != "running" for n in provider.list(run_id))  # every machine given back
