package config

import (
	"net/url"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Probe is how the operator probes an entry's proxies (the `probe` key of an
// entry). The zero value probes without any site outside the proxy: the
// proxy must answer and refuse a wrong password with 407.
type Probe struct {
	// CheckURL is an http:// IP-echo URL (it answers with the caller's
	// address as plain text) fetched through each proxy; its answer is the
	// proxy's egress address (Proxy status.egressIP). Empty: no egress
	// address is recorded.
	CheckURL string `json:"checkURL,omitempty"`
	// DeniedURL is an http:// destination the proxies' egress policy
	// denies; the probe expects 403 for it with the right credentials. Empty
	// turns that check off.
	DeniedURL string `json:"deniedURL,omitempty"`
}

func validateProbe(path *field.Path, p Probe) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct{ name, value string }{{"checkURL", p.CheckURL}, {"deniedURL", p.DeniedURL}} {
		if f.value == "" {
			continue
		}
		u, err := url.Parse(f.value)
		if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
			errs = append(errs, field.Invalid(path.Child(f.name), f.value, "must be an http:// URL without credentials, such as http://203.0.113.9/ip"))
		}
	}
	return errs
}
