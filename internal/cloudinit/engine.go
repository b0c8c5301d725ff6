package cloudinit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// Engine says that the guest runs the operator's own forward proxy, the
// guest binary of cmd/egress-proxy (docs/guest-engine.md), instead of
// tinyproxy. The binary comes from the payload image that the provider
// attaches beside the seed (label EPENGINE, internal/nocloud), and runs only
// while it is the binary of a digest the user-data carries: the guest needs
// no package mirror, and storage that someone else can write to cannot give
// it another program.
type Engine struct {
	// Digests are the SHA-256 digests (64 hex digits) of the binaries, by
	// architecture (amd64, arm64): the guest installs the one of its own.
	Digests map[string]string
	// PayloadLabel is the label of the payload image (nocloud.PayloadLabel).
	PayloadLabel string
}

// Where the engine lives in the guest.
const (
	// EngineUser is the system user the engine runs as: its own, so that
	// the nftables rules of the policy apply to it alone.
	EngineUser = "egress-proxy"
	// EngineBinaryPath is where the verified binary is installed.
	EngineBinaryPath = "/usr/local/bin/egress-proxy"
	// EngineAdminListen is the engine's admin address in a guest (/healthz,
	// /metrics): loopback only, since a VM's ports face its network and the
	// metrics are for whoever runs the VM, not for the proxy's clients.
	EngineAdminListen = "127.0.0.1:9090"

	engineUnitName       = "egress-proxy.service"
	engineUnitPath       = "/etc/systemd/system/" + engineUnitName
	engineInstallPath    = "/usr/local/lib/egress-proxy/install"
	engineCredentialsDir = "/etc/egress-proxy/credentials" //nolint:gosec // G101: a directory's path, not a credential
	engineGuardDropIn    = "/etc/systemd/system/" + engineUnitName + ".d/egress-proxy-guard.conf"
	engineGuardUnitName  = "egress-proxy-engine-guard.service"
	engineGuardUnitPath  = "/etc/systemd/system/" + engineGuardUnitName
)

// guestArches maps the Go (and Debian) architecture names the engine is
// built for to what `uname -m` says in such a guest.
var guestArches = map[string]string{"amd64": "x86_64", "arm64": "aarch64"}

// check refuses an Engine that no guest could install.
func (e Engine) check() error {
	if len(e.Digests) == 0 {
		return errors.New("guest engine: no binary digest; the user-data could verify nothing")
	}
	if e.PayloadLabel == "" {
		return errors.New("guest engine: the payload image's label is empty")
	}
	for arch, d := range e.Digests {
		if _, ok := guestArches[arch]; !ok {
			return fmt.Errorf("guest engine: architecture %q is not one the engine is built for (amd64, arm64)", arch)
		}
		if b, err := hex.DecodeString(d); err != nil || len(b) != 32 {
			return fmt.Errorf("guest engine: the %s digest is not a SHA-256 (64 hex digits)", arch)
		}
	}
	return nil
}

// engineInstall is the script that puts the verified binary in place: it
// does nothing when the installed binary already has the digest of the
// guest's architecture, else it copies it from the payload image and
// checks it before moving it in. The engine's unit runs it before every
// start, so a binary changed on disk stops the engine rather than runs.
func engineInstall(e Engine) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# Written by egress-proxies-operator: installs the guest engine from its payload image, checked against the digests of the user-data.\nset -eu\n")
	b.WriteString("case \"$(uname -m)\" in\n")
	for _, arch := range slices.Sorted(maps.Keys(e.Digests)) {
		fmt.Fprintf(&b, "%s) arch=%s want=%s ;;\n", guestArches[arch], arch, e.Digests[arch])
	}
	b.WriteString("*) echo \"egress-proxy: no engine binary for $(uname -m)\" >&2; exit 1 ;;\nesac\n")
	fmt.Fprintf(&b, "bin=%s\n", EngineBinaryPath)
	b.WriteString("if echo \"$want  $bin\" | sha256sum --check --strict --status - 2>/dev/null; then exit 0; fi\n")
	fmt.Fprintf(&b, "dev=/dev/disk/by-label/%s\n", e.PayloadLabel)
	b.WriteString("udevadm settle || true\n")
	b.WriteString("if [ ! -e \"$dev\" ]; then echo \"egress-proxy: the payload image ($dev) is not attached and $bin is not the verified engine\" >&2; exit 1; fi\n")
	b.WriteString("mnt=$(mktemp -d)\ntrap 'rmdir \"$mnt\"' EXIT\nmount -o ro \"$dev\" \"$mnt\"\ntrap 'umount \"$mnt\"; rmdir \"$mnt\"' EXIT\n")
	b.WriteString("install -m 0755 -o root -g root \"$mnt/egress-proxy-linux-$arch\" \"$bin.new\"\n")
	b.WriteString("if ! echo \"$want  $bin.new\" | sha256sum --check --strict --quiet -; then rm -f \"$bin.new\"; echo \"egress-proxy: the payload's binary does not have the digest of the user-data\" >&2; exit 1; fi\n")
	b.WriteString("mv \"$bin.new\" \"$bin\"\n")
	return b.String()
}

// engineArgs are the engine's flags for p: the same as a pod's proxy
// (the operator's kubernetes provider), with the admin port on loopback.
func engineArgs(p Proxy) []string {
	args := []string{fmt.Sprintf("--listen=:%d", p.Port), "--admin-listen=" + EngineAdminListen}
	if len(p.AllowedSourceRanges) > 0 {
		args = append(args, "--allowed-source-ranges="+egress.FormatPrefixes(p.AllowedSourceRanges))
	}
	return append(args, p.Egress.Args()...)
}

