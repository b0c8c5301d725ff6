package controller_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// These run against the real API server with the generated CRDs: they prove
// the OpenAPI schema and CEL rules, not Go code.
func TestAPIServerRejectsInvalidProxies(t *testing.T) {
	ns := newNamespace(t)
	for _, tc := range []struct {
		name   string
		reason string
		mutate func(p *crawlv1alpha1.Proxy)
		want   string
	}{
		{
			name:   "auth None without source ranges",
			reason: "an unauthenticated proxy open to any source is an open proxy",
			mutate: func(p *crawlv1alpha1.Proxy) { p.Spec.Auth = crawlv1alpha1.ProxyAuthNone },
			want:   "auth None needs allowedSourceRanges",
		},
		{
			name:   "auth None open to every IPv4 address",
			reason: "0.0.0.0/0 is any source: with auth None it is an open proxy, which gets abused within hours",
			mutate: func(p *crawlv1alpha1.Proxy) {
				p.Spec.Auth = crawlv1alpha1.ProxyAuthNone
				p.Spec.AllowedSourceRanges = []string{"203.0.113.0/24", "0.0.0.0/0"}
			},
			want: "auth None cannot allow every address",
		},
		{
			name:   "auth None open to every IPv6 address",
			reason: "::/0 is the same door for IPv6 clients",
			mutate: func(p *crawlv1alpha1.Proxy) {
				p.Spec.Auth = crawlv1alpha1.ProxyAuthNone
				p.Spec.AllowedSourceRanges = []string{"::/0"}
			},
			want: "auth None cannot allow every address",
		},
		{
			name:   "malformed CIDR",
			reason: "tinyproxy would refuse to start on it, long after the user looked away",
			mutate: func(p *crawlv1alpha1.Proxy) { p.Spec.AllowedSourceRanges = []string{"203.0.113.0/33"} },
			want:   "must be a CIDR such as 203.0.113.0/24",
		},
		{
			name:   "port out of range",
			reason: "ports are 1 to 65535",
			mutate: func(p *crawlv1alpha1.Proxy) { p.Spec.Port = 70000 },
			want:   "spec.port",
		},
		{
			name:   "unknown auth",
			reason: "only Basic and None exist",
			mutate: func(p *crawlv1alpha1.Proxy) { p.Spec.Auth = "Digest" },
			want:   `Unsupported value: "Digest"`,
		},
		{
			name:   "provider name not a DNS label",
			reason: "it names a ProviderHealth object and appears in labels",
			mutate: func(p *crawlv1alpha1.Proxy) { p.Spec.Provider = "Lab_1" },
			want:   "spec.provider",
		},
		{
			name:   "name too long",
			reason: "the name is part of the instance name and the Secret name",
			mutate: func(p *crawlv1alpha1.Proxy) { p.Name = strings.Repeat("a", 64) },
			want:   "metadata.name must be at most 63 characters",
		},
		{
			name:   "extra user-data cloud-init cannot classify",
			reason: "the renderer can only merge a #cloud-config or run a #! script",
			mutate: func(p *crawlv1alpha1.Proxy) { p.Spec.ExtraUserData = "packages: [htop]" },
			want:   "must start with #cloud-config or #!",
		},
		{
			name:   "missing machine type",
			reason: "required fields are required",
			mutate: func(p *crawlv1alpha1.Proxy) { p.Spec.MachineType = "" },
			want:   "spec.machineType",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(ns, "invalid")
			tc.mutate(p)
			err := k8s.Create(context.Background(), p)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("%s: create returned %v, want Invalid", tc.reason, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: error %q lacks %q", tc.reason, err, tc.want)
			}
		})
	}
}

func TestAPIServerDefaultsAndAcceptsValidProxies(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	p := newProxy(ns, "defaults")
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.Port != 3128 || p.Spec.Auth != crawlv1alpha1.ProxyAuthBasic {
		t.Errorf("defaults: port %d, auth %q; want 3128 and Basic (never an open proxy by default)", p.Spec.Port, p.Spec.Auth)
	}
	open := newProxy(ns, "restricted")
	open.Spec.Auth = crawlv1alpha1.ProxyAuthNone
	open.Spec.AllowedSourceRanges = []string{"203.0.113.0/24", "2001:db8::/32"}
	if err := k8s.Create(ctx, open); err != nil {
		t.Errorf("auth None with source ranges must be accepted: %v", err)
	}
}

func TestAPIServerRejectsSpecChanges(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	p := newProxy(ns, "immutable")
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Spec.Zone = "rack-b"
	err := k8s.Patch(ctx, p, patch)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec is immutable") {
		t.Fatalf("changing spec.zone returned %v, want an Invalid error saying the spec is immutable", err)
	}
	// Metadata stays editable: labels and the retry annotation must work.
	var fresh crawlv1alpha1.Proxy
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), &fresh); err != nil {
		t.Fatal(err)
	}
	patch = client.MergeFrom(fresh.DeepCopy())
	fresh.Labels = map[string]string{"team": "crawl"}
	if err := k8s.Patch(ctx, &fresh, patch); err != nil {
		t.Errorf("changing labels must be allowed: %v", err)
	}
	if diff := cmp.Diff("rack-a", fresh.Spec.Zone); diff != "" {
		t.Errorf("zone (-want +got):\n%s", diff)
	}
}
