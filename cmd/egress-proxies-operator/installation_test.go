package main

import (
	"errors"
	"os"
	"testing"
)

// TestInstallationDefaults: the installation ID is the flag's, else the
// operator's namespace, which comes from POD_NAMESPACE, else the service
// account's namespace file.
func TestInstallationDefaults(t *testing.T) {
	saFile := func(ns string) func(string) ([]byte, error) {
		return func(path string) ([]byte, error) {
			if path != serviceAccountNamespace || ns == "" {
				return nil, os.ErrNotExist
			}
			return []byte(ns + "\n"), nil
		}
	}
	env := func(ns string) func(string) string {
		return func(k string) string {
			if k == "POD_NAMESPACE" {
				return ns
			}
			return ""
		}
	}
	for _, c := range []struct {
		name, reason   string
		podNS, saNS    string
		flagID         string
		wantNS, wantID string
	}{
		{"in a pod", "the namespace names the installation", "", "egress-proxies-system", "", "egress-proxies-system", "egress-proxies-system"},
		{"downward API first", "the Deployment says it explicitly", "prod", "other", "", "prod", "prod"},
		{"flag wins", "two installations may share a namespace name on two clusters that share a hypervisor", "prod", "", "prod-eu", "prod", "prod-eu"},
		{"outside a pod", "no namespace and no flag: refused", "", "", "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := defaultNamespace(env(c.podNS), saFile(c.saNS))
			if ns != c.wantNS {
				t.Errorf("namespace = %q, want %q (%s)", ns, c.wantNS, c.reason)
			}
			id, err := installation(flags{operatorNamespace: ns, installationID: c.flagID})
			if id != c.wantID || (c.wantID == "") != (err != nil) {
				t.Errorf("installation = %q, %v; want %q (%s)", id, err, c.wantID, c.reason)
			}
		})
	}
	if _, err := installation(flags{}); err == nil || errors.Unwrap(err) != nil {
		t.Errorf("installation without anything = %v, want a plain error", err)
	}
}
