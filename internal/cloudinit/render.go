package cloudinit

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// ConfigPath is where tinyproxy reads its configuration on the systemd-based
// distributions the rendered user-data supports (Debian, Ubuntu, Fedora).
const ConfigPath = "/etc/tinyproxy/tinyproxy.conf"

// Proxy is what the rendered user-data configures.
type Proxy struct {
	// Port is the TCP port tinyproxy listens on.
	Port int32
	// Username and Password enable basic proxy authentication; both empty
	// means none.
	Username string
	Password string
	// AllowedSourceRanges limits the clients; empty allows any source.
	AllowedSourceRanges []netip.Prefix
	// ExtraUserData is the user's own user-data, appended as a second part.
	// It must start with "#cloud-config" or "#!".
	ExtraUserData string
	// Egress is the entry's destination policy: ConnectPort lines in
	// tinyproxy.conf, and nftables rules that refuse the denied
	// destinations to the tinyproxy user (see NftablesRules); with Engine,
	// the engine's flags, and the same rules for the engine's user.
	Egress egress.Policy
	// Engine, when set, makes the guest run the operator's own forward
	// proxy instead of tinyproxy (docs/guest-engine.md).
	Engine *Engine
}

// credentialRE is what a username or password may hold: characters that need
// no quoting in tinyproxy's configuration, in YAML or in a URL's userinfo.
var credentialRE = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,128}$`)

// boundary separates the MIME parts. It is fixed, so that the same Proxy
// always renders the same bytes, and checked to be absent from the parts.
const boundary = "==egress-proxies-operator-part=="

// cloudConfig is the subset of cloud-init's #cloud-config schema we write.
type cloudConfig struct {
	PackageUpdate bool        `json:"package_update,omitempty"`
	Packages      []string    `json:"packages,omitempty"`
	WriteFiles    []writeFile `json:"write_files"`
	RunCmd        [][]string  `json:"runcmd"`
}

type writeFile struct {
	Path        string `json:"path"`
	Owner       string `json:"owner"`
	Permissions string `json:"permissions"`
	// Defer writes the file in cloud-init's final stage, after packages are
	// installed, so that the tinyproxy group exists for Owner.
	Defer   bool   `json:"defer"`
	Content string `json:"content"`
}

// Render returns the user-data for p. The same p always yields the same
// bytes. Errors never quote the credentials.
func Render(p Proxy) ([]byte, error) {
	if p.Port < 1 || p.Port > 65535 {
		return nil, fmt.Errorf("port %d is out of range 1-65535", p.Port)
	}
	if (p.Username == "") != (p.Password == "") {
		return nil, errors.New("username and password must both be set or both be empty")
	}
	if p.Username != "" && (!credentialRE.MatchString(p.Username) || !credentialRE.MatchString(p.Password)) {
		return nil, errors.New("username and password may hold only letters, digits and . _ ~ - (at most 128 each)")
	}
	if p.Username == "" && len(p.AllowedSourceRanges) == 0 {
		return nil, errors.New("refusing to render an open proxy: without credentials, allowed source ranges are required")
	}
	var cc cloudConfig
	if p.Engine != nil {
		if err := p.Engine.check(); err != nil {
			return nil, err
		}
		cc = renderEngine(p)
	} else {
		var err error
		if cc, err = renderTinyproxy(p); err != nil {
			return nil, err
		}
	}
	body, err := yaml.Marshal(cc)
	if err != nil {
		return nil, fmt.Errorf("marshalling cloud-config: %w", err)
	}
	own := append([]byte("#cloud-config\n"), body...)
	if p.ExtraUserData == "" {
		return own, nil
	}
	return multipart(own, p.ExtraUserData)
}

// renderTinyproxy is Render's cloud-config for a guest that runs tinyproxy,
// installed from the distribution's mirror.
func renderTinyproxy(p Proxy) (cloudConfig, error) {
	connectPorts, err := connectPortLines(p.Egress.ConnectPorts)
	if err != nil {
		return cloudConfig{}, err
	}
	cc := cloudConfig{
		PackageUpdate: true,
		Packages:      []string{"tinyproxy", "nftables"},
		WriteFiles: []writeFile{
			{
				Path:        ConfigPath,
				Owner:       "root:tinyproxy",
				Permissions: "0640",
				Defer:       true,
				Content:     tinyproxyConf(p, connectPorts),
			},
			{Path: NftablesPath, Owner: "root:root", Permissions: "0644", Defer: true, Content: NftablesRules(p.Egress)},
			{Path: nftablesUnitPath, Owner: "root:root", Permissions: "0644", Defer: true, Content: nftablesUnit},
			{Path: tinyproxyDropInPath, Owner: "root:root", Permissions: "0644", Defer: true, Content: tinyproxyDropIn},
		},
		// The rules load before tinyproxy starts, and tinyproxy requires
		// them: if they fail to load, it does not run, and the proxy never
		// becomes Ready rather than running as a door into the network.
		RunCmd: [][]string{
			{"systemctl", "daemon-reload"},
			{"systemctl", "enable", "--now", nftablesUnitName},
			{"systemctl", "enable", "tinyproxy"},
			{"systemctl", "restart", "tinyproxy"},
		},
	}
	if p.ExtraUserData != "" {
		guard(&cc, p, connectPorts)
	}
	return cc, nil
}

// Where the guard of a Proxy with extra user-data lives (see guard).
const (
	// guardConfPath is the operator's copy of tinyproxy.conf, put in place
	// at every start of tinyproxy.
	guardConfPath   = "/etc/egress-proxy/tinyproxy.conf"
	guardUnitName   = "egress-proxy-guard.service"
	guardUnitPath   = "/etc/systemd/system/" + guardUnitName
	guardDropInPath = "/etc/systemd/system/tinyproxy.service.d/egress-proxy-guard.conf"
)

// guardUnitFor restarts the service (tinyproxy's or the engine's) once
// cloud-init's final stage, where the user's part runs, is over: the start
// is the service's, and so is the check of its guard drop-in. It is
// started without waiting by runcmd (which runs inside that stage) and at
// every boot.
func guardUnitFor(service string) string {
	return `[Unit]
