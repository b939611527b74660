#!/bin/sh
# Make sure OpenSSH's server and client are installed, for the on-prem provider's tests
# (tests/fakes/sshd.py starts a real sshd on 127.0.0.1; it never touches the system's sshd service).
#
# Exit 0 when /usr/sbin/sshd, ssh and ssh-keygen are there (installing openssh-server and
# openssh-client with apt-get if they were not); non-zero, with a message saying what to do, when
# they cannot be installed (no apt-get, not root, no package index reachable).
set -u

SSHD=/usr/sbin/sshd
missing() {
    [ -x "$SSHD" ] || return 0
    command -v ssh >/dev/null 2>&1 || return 0
    command -v ssh-keygen >/dev/null 2>&1 || return 0
    return 1
}

if ! missing; then
    echo "ensure_sshd: $SSHD and the ssh client are installed ($(ssh -V 2>&1)); nothing to do"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_sshd: $SSHD or ssh is missing and there is no apt-get here;" \
         "install OpenSSH's server and client with this system's package manager" \
         "(e.g. 'dnf install openssh-server openssh-clients', 'apk add openssh')" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "ensure_sshd: $SSHD or ssh is missing; installing it needs root:" \
             "run 'sudo apt-get install -y openssh-server openssh-client' (or run this script as root)" >&2
        exit 1
    fi
fi

echo "ensure_sshd: installing openssh-server and openssh-client with apt-get"
export DEBIAN_FRONTEND=noninteractive
# The package's maintainer scripts try to start the system service; inside a container without an
# init system they are refused (policy-rc.d), which is fine: the tests start their own sshd.
if ! $SUDO apt-get install -y --no-install-recommends openssh-server openssh-client; then
    echo "ensure_sshd: apt-get install failed; updating the package index and trying once more"
    if ! $SUDO apt-get update || \
       ! $SUDO apt-get install -y --no-install-recommends openssh-server openssh-client; then
        echo "ensure_sshd: could not install openssh-server with apt-get (see above);" \
             "install it by hand ('apt-get install openssh-server') and rerun" >&2
        exit 1
    fi
fi

if missing; then
    echo "ensure_sshd: apt-get finished but $SSHD or ssh is still missing;" \
         "check the openssh-server package ('dpkg -L openssh-server')" >&2
    exit 1
fi
echo "ensure_sshd: installed $SSHD ($(ssh -V 2>&1))"
exit 0
