#!/bin/sh
# Make sure this machine can build the tests' faithful remote hosts (tests/fakes/hosts.py: network,
# mount, PID and UTS namespaces, nftables NAT and filter rules, a user per host, a Python 3.11 image).
#
# Exit 0 when nft, ip, nsenter, unshare, setpriv, useradd/usermod/userdel, sysctl, mount and
# python3.11 with its venv module are there (installing nftables, iproute2, util-linux, passwd, procps,
# mount and python3.11-venv with apt-get where one is missing); non-zero, with a message saying what to
# do, when they cannot be installed (no apt-get, not root, no package index reachable). It changes no
# network setting: the tests make (and remove) their own namespaces and nft tables.
set -u

PY=/usr/bin/python3.11
missing_packages() {
    out=""
    command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || out="$out nftables"
    command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /bin/ip ] || out="$out iproute2"
    for tool in nsenter unshare setpriv; do
        if ! command -v "$tool" >/dev/null 2>&1; then out="$out util-linux"; break; fi
    done
    for tool in useradd usermod userdel; do
        if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then out="$out passwd"; break; fi
    done
    command -v sysctl >/dev/null 2>&1 || [ -x /sbin/sysctl ] || [ -x /usr/sbin/sysctl ] || out="$out procps"
    command -v mount >/dev/null 2>&1 || out="$out mount"
    if [ ! -x "$PY" ]; then
        out="$out python3.11 python3.11-venv"
    elif ! "$PY" -c "import ensurepip, venv" >/dev/null 2>&1; then
        out="$out python3.11-venv"
    fi
    echo "$out"
}

PATH="$PATH:/usr/sbin:/sbin"
export PATH
need=$(missing_packages)
if [ -z "$need" ]; then
    echo "ensure_hosts: nft ($(nft --version 2>&1)), ip, nsenter, unshare, setpriv, useradd and $PY are installed; nothing to do"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_hosts: missing:$need; there is no apt-get here: install nftables, iproute2," \
         "util-linux (nsenter, unshare, setpriv), shadow's useradd, procps and Python 3.11 with venv" \
         "with this system's package manager" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "ensure_hosts: missing:$need; installing needs root:" \
             "run 'sudo apt-get install -y$need' (or run this script as root)." \
             "The test hosts themselves need root too (CI runs as root)" >&2
        exit 1
    fi
fi

echo "ensure_hosts: installing$need with apt-get"
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086  # $need is a list of package names
if ! $SUDO apt-get install -y --no-install-recommends $need; then
    echo "ensure_hosts: apt-get install failed; updating the package index and trying once more"
    if ! $SUDO apt-get update || ! $SUDO apt-get install -y --no-install-recommends $need; then
        echo "ensure_hosts: could not install$need with apt-get (see above);" \
             "install them by hand ('apt-get install$need') and rerun" >&2
        exit 1
    fi
fi

need=$(missing_packages)
if [ -n "$need" ]; then
    echo "ensure_hosts: apt-get finished but$need still seems missing;" \
         "check the packages ('dpkg -L nftables util-linux')" >&2
    exit 1
fi
echo "ensure_hosts: installed what was missing ($(nft --version 2>&1))"
exit 0
