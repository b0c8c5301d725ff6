package config

import (
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// validateEgress checks an entry's `egressPolicy`: ranges written as
// networks (an administrator who writes 10.0.0.1/8 may mean the host) and
// ports within 1 to 65535.
func validateEgress(p egress.Policy, path *field.Path) field.ErrorList {
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
		if !r.Valid() {
			errs = append(errs, field.Invalid(path.Child("connectPorts").Index(i), r.String(),
				"must be a port from 1 to 65535 or a range from-to with from <= to"))
		}
	}
	return errs
}
