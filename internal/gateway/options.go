package gateway

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// Username options: a client asks for a session and restricts the members
// with dash-separated options after its username, the form hosted proxy
// services use:
//
//	<user>-session-<id>[-sesstime-<minutes>][-zone-<zone>][-provider-<entry>][-ban-<host>]
//
// ban, a ban report (bans.go), comes last: its value is the rest of the
// username, dashes and all, so that any host name reads back whole.
const (
	optSession  = "session"
	optSesstime = "sesstime"
	optZone     = "zone"
	optProvider = "provider"
	optBan      = "ban"
)

// SessionHeader carries a session id on a plain request or a CONNECT, in
// place of the username option; the gateway removes it before forwarding.
const SessionHeader = "X-Gateway-Session"

// Bounds of the options.
const (
	// MaxSessionID is the longest session id.
	MaxSessionID = published.MaxSessionID
	// MaxSessionMinutes is the longest sesstime (a day).
	MaxSessionMinutes = 1440
	// maxUsername bounds the whole username, options included.
	maxUsername = 256
)

// route is what a client's username asks of one request or tunnel.
type route struct {
	session  string        // "" without a session
	ttl      time.Duration // 0: the session lasts while its member serves
	zone     string        // "" for any
	provider string        // "" for any
	ban      string        // the host of a ban report, "" for none
	// client is the client's TCP source address
	// (forwardproxy.ClientAddr): what its ban reports are scoped to.
	client netip.Addr
}

// clientKey is rt's client in the ban tables: a fixed-size hash of its
// address (0 for none), so that no table keeps a client's bytes.
func (rt *route) clientKey() uint64 {
	if rt == nil || !rt.client.IsValid() {
		return 0
	}
	b := rt.client.As16()
	return hash64(string(b[:]))
}

// badOption is the 400 for a username option the gateway cannot honour.
func badOption(format string, args ...any) error {
	return &forwardproxy.RefusedError{Code: http.StatusBadRequest, Message: "gateway username options: " + fmt.Sprintf(format, args...)}
}

// parseOptions reads the options after the username (rest begins with "-"
// or is empty).
func parseOptions(rest string) (*route, error) {
	rt := &route{}
	if rest == "" {
		return rt, nil
	}
	if len(rest) > maxUsername {
		return nil, badOption("the username is longer than %d characters", maxUsername)
	}
	// Values of zone and provider may hold dashes (rack-a): a value runs
	// to the next option name.
	tokens := strings.Split(rest[1:], "-")
	seen := map[string]bool{}
	for i := 0; i < len(tokens); {
		key := tokens[i]
		if !isOption(key) {
			return nil, badOption("unknown option %s; options are %s", printable(key), optionList)
		}
		if seen[key] {
			return nil, badOption("option %s is given twice", printable(key))
		}
		seen[key] = true
		if key == optBan {
			host, err := parseBanHost(strings.Join(tokens[i+1:], "-"))
			if err != nil {
				return nil, err
			}
			rt.ban = host
			break
		}
		j := i + 1
		for j < len(tokens) && (key == optZone || key == optProvider) && !isOption(tokens[j]) {
			j++
		}
		if j == i+1 && j < len(tokens) {
			j++ // a one-token value
		}
		value := strings.Join(tokens[i+1:j], "-")
		i = j
		if value == "" {
			return nil, badOption("option %s has no value", printable(key))
		}
		switch key {
		case optSession:
			if err := checkSessionID(value); err != nil {
				return nil, err
			}
			rt.session = value
		case optSesstime:
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 || n > MaxSessionMinutes {
				return nil, badOption("sesstime is a number of minutes from 1 to %d", MaxSessionMinutes)
			}
			rt.ttl = time.Duration(n) * time.Minute
		case optZone, optProvider:
			if !isToken(value) {
				return nil, badOption("%s must be a name of letters, digits and dashes", key)
			}
			if key == optZone {
				rt.zone = value
			} else {
				rt.provider = value
			}
		}
	}
	if rt.ttl != 0 && rt.session == "" {
		return nil, badOption("sesstime needs a session")
	}
	return rt, nil
}

const optionList = "session, sesstime, zone, provider and ban (last)"

func isOption(s string) bool {
	return s == optSession || s == optSesstime || s == optZone || s == optProvider || s == optBan
}

// checkSessionID bounds a session id: letters, digits and underscores, at
// most MaxSessionID of them.
func checkSessionID(id string) error {
	if !published.ValidSessionID(id) {
		return badOption("a session id is 1 to %d letters, digits or underscores", MaxSessionID)
	}
	return nil
}

// withSessionHeader is rt with the session of the session header's values
// (one at most, bounded as the username option). A session in the username
// wins over the header's.
func (rt *route) withSessionHeader(values []string) (*route, error) {
	if len(values) > 1 {
		return nil, badOption("one %s header at most", SessionHeader)
	}
	if err := checkSessionID(values[0]); err != nil {
		return nil, err
	}
	if rt == nil {
		rt = &route{}
	}
	if rt.session != "" {
		return rt, nil
	}
	withSession := *rt
	withSession.session = values[0]
	return &withSession, nil
}

// printable quotes what a client sent, cut short, for a refusal.
func printable(s string) string {
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return strconv.QuoteToASCII(s)
}

// restrict keeps the members the route allows. A zone or provider that no
// member has is refused with the ones that exist.
func (rt *route) restrict(all []*Member) ([]*Member, error) {
	if rt == nil || (rt.zone == "" && rt.provider == "") {
		return all, nil
	}
	var out []*Member
	zones, providers := map[string]bool{}, map[string]bool{}
	for _, m := range all {
		zones[m.Zone], providers[m.Provider] = true, true
		if (rt.zone == "" || m.Zone == rt.zone) && (rt.provider == "" || m.Provider == rt.provider) {
			out = append(out, m)
		}
	}
	switch {
	case rt.zone != "" && !zones[rt.zone]:
		return nil, badOption("no member in zone %s; zones are %s", printable(rt.zone), names(zones))
	case rt.provider != "" && !providers[rt.provider]:
		return nil, badOption("no member on provider %s; providers are %s", printable(rt.provider), names(providers))
	case len(out) == 0:
		return nil, badOption("no member in zone %s on provider %s", printable(rt.zone), printable(rt.provider))
	}
	return out, nil
}

func names(set map[string]bool) string {
	var out []string
	for k := range set {
		if k != "" {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "(none)"
	}
	return strings.Join(out, ", ")
}
