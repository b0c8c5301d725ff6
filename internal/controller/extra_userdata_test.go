package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// extraUserDataConfig has the entry "lab", which leaves allowExtraUserData
// at its default (off), and "trusted", which turns it on.
func extraUserDataConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
providers:
  - name: lab
    type: fake
    zones: [rack-a]
    machineTypes: {small: {cores: 1, memoryMiB: 512}}
    images: [debian-12]
  - name: trusted
    type: fake
    zones: [rack-a]
    machineTypes: {small: {cores: 1, memoryMiB: 512}}
    images: [debian-12]
    allowExtraUserData: true
`), fakeprovider.Registry())
	if err != nil {
		t.Fatalf("test config: %v", err)
	}
	return cfg
}

const extraPart = "#!/bin/sh\necho 'Allow 0.0.0.0/0' >> /etc/tinyproxy/tinyproxy.conf\n"

func TestExtraUserDataIsTheAdministratorsDecision(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns, cfg: extraUserDataConfig(t)})
	ctx := context.Background()

	refused := newProxy(ns, "refused")
	refused.Spec.ExtraUserData = extraPart
	allowed := newProxy(ns, "allowed")
	allowed.Spec.Provider = "trusted"
	allowed.Spec.ExtraUserData = extraPart
	for _, p := range []*crawlv1alpha1.Proxy{refused, allowed} {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	got := waitPhase(t, ns, "refused", crawlv1alpha1.ProxyPhaseFailed, crawlv1alpha1.ReasonInvalidSpec)
	msg := apimeta.FindStatusCondition(got.Status.Conditions, crawlv1alpha1.ConditionReady).Message
	for _, want := range []string{"spec.extraUserData", `provider "lab"`, "allowExtraUserData"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not name %q: the author must learn which entry refuses what, and which setting decides", msg, want)
		}
	}
	waitPhase(t, ns, "allowed", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	// Nothing was created for the refused Proxy: the one instance is the
	// allowed one's.
	consistently(t, time.Second, func() (bool, string) {
		var names []string
		for _, c := range op.fake.Calls() {
			if c.Op == provider.OpCreate && strings.Contains(c.Name, "-refused-") {
				names = append(names, c.Name)
			}
		}
		return len(names) == 0 && len(op.fake.Instances()) == 1,
			fmt.Sprintf("creates for the refused Proxy %v, instances %d", names, len(op.fake.Instances()))
	})
}