Description=Egress proxy: the operator's configuration and egress rules, after the user's cloud-init part
After=cloud-final.service ` + nftablesUnitName + `

[Service]
Type=oneshot
ExecStart=/bin/systemctl restart ` + service + `

[Install]
WantedBy=multi-user.target
`
}

// guard adds to cc what keeps the operator's configuration in force on a
// guest whose user-data has a part of the Proxy author's, which runs as
// root after the operator's part and can rewrite tinyproxy.conf, the
// nftables rules or the units: before every start of tinyproxy, the
// operator's copy of tinyproxy.conf is put in place, both files are checked
// against the digests of what the operator rendered, baked into a drop-in,
// and the rules are loaded again (a flushed ruleset comes back). A file
// that differs keeps tinyproxy from starting, and the proxy never becomes
// Ready rather than serving without its policy. guardUnitFor restarts
// tinyproxy after the user's part. A root script can still undo all of
// this (docs/security.md: allowing extra user-data gives its author root).
func guard(cc *cloudConfig, p Proxy, connectPorts []int) {
	conf := tinyproxyConf(p, connectPorts)
	var dropIn strings.Builder
	dropIn.WriteString("# Written by egress-proxies-operator: tinyproxy starts only with the operator's configuration and egress rules.\n[Service]\n")
	// "+": with full privileges, whatever user the distribution's unit
	// runs tinyproxy as.
	fmt.Fprintf(&dropIn, "ExecStartPre=+/usr/bin/install -m 0640 -o root -g tinyproxy %s %s\n", guardConfPath, ConfigPath)
	for _, f := range []struct{ path, content string }{{ConfigPath, conf}, {NftablesPath, NftablesRules(p.Egress)}} {
		fmt.Fprintf(&dropIn, "ExecStartPre=+/bin/sh -c 'echo \"%s  %s\" | sha256sum --check --strict --quiet -'\n", sha256Hex(f.content), f.path)
	}
	fmt.Fprintf(&dropIn, "ExecStartPre=+/usr/sbin/nft -f %s\n", NftablesPath)
	cc.WriteFiles = append(cc.WriteFiles,
		writeFile{Path: guardConfPath, Owner: "root:tinyproxy", Permissions: "0640", Defer: true, Content: conf},
		writeFile{Path: guardDropInPath, Owner: "root:root", Permissions: "0644", Defer: true, Content: dropIn.String()},
		writeFile{Path: guardUnitPath, Owner: "root:root", Permissions: "0644", Defer: true, Content: guardUnitFor("tinyproxy.service")},
	)
	// The daemon-reload that opens runcmd has read the units. --no-block:
	// the unit waits for the stage this runs in to end.
	cc.RunCmd = append(cc.RunCmd,
		[]string{"systemctl", "enable", guardUnitName},
		[]string{"systemctl", "start", "--no-block", guardUnitName},
	)
}

// TinyproxyConf returns tinyproxy's configuration file for p; p must be
// valid for Render.
func TinyproxyConf(p Proxy) string {
	ports, _ := connectPortLines(p.Egress.ConnectPorts)
	return tinyproxyConf(p, ports)
}

func tinyproxyConf(p Proxy, connectPorts []int) string {
	var b strings.Builder
	b.WriteString("# Written by egress-proxies-operator through cloud-init; changes are lost when the proxy is replaced.\n")
	b.WriteString("User tinyproxy\nGroup tinyproxy\n")
	fmt.Fprintf(&b, "Port %d\n", p.Port)
	b.WriteString("Timeout 600\nMaxClients 256\nLogLevel Notice\nSyslog On\n")
	// Crawled sites must not learn the proxy's clients through Via.
	b.WriteString("DisableViaHeader Yes\n")
	if p.Username != "" {
		fmt.Fprintf(&b, "BasicAuth %s %s\n", p.Username, p.Password)
	}
	// tinyproxy allows every source when no Allow line is present.
	for _, r := range p.AllowedSourceRanges {
		fmt.Fprintf(&b, "Allow %s\n", r.Masked())
	}
	// tinyproxy allows CONNECT to every port when no ConnectPort line is
	// present; connectPortLines returns none only for 1-65535.
	for _, port := range connectPorts {
		fmt.Fprintf(&b, "ConnectPort %d\n", port)
	}
	return b.String()
}

// multipart wraps our cloud-config and the user's part in a MIME multipart
// message, which cloud-init processes part by part.
func multipart(own []byte, extra string) ([]byte, error) {
	var ctype string
	switch {
	case strings.HasPrefix(extra, "#cloud-config"):
		ctype = "text/cloud-config"
	case strings.HasPrefix(extra, "#!"):
		ctype = "text/x-shellscript"
	default:
		return nil, errors.New(`extra user-data must start with "#cloud-config" or "#!"`)
	}
	if bytes.Contains(own, []byte(boundary)) || strings.Contains(extra, boundary) {
		return nil, errors.New("extra user-data contains the MIME boundary the operator uses")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=\"%s\"\nMIME-Version: 1.0\n\n", boundary)
	fmt.Fprintf(&b, "--%s\nContent-Type: text/cloud-config; charset=\"utf-8\"\n", boundary)
	b.WriteString("Content-Disposition: attachment; filename=\"egress-proxy.cfg\"\n\n")
	b.Write(own)
	fmt.Fprintf(&b, "\n--%s\nContent-Type: %s; charset=\"utf-8\"\n", boundary, ctype)
	if ctype == "text/cloud-config" {
		// Without this, the user's keys would replace ours (packages,
		// write_files, runcmd) instead of adding to them.
		b.WriteString("Merge-Type: list(append)+dict(no_replace,recurse_list)+str()\n")
	}
	b.WriteString("Content-Disposition: attachment; filename=\"user-extra\"\n\n")
	b.WriteString(extra)
	if !strings.HasSuffix(extra, "\n") {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "--%s--\n", boundary)
	return b.Bytes(), nil
}