// engineUnit is the engine's systemd unit: its own user, the credentials
// through LoadCredential= (never on the command line or in the
// environment), the rules of its user loaded first, and the sandbox
// systemd gives a network daemon.
func engineUnit(p Proxy) string {
	var b strings.Builder
	b.WriteString("# Written by egress-proxies-operator through cloud-init.\n[Unit]\nDescription=Egress proxy (the operator's forward proxy)\n")
	fmt.Fprintf(&b, "Wants=network-online.target\nAfter=network-online.target %s\nRequires=%s\n\n", nftablesUnitName, nftablesUnitName)
	b.WriteString("[Service]\n")
	fmt.Fprintf(&b, "ExecStartPre=+%s\n", engineInstallPath)
	fmt.Fprintf(&b, "ExecStart=%s %s\n", EngineBinaryPath, strings.Join(engineArgs(p), " "))
	fmt.Fprintf(&b, "User=%s\nGroup=%s\n", EngineUser, EngineUser)
	if p.Username != "" {
		fmt.Fprintf(&b, "LoadCredential=username:%s/username\nLoadCredential=password:%s/password\n", engineCredentialsDir, engineCredentialsDir)
	}
	b.WriteString("Restart=always\nRestartSec=2s\nLimitNOFILE=65536\n")
	b.WriteString("NoNewPrivileges=yes\nProtectSystem=strict\nProtectHome=yes\nPrivateTmp=yes\nPrivateDevices=yes\n")
	b.WriteString("ProtectKernelTunables=yes\nProtectKernelModules=yes\nProtectControlGroups=yes\nRestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK\n")
	if p.Port < 1024 {
		b.WriteString("AmbientCapabilities=CAP_NET_BIND_SERVICE\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE\n")
	} else {
		b.WriteString("CapabilityBoundingSet=\n")
	}
	b.WriteString("\n[Install]\nWantedBy=multi-user.target\n")
	return b.String()
}

// engineNftablesUnit loads the rules of the engine's user before the
// engine starts. They are defence in depth (the engine enforces the policy
// in its dialer), and a guest without nft, which the engine's user-data
// does not install, runs without them.
var engineNftablesUnit = nftablesUnitFor(EngineUser, engineUnitName, "ConditionPathExists=/usr/sbin/nft\n")

// renderEngine is Render's cloud-config for a guest that runs the engine:
// no package from a mirror, the engine's user, files and units, and, with
// extra user-data, the guard.
func renderEngine(p Proxy) cloudConfig {
	files := []writeFile{
		{Path: engineInstallPath, Owner: "root:root", Permissions: "0755", Content: engineInstall(*p.Engine)},
		{Path: engineUnitPath, Owner: "root:root", Permissions: "0644", Content: engineUnit(p)},
		{Path: NftablesPath, Owner: "root:root", Permissions: "0644", Content: nftablesRules(p.Egress, EngineUser)},
		{Path: nftablesUnitPath, Owner: "root:root", Permissions: "0644", Content: engineNftablesUnit},
	}
	if p.Username != "" {
		files = append(files,
			writeFile{Path: engineCredentialsDir + "/username", Owner: "root:root", Permissions: "0600", Content: p.Username},
			writeFile{Path: engineCredentialsDir + "/password", Owner: "root:root", Permissions: "0600", Content: p.Password})
	}
	cc := cloudConfig{
		WriteFiles: files,
		RunCmd: [][]string{
			{"sh", "-c", "id -u " + EngineUser + " >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin " + EngineUser},
			{"systemctl", "daemon-reload"},
			{"systemctl", "enable", "--now", nftablesUnitName},
			{"systemctl", "enable", engineUnitName},
			{"systemctl", "restart", engineUnitName},
		},
	}
	if p.ExtraUserData != "" {
		engineGuard(&cc)
	}
	return cc
}

// engineGuard is guard for the engine: before every start of the engine,
// the files that make its policy and credentials are checked against the
// digests of what the operator rendered and the rules loaded again, and
// the engine is restarted once the user's part has run, so that a part
// that rewrites them, flushes the ruleset or stops the engine leaves it
// stopped or undone, never serving without its policy.
func engineGuard(cc *cloudConfig) {
	var dropIn strings.Builder
	dropIn.WriteString("# Written by egress-proxies-operator: the engine starts only with the operator's files and egress rules.\n[Service]\n")
	for _, f := range cc.WriteFiles {
		fmt.Fprintf(&dropIn, "ExecStartPre=+/bin/sh -c 'echo \"%s  %s\" | sha256sum --check --strict --quiet -'\n", sha256Hex(f.Content), f.Path)
	}
	dropIn.WriteString("ExecStartPre=+/bin/sh -c 'if [ -x /usr/sbin/nft ]; then /usr/sbin/nft -f " + NftablesPath + "; fi'\n")
	cc.WriteFiles = append(cc.WriteFiles,
		writeFile{Path: engineGuardDropIn, Owner: "root:root", Permissions: "0644", Content: dropIn.String()},
		writeFile{Path: engineGuardUnitPath, Owner: "root:root", Permissions: "0644", Content: guardUnitFor(engineUnitName)},
	)
	cc.RunCmd = append(cc.RunCmd,
		[]string{"systemctl", "enable", engineGuardUnitName},
		[]string{"systemctl", "start", "--no-block", engineGuardUnitName},
	)
}

// sha256Hex is the SHA-256 of s in hex, as sha256sum prints it.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
