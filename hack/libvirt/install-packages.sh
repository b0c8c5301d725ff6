#!/usr/bin/env bash
# Installs the Debian packages the libvirt test world needs (internal/testing/libvirtlab
# and hack/libvirt/build-guest-image.sh), only those that are missing, so a fresh CI
# machine gets them and a developer's machine is left alone when it has them.
#
# libvirt-daemon-system's postinst may start the machine's own libvirtd: harmless, the
# lab never talks to it (it runs a private daemon in its own namespaces).
set -euo pipefail

packages=(
  libvirt-daemon-system # libvirtd, virtlogd, virsh and the qemu driver
  libvirt-clients       # virsh
  qemu-system-x86       # the emulator (TCG: no hardware virtualisation needed)
  qemu-utils            # qemu-img
  openssh-server        # the lab's sshd (its own config; the system service is not used)
  openssh-client        # ssh-keygen
  dnsmasq-base          # DHCP on the lab's libvirt network
  iproute2              # ip: loopback up inside the lab's network namespace
  util-linux            # unshare, nsenter
  mmdebstrap            # the guest image's root tree, from the machine's apt sources
  e2fsprogs             # mkfs.ext4 -d: an image without loop mounts
  genisoimage           # isoinfo, for checking seeds by hand
  curl                  # requests through a guest's proxy from inside the namespace
  cloud-init            # `cloud-init schema`: internal/cloudinit checks its user-data against the guest's schema
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "hack/libvirt/install-packages.sh: missing Debian packages: ${missing[*]}; run this script as root (or install them)" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-o DPkg::Lock::Timeout=600)
# A candidate for every package, or the lists are missing or stale: update first.
need_update=false
for p in "${missing[@]}"; do
  if ! apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    need_update=true
    break
  fi
done
if $need_update; then
  apt-get "${apt_opts[@]}" update -qq
fi
apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# cloud-init is here only for its schema checker: it must never configure
# this machine at boot (with no datasource it would take a new instance's
# first boot and, among others, replace the SSH host keys).
if [[ " ${missing[*]} " == *" cloud-init "* ]]; then
  touch /etc/cloud/cloud-init.disabled
fi
