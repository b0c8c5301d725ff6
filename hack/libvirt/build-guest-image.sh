#!/usr/bin/env bash
# Builds (once, cached) the real guest image the libvirt test world boots:
# Debian 12 minbase with systemd, cloud-init, tinyproxy, nftables, qemu-guest-agent and
# the cloud kernel, as a qcow2 made without loop mounts, plus the kernel and
# initrd beside it for direct kernel boot. Prints the image's directory.
#
# Packages come from the machine's own apt sources (the files under /etc/apt
# that name the Debian archive); no mirror host is written here.
#
# The cache key is the hash of this script: every input of the recipe is in
# it, so editing the recipe builds a new image and nothing else does.
#
# Output directory (${XDG_CACHE_HOME:-~/.cache}/egress-proxies-operator/guest-image/<hash>):
#   disk.qcow2   the root file system (ext4 on the whole disk, no partition table)
#   vmlinuz      the kernel, initrd.img its initramfs
#   cmdline      the kernel command line the image expects
#   packages.txt the installed packages and versions, for the record
set -euo pipefail

script=$(readlink -f "$0")
recipe_hash=$(sha256sum "$script" | cut -c1-16)
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies-operator/guest-image"
out="$cache_root/$recipe_hash"

if [ -f "$out/done" ]; then
  echo "$out"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9 # another build of the same or another recipe: wait for it
if [ -f "$out/done" ]; then
  echo "$out"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "build-guest-image.sh: needs root (mmdebstrap in root mode keeps file ownership for mkfs.ext4 -d)" >&2
  exit 1
fi
for tool in mmdebstrap mkfs.ext4 qemu-img; do
  command -v "$tool" >/dev/null || {
    echo "build-guest-image.sh: $tool is missing; run hack/libvirt/install-packages.sh" >&2
    exit 1
  }
done

# The machine's Debian sources: active .list/.sources files that name the
# Debian archive (third-party repositories are left out: their keys are not in
# the guest, and the guest needs nothing from them).
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  if grep -Eq '^[^#]*(debian-archive-keyring|/debian(-security)?/?([[:space:]]|$))' "$f"; then
    sources+=("$f")
  fi
done
if [ "${#sources[@]}" -eq 0 ]; then
  echo "build-guest-image.sh: no Debian apt source found under /etc/apt" >&2
  exit 1
fi

work=$(mktemp -d "$cache_root/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/root"

packages=(
  systemd-sysv udev dbus # init, device events (the guest agent's port), hostnamectl
  linux-image-cloud-amd64 # virtio drivers, booted directly by libvirt
  cloud-init netbase iproute2
  tinyproxy
  nftables # the rendered user-data's egress rules for the tinyproxy user
  qemu-guest-agent
)

# Networking is part of the image, not of the seed: systemd-networkd asks for
# DHCP on every en* interface (the NIC's name depends on its PCI slot), with
# the MAC as the client id so that libvirt's lease file names the guest by
# its MAC, and cloud-init's own network rendering is switched off (the seeds
# the operator writes carry no network-config).
# At power-off the guest gives its lease back, so that a deleted proxy
# leaves no lease in the network's lease list: systemd-networkd 252 sends no
# DHCPRELEASE when it stops, whatever KeepConfiguration= and SendRelease=
# say (observed: "DHCP lease lost", no packet on the bridge), so a unit
# ordered after networkd (hence stopped before it) sends one per lease
# networkd holds, from the leased address to the server that granted it,
# with the lease's client id. dnsmasq's lease helper then drops the lease.
read -r -d '' customize <<'HOOK' || true
set -eu
root="$1"
cat >"$root/etc/systemd/network/80-dhcp.network" <<'UNIT'
[Match]
Name=en*

[Network]
DHCP=ipv4
LinkLocalAddressing=no

[DHCPv4]
ClientIdentifier=mac
UNIT
cat >"$root/usr/local/sbin/egress-dhcp-release" <<'PY'
#!/usr/bin/python3
# Sends a DHCPRELEASE (RFC 2131 4.4.6) for each lease systemd-networkd holds.
import os, socket, struct

LEASES = "/run/systemd/netif/leases"
for index in sorted(os.listdir(LEASES)) if os.path.isdir(LEASES) else []:
    lease = {}
    with open(os.path.join(LEASES, index)) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                key, value = line.rstrip("\n").split("=", 1)
                lease[key] = value
    addr, server = lease.get("ADDRESS"), lease.get("SERVER_ADDRESS")
    if not addr or not server:
        continue
    try:
        name = socket.if_indextoname(int(index))
        with open("/sys/class/net/%s/address" % name) as f:
            mac = bytes.fromhex(f.read().strip().replace(":", ""))
        header = struct.pack("!BBBBIHH4s4s4s4s16s64s128s", 1, 1, 6, 0,
                             int.from_bytes(os.urandom(4), "big"), 0, 0,
                             socket.inet_aton(addr), bytes(4), bytes(4), bytes(4),
                             mac.ljust(16, b"\0"), b"", b"")
        options = bytes([99, 130, 83, 99, 53, 1, 7, 54, 4]) + socket.inet_aton(server)
        if lease.get("CLIENTID"):
            client_id = bytes.fromhex(lease["CLIENTID"])
            options += bytes([61, len(client_id)]) + client_id
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, 68))
            s.sendto(header + options + bytes([255]), (server, 67))
        print("released", addr, "on", name, "to", server)
    except (OSError, ValueError) as e:
        print("not released:", addr, e)
