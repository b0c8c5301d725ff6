package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// EgressPolicy is an entry's destination policy for its proxies (the
// `egressPolicy` key). The administrator who writes the providers
// configuration owns it, not the author of a Proxy. Its zero value is the
// default: no destination in the built-in deny list (loopback, link-local
// and the metadata service, the private ranges, CGNAT, multicast, reserved
// and unspecified addresses), CONNECT to port 443 only.
type EgressPolicy struct {
	// AllowCIDRs reopen parts of the built-in deny list, for example a
	// private network the crawlers must reach.
	AllowCIDRs []netip.Prefix `json:"allowCIDRs,omitempty"`
	// DenyCIDRs are refused as well, whatever AllowCIDRs say: the
	// cluster's Service and Pod ranges when they are public addresses, or
	// anything else the administrator forbids.
	DenyCIDRs []netip.Prefix `json:"denyCIDRs,omitempty"`
	// ConnectPorts are the ports CONNECT may reach, as numbers or
	// "from-to" ranges; empty means 443 only.
	ConnectPorts []PortRange `json:"connectPorts,omitempty"`
}

// IsZero reports whether p is the default policy.
func (p EgressPolicy) IsZero() bool {
	return len(p.AllowCIDRs) == 0 && len(p.DenyCIDRs) == 0 && len(p.ConnectPorts) == 0
}

// PortRange is an inclusive range of TCP ports; From == To for one port.
type PortRange struct {
	From, To uint16
}

// String returns "443" or "8000-8999", the form that UnmarshalJSON reads.
func (r PortRange) String() string {
	if r.From == r.To {
		return strconv.Itoa(int(r.From))
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// UnmarshalJSON reads a port number (443) or a string ("443",
// "8000-8999").
func (r *PortRange) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) > 0 && b[0] != '"' {
		s = string(b)
	} else if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	from, to, isRange := strings.Cut(strings.TrimSpace(s), "-")
	f, err := strconv.ParseUint(strings.TrimSpace(from), 10, 16)
	if err != nil {
		return fmt.Errorf("%s is not a port or a range such as 8000-8999", s)
	}
	t := f
	if isRange {
		if t, err = strconv.ParseUint(strings.TrimSpace(to), 10, 16); err != nil {
			return fmt.Errorf("%s is not a port or a range such as 8000-8999", s)
		}
	}
	r.From, r.To = uint16(f), uint16(t)
	return nil
}

// MarshalJSON writes the form UnmarshalJSON reads.
func (r PortRange) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

// validate checks the ranges and ports.
func (p EgressPolicy) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, l := range []struct {
		name string
		list []netip.Prefix
	}{{"allowCIDRs", p.AllowCIDRs}, {"denyCIDRs", p.DenyCIDRs}} {
		for i, pfx := range l.list {
			if pfx != pfx.Masked() {
				errs = append(errs, field.Invalid(path.Child(l.name).Index(i), pfx.String(),
					"has host bits set; write the network, "+pfx.Masked().String()))
			}
		}
	}
	for i, r := range p.ConnectPorts {
		if r.From == 0 || r.To < r.From {
			errs = append(errs, field.Invalid(path.Child("connectPorts").Index(i), r.String(),
				"must be a port from 1 to 65535 or a range from-to with from <= to"))
		}
	}
	return errs
}
