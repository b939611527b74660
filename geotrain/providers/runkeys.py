"""The SSH keys of a run on cloud VMs: the launcher's login key, and each node's host key.

A cloud VM is reached only over SSH (``geotrain.providers.sshlink``), with keys the launcher makes
itself and hands to the VM through the cloud's own channel (its startup script: EC2 user data, GCP
``startup-script`` metadata, Azure custom data), which only the account can read:

- the **login key** (one per run): its public half goes into the node user's ``authorized_keys``;
  its private half never leaves ``GEOTRAIN_HOME/providers/keys/<run>/`` (0600);
- a **host key per node** (per launch request): the VM's sshd proves itself with it, and the launcher
  checks it under the node's own name (``HostKeyAlias``) in the run's ``known_hosts``, so no host key
  is ever trusted on first use, and one node cannot pass for another.

Made with OpenSSH's ``ssh-keygen`` (ed25519), each written once (to a temporary name, then renamed),
the same for every process of the user: a resumed launcher, ``geotrain ssh`` and ``geotrain cleanup``
find them.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from geotrain.errors import ProviderError
from geotrain.files import PRIVATE_DIR, geotrain_home


@dataclass(frozen=True, slots=True)
class HostKey:
    alias: str  # the node's name in known_hosts
    private: str  # OpenSSH private key text, for the VM's startup script
    public: str  # "ssh-ed25519 AAAA..."


def _safe(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:20]


def keys_dir(run_id: str) -> Path:
    path = geotrain_home() / "providers" / "keys" / _safe(run_id)
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    return path


def _keypair(path: Path, comment: str) -> tuple[str, str]:
    """(private text, public line) of the ed25519 key at ``path``, made there if missing."""
    if not path.exists():
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            made = Path(tmp) / "key"
            try:
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(made)],
                               check=True, capture_output=True, timeout=30)
            except FileNotFoundError as exc:
                raise ProviderError("ssh-keygen is not installed; install OpenSSH's client "
                                    "(apt-get install openssh-client), which geotrain uses to reach cloud nodes") from exc
            except subprocess.CalledProcessError as exc:
                raise ProviderError(f"ssh-keygen failed: {exc.stderr.decode(errors='replace').strip()}") from exc
            try:
                os.link(made, path)  # the first of concurrent makers wins; the others read its key
            except FileExistsError:
                pass
    return path.read_text(), _public_of(path).strip()


def _public_of(path: Path) -> str:
    done = subprocess.run(["ssh-keygen", "-y", "-f", str(path)], capture_output=True, text=True, check=True,
                          timeout=30)
    return done.stdout.strip() + "\n"


def login_key(run_id: str) -> tuple[Path, str]:
    """The run's login key: (path of its private half, its public line)."""
    path = keys_dir(run_id) / "login"
    _, public = _keypair(path, f"geotrain run {run_id}")
    return path, " ".join(public.split()[:2]) + f" geotrain-run"


def host_key(run_id: str, request_id: str) -> HostKey:
    """The host key of the node that ``request_id`` launches (made once), recorded in the run's
    ``known_hosts`` under its alias."""
    alias = f"geotrain-{_safe(request_id)}"
    private, public = _keypair(keys_dir(run_id) / f"host-{_safe(request_id)}", alias)
    known = known_hosts(run_id)
    key = " ".join(public.split()[:2])
    line = f"{alias} {key}\n"
    if line not in (known.read_text() if known.exists() else ""):
        with open(known, "a") as handle:
            handle.write(line)
    return HostKey(alias, private, key)


def known_hosts(run_id: str) -> Path:
    path = keys_dir(run_id) / "known_hosts"
    if not path.exists():
        path.touch(mode=0o600)
    return path