PY
chmod 0755 "$root/usr/local/sbin/egress-dhcp-release"
cat >"$root/etc/systemd/system/egress-dhcp-release.service" <<'UNIT'
[Unit]
Description=Give the DHCP leases back at power-off
After=systemd-networkd.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
ExecStop=/usr/local/sbin/egress-dhcp-release

[Install]
WantedBy=multi-user.target
UNIT
chroot "$root" systemctl enable egress-dhcp-release.service
# A test can make the guest hold its CD-ROM tray locked from early boot on
# (kernel command line egress_test.hold_tray): the drive is opened and never
# closed, and Linux locks the tray of a CD-ROM while it is open
# (/proc/sys/dev/cdrom/lock, 1 by default). A locked tray alone is not
# enough: QEMU answers a non-forced eject by asking the guest, and udev's
# 60-cdrom_id.rules honours the request (cdrom_id --eject-media unlocks
# and opens the tray), so a run without libvirt's force flag passed too.
# The unit therefore first masks that rule (an empty file of the same name
# in /run/udev/rules.d wins over /usr/lib's) and reloads udev: the guest
# ignores eject requests, as a desktop or a busy reader does, and only a
# forced eject empties the drive. The operator's eject of the seed must
# still empty it (issue #21 item 7). Without the word on the command line
# the unit does not start.
cat >"$root/etc/systemd/system/egress-hold-tray.service" <<'UNIT'
[Unit]
Description=Hold the CD-ROM tray locked (tests only)
ConditionKernelCommandLine=egress_test.hold_tray
DefaultDependencies=no
Requires=dev-sr0.device
After=dev-sr0.device
Before=cloud-init-local.service shutdown.target
Conflicts=shutdown.target

[Service]
Type=simple
ExecStartPre=/bin/sh -c 'mkdir -p /run/udev/rules.d && : >/run/udev/rules.d/60-cdrom_id.rules && udevadm control --reload'
ExecStart=/bin/sh -c 'exec 3</dev/sr0 && echo "egress-test: holding the tray of /dev/sr0 locked, eject requests ignored" >/dev/console && exec sleep infinity'

[Install]
WantedBy=sysinit.target
UNIT
chroot "$root" systemctl enable egress-hold-tray.service
# NoCloud only (no probing of cloud metadata services); C.UTF-8 because
# minbase has no locales package to generate en_US.UTF-8; no SSH host keys
# because the image has no sshd (an empty ssh_keys, since cloud-init 22.4's
# schema refuses an empty ssh_genkeytypes list).
cat >"$root/etc/cloud/cloud.cfg.d/90-egress-lab.cfg" <<'CFG'
datasource_list: [ NoCloud, None ]
network:
  config: disabled
locale: C.UTF-8
ssh_keys: {}
CFG
# tinyproxy serves only once cloud-init has written its configuration (the
# rendered user-data enables and restarts it), never with the package's.
chroot "$root" systemctl disable tinyproxy.service
echo '/dev/vda / ext4 rw,errors=remount-ro 0 1' >"$root/etc/fstab"
chroot "$root" systemctl enable systemd-networkd.service
# The lab has no mirror: apt's retries of an unreachable one only cost the
# guest's CPU (the rendered user-data runs apt-get update), and so would
# apt's daily timers during boot.
echo 'Acquire::Retries "0";' >"$root/etc/apt/apt.conf.d/90egress-lab-no-retries"
chroot "$root" systemctl disable apt-daily.timer apt-daily-upgrade.timer
# One machine-id per guest, made at first boot (DHCP, journald).
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
echo guest >"$root/etc/hostname"
HOOK

echo "building the guest image (about 3 minutes) into $out" >&2
mmdebstrap --variant=minbase --mode=root --format=directory \
  --include="$(IFS=,; echo "${packages[*]}")" \
  --customize-hook="$customize" \
  --skip=cleanup/apt/lists \
  bookworm "$root" "${sources[@]}" >&2

mkdir -p "$work/out"
cp "$(ls "$root"/boot/vmlinuz-* | sort -V | tail -n1)" "$work/out/vmlinuz"
cp "$(ls "$root"/boot/initrd.img-* | sort -V | tail -n1)" "$work/out/initrd.img"
chmod 0644 "$work/out/vmlinuz" "$work/out/initrd.img"
echo "root=/dev/vda rw console=ttyS0" >"$work/out/cmdline"
chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' >"$work/out/packages.txt"

# 2 GiB of which about 600 MB are used; the qcow2 stores only what is used.
mkfs.ext4 -q -L guestroot -d "$root" "$work/root.ext4" 2G >&2
qemu-img convert -q -O qcow2 "$work/root.ext4" "$work/out/disk.qcow2" >&2
rm -rf "$root" "$work/root.ext4"
touch "$work/out/done"
rm -rf "$out"
mv "$work/out" "$out"
echo "$out"
