package controller

import (
	"fmt"
	"net/netip"
	"strings"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/cloudinit"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// maxInstanceName is the longest instance name: a DNS label, which every
// provider accepts as a VM, domain or pod name.
const maxInstanceName = 63

// instanceName returns the deterministic name of a Proxy's instance:
// namespace and name for humans, the first 8 characters of the UID so that a
// recreated Proxy of the same name never shares a name with its predecessor,
// and the replacement count so that a replacement never shares one with the
// instance it replaces.
func instanceName(namespace, name, uid string, replacements int32) string {
	uidPart := strings.Trim(dnsSafe(strings.ReplaceAll(uid, "-", "")), "-")
	if len(uidPart) > 8 {
		uidPart = uidPart[:8]
	}
	suffix := ""
	if uidPart != "" {
		suffix = "-" + strings.TrimRight(uidPart, "-")
	}
	if replacements > 0 {
		suffix += fmt.Sprintf("-r%d", replacements)
	}
	base := dnsSafe(namespace + "-" + name)
	if len(base) > maxInstanceName-len(suffix) {
		base = base[:maxInstanceName-len(suffix)]
	}
	base = strings.Trim(base, "-")
	if base == "" {
		base = "proxy"
	}
	return base + suffix
}

// dnsSafe lower-cases s and replaces every character that may not appear in
// a DNS label with a hyphen.
func dnsSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		default:
			return '-'
		}
	}, s)
}

// buildRequest turns a Proxy, its placement and its credentials into the
// provider Request. The same inputs always give the same Request.
func buildRequest(p *crawlv1alpha1.Proxy, pl config.Placement, creds *credentials) (provider.Request, error) {
	ranges := make([]netip.Prefix, 0, len(p.Spec.AllowedSourceRanges))
	for _, s := range p.Spec.AllowedSourceRanges {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return provider.Request{}, fmt.Errorf("spec.allowedSourceRanges: %q is not a CIDR", s)
		}
		ranges = append(ranges, pfx)
	}
	// The entry's egress policy, not the Proxy, says where proxies may
	// connect: the administrator owns it.
	var policy egress.Policy
	if pl.Entry != nil {
		policy = pl.Entry.EgressPolicy
	}
	ci := cloudinit.Proxy{Port: p.Spec.Port, AllowedSourceRanges: ranges, ExtraUserData: p.Spec.ExtraUserData, Egress: policy}
	settings := provider.ProxySettings{Port: p.Spec.Port, AllowedSourceRanges: ranges, Egress: policy}
	if creds != nil {
		ci.Username, ci.Password = creds.username, creds.password
		settings.Credentials = &provider.SecretRef{
			Namespace: p.Namespace, Name: creds.secretName, UsernameKey: secretKeyUsername, PasswordKey: secretKeyPassword,
		}
	}
	userData, err := cloudinit.Render(ci)
	if err != nil {
		return provider.Request{}, err
	}
	return provider.Request{
		OwnerUID:    string(p.UID),
		Owner:       provider.ObjectRef{Namespace: p.Namespace, Name: p.Name},
		Name:        instanceName(p.Namespace, p.Name, string(p.UID), p.Status.Replacements),
		Zone:        pl.Zone,
		MachineType: pl.MachineType.Name,
		Image:       pl.Image,
		UserData:    provider.NewSensitive(userData),
		Proxy:       settings,
	}, nil
}

// checkOpenSources refuses a Proxy without authentication whose source
// ranges together cover more than egress.CheckOpenSources allows:
// admission checks each range, only the operator sees their union.
func checkOpenSources(p *crawlv1alpha1.Proxy) error {
	if isBasic(p) {
		return nil
	}
	ranges, err := egress.ParsePrefixes(strings.Join(p.Spec.AllowedSourceRanges, ","))
	if err == nil {
		err = egress.CheckOpenSources(ranges)
	}
	if err != nil {
		return fmt.Errorf("spec.allowedSourceRanges with auth None: %w", err)
	}
	return nil
}

// isBasic reports whether the Proxy uses generated credentials.
func isBasic(p *crawlv1alpha1.Proxy) bool {
	return p.Spec.Auth != crawlv1alpha1.ProxyAuthNone
}
