package forwardproxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/netip"
	"strings"
)

// realm is the Basic realm that 407 responses announce.
const realm = "egress-proxy"

// basicAuth checks Proxy-Authorization Basic credentials. It keeps only the
// SHA-256 digests of the expected username and password: comparing digests
// of equal length in constant time reveals neither the content nor the
// length of the credentials, and a printed Proxy holds no secret.
type basicAuth struct {
	user, pass [sha256.Size]byte
}

func newBasicAuth(username, password string) *basicAuth {
	return &basicAuth{user: sha256.Sum256([]byte(username)), pass: sha256.Sum256([]byte(password))}
}

// check reports whether value, a Proxy-Authorization header's, carries the
// expected credentials.
func (a *basicAuth) check(value string) bool {
	scheme, encoded, ok := strings.Cut(strings.TrimSpace(value), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return false
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok {
		return false
	}
	u, p := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
	// Both comparisons run whatever the first one says.
	return subtle.ConstantTimeCompare(u[:], a.user[:])&subtle.ConstantTimeCompare(p[:], a.pass[:]) == 1
}

// sourceAllowed reports whether remoteAddr (an http.Request's RemoteAddr,
// "ip:port") is in one of ranges; an empty list allows every source. An
// address that does not parse is refused.
func sourceAllowed(ranges []netip.Prefix, remoteAddr string) bool {
	if len(ranges) == 0 {
		return true
	}
	ip, ok := remoteIP(remoteAddr)
	if !ok {
		return false
	}
	for _, r := range ranges {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

// sourceAllowed reports whether the exchange's client, the TCP peer of its
// connection, is in one of ranges.
func (x *exchange) sourceAllowed(ranges []netip.Prefix) bool {
	if len(ranges) == 0 {
		return true
	}
	if ta, ok := x.remote.(*net.TCPAddr); ok {
		ip := ta.AddrPort().Addr().Unmap().WithZone("")
		for _, r := range ranges {
			if r.Contains(ip) {
				return true
			}
		}
		return false
	}
	if x.remote != nil {
		return sourceAllowed(ranges, x.remote.String())
	}
	return sourceAllowed(ranges, x.source)
}

// remoteIP returns the IP of remoteAddr, with an IPv4-mapped IPv6 address
// (what a dual-stack listener reports for an IPv4 client) turned into IPv4
// so that IPv4 ranges match it, and without an IPv6 zone.
func remoteIP(remoteAddr string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap().WithZone(""), true
}
