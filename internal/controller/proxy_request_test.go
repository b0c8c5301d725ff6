package controller

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// requestUID is a UID as the API server assigns it (a UUID).
const requestUID = "3f2a9c1e-7b4d-4e2a-9c3b-1d2e3f4a5b6c"

// checkInstanceNameIsLabel fails the test unless name is a DNS-1123 label:
// every provider accepts those as a VM, domain or pod name.
func checkInstanceNameIsLabel(t *testing.T, name string) {
	t.Helper()
	if errs := validation.IsDNS1123Label(name); len(errs) != 0 {
		t.Errorf("instance name %q is not a DNS-1123 label: %v", name, errs)
	}
	if len(name) > maxInstanceName {
		t.Errorf("instance name %q has %d characters, want at most %d", name, len(name), maxInstanceName)
	}
}

func TestInstanceName(t *testing.T) {
	tests := []struct {
		name         string
		reason       string
		namespace    string
		proxy        string
		uid          string
		replacements int32
		want         string
	}{
		{
			name:      "typical",
			reason:    "namespace and name first, for the human on the hypervisor side, then 8 characters of the UID",
			namespace: "team-a", proxy: "web", uid: requestUID,
			want: "team-a-web-3f2a9c1e",
		},
		{
			name:      "upper case, dots and underscores sanitized",
			reason:    "Proxy names may be DNS subdomains (dots) and UIDs could come upper-cased; providers reject both in a label",
			namespace: "Team.A", proxy: "Web.Proxy_1", uid: strings.ToUpper(requestUID),
			want: "team-a-web-proxy-1-3f2a9c1e",
		},
		{
			name:      "non-ASCII characters sanitized",
			reason:    "a multi-byte rune must become one hyphen, not several bytes of invalid label",
			namespace: "ns", proxy: "prøxy", uid: requestUID,
			want: "ns-pr-xy-3f2a9c1e",
		},
		{
			name:      "first replacement",
			reason:    "a replacement must never share a name with the instance it replaces, or Create would find the stopped one again",
			namespace: "team-a", proxy: "web", uid: requestUID, replacements: 1,
			want: "team-a-web-3f2a9c1e-r1",
		},
		{
			name:      "third replacement",
			reason:    "the count, not a flag, is in the name: the 3rd successor differs from the 2nd",
			namespace: "team-a", proxy: "web", uid: requestUID, replacements: 3,
			want: "team-a-web-3f2a9c1e-r3",
		},
		{
			name: "very long namespace and name",
			reason: "a 63-character namespace plus a 63-character name must be cut to fit 63 characters while keeping the UID " +
				"and replacement suffixes (they make the name unique), and the cut must not leave a '-' before the suffix",
			// base = 49 a's + "-" + name; with the 13-character suffix the
			// cut falls right after the hyphen.
			namespace: strings.Repeat("a", 49), proxy: strings.Repeat("b", 63), uid: requestUID, replacements: 12,
			want: strings.Repeat("a", 49) + "-3f2a9c1e-r12",
		},
		{
			name:      "long names cut in the middle of the name",
			reason:    "the cut keeps as much of the human-readable part as fits: exactly 63 characters",
			namespace: strings.Repeat("n", 63), proxy: strings.Repeat("p", 63), uid: requestUID,
			want: strings.Repeat("n", 54) + "-3f2a9c1e",
		},
		{
			name: "just too long for the suffix",
			reason: "a base that fits in 63 characters on its own but not together with the suffix must be cut too " +
				"(57 + 9 characters would give a 66-character name that every provider rejects)",
			namespace: "team-a", proxy: strings.Repeat("w", 50), uid: requestUID,
			want: "team-a-" + strings.Repeat("w", 47) + "-3f2a9c1e",
		},
		{
			name:      "nothing usable in namespace and name",
			reason:    "a base made only of separators trims to nothing; the name must still be a label, not start with '-'",
			namespace: "", proxy: "...", uid: requestUID,
			want: "proxy-3f2a9c1e",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := instanceName(tc.namespace, tc.proxy, tc.uid, tc.replacements)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("instanceName(%q, %q, %q, %d) (-want +got):\n%s\nwhy this matters: %s",
					tc.namespace, tc.proxy, tc.uid, tc.replacements, diff, tc.reason)
			}
			checkInstanceNameIsLabel(t, got)
		})
	}
}

func TestInstanceNameIsUniquePerProxyAndReplacement(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		a, b   func() string
	}{
		{
			name:   "recreated proxy of the same name",
			reason: "a recreated Proxy (new UID) must never share its predecessor's name, or Create could adopt the old instance",
			a:      func() string { return instanceName("team-a", "web", requestUID, 0) },
			b:      func() string { return instanceName("team-a", "web", "9b8c7d6e-0000-4000-8000-000000000000", 0) },
		},
		{
			name:   "replacement of the same proxy",
			reason: "each replacement gets a new name, so Create never converges on the stopped instance",
			a:      func() string { return instanceName("team-a", "web", requestUID, 0) },
			b:      func() string { return instanceName("team-a", "web", requestUID, 1) },
		},
		{
			name:   "long names that differ only past the cut",
			reason: "when namespace and name are truncated the UID suffix alone keeps two Proxies apart",
			a:      func() string { return instanceName(strings.Repeat("n", 63), "web-1", requestUID, 0) },
			b: func() string {
				return instanceName(strings.Repeat("n", 63), "web-2", "9b8c7d6e-0000-4000-8000-000000000000", 0)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.a(), tc.b()
			if a == b {
				t.Errorf("both instances are named %q\nwhy this matters: %s", a, tc.reason)
			}
			checkInstanceNameIsLabel(t, a)
			checkInstanceNameIsLabel(t, b)
		})
	}
}

// uuidFrom formats 16 bytes (zero-padded or cut) as a UUID, the form of every
// UID the API server assigns.
func uuidFrom(b []byte) string {
	var u [16]byte
	copy(u[:], b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// FuzzInstanceName checks that any namespace, name and replacement count,
// with any API-server UID, give a valid, deterministic DNS label that ends
// with the UID and replacement suffixes.
func FuzzInstanceName(f *testing.F) {
	f.Add("team-a", "web", []byte("0123456789abcdef"), int32(0))
	f.Add("Team.A", "Web.Proxy_1", []byte{0xff, 0, 1, 2}, int32(3))
	f.Add(strings.Repeat("a", 63), strings.Repeat("b", 253), []byte{}, int32(2147483647))
	f.Add("team-a", strings.Repeat("w", 50), []byte("0123456789abcdef"), int32(0))
	f.Add("", "", []byte{1}, int32(-1))
	f.Add("-", "-", []byte("x"), int32(1))
	f.Add("ns", "prøxy\x00\xff", []byte("uid"), int32(10))
	f.Fuzz(func(t *testing.T, namespace, name string, uidSeed []byte, replacements int32) {
		uid := uuidFrom(uidSeed)
		got := instanceName(namespace, name, uid, replacements)
		checkInstanceNameIsLabel(t, got)
		suffix := "-" + strings.ReplaceAll(uid, "-", "")[:8]
		if replacements > 0 {
			suffix += fmt.Sprintf("-r%d", replacements)
		}
		if !strings.HasSuffix(got, suffix) {
			t.Errorf("instanceName(%q, %q, %q, %d) = %q, want the suffix %q that makes it unique",
				namespace, name, uid, replacements, got, suffix)
		}
		if again := instanceName(namespace, name, uid, replacements); again != got {
			t.Errorf("instanceName is not deterministic: %q then %q; Create relies on the same name after a crash", got, again)
		}
	})
}

func TestDNSSafe(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		in     string
		want   string
	}{
		{name: "already safe", reason: "valid label characters pass unchanged", in: "abc-123", want: "abc-123"},
		{name: "upper case", reason: "labels are lower case; upper case is folded, not replaced", in: "ABCxyz", want: "abcxyz"},
		{name: "separators", reason: "dots, underscores and slashes are invalid in a label", in: "a.b_c/d", want: "a-b-c-d"},
		{name: "multi-byte rune", reason: "one rune becomes one hyphen, whatever its UTF-8 length", in: "é", want: "-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, dnsSafe(tc.in)); diff != "" {
				t.Errorf("dnsSafe(%q) (-want +got):\n%s\nwhy this matters: %s", tc.in, diff, tc.reason)
			}
		})
	}
}

// requestCmpOpts compare Requests: a Sensitive by its content, netip values
// by value.
var requestCmpOpts = []cmp.Option{
	cmp.Comparer(func(a, b provider.Sensitive) bool { return bytes.Equal(a.Bytes(), b.Bytes()) }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
}

func requestProxy(auth crawlv1alpha1.ProxyAuth, ranges ...string) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web", UID: types.UID(requestUID), Generation: 1},
		Spec: crawlv1alpha1.ProxySpec{
			Provider: "lab", MachineType: "small", Image: "debian-12", Port: 3128,
			Auth: auth, AllowedSourceRanges: ranges,
		},
		Status: crawlv1alpha1.ProxyStatus{Replacements: 2},
	}
}

func requestPlacement() config.Placement {
	return config.Placement{
		Entry:       &config.Entry{Name: "lab"},
		Zone:        "rack-a",
		MachineType: config.MachineType{Name: "small", Cores: 1, MemoryMiB: 512},
		Image:       "debian-12",
	}
}

func TestBuildRequest(t *testing.T) {
	creds := &credentials{secretName: "web-proxy-credentials", username: "u0a1b2c3d4e5", password: "Pw0123456789abcdefghijklmnopqrstu"}
	tests := []struct {
		name   string
		reason string
		proxy  *crawlv1alpha1.Proxy
		creds  *credentials
		// want is compared without UserData, which is checked with
		// wantUserData and notUserData.
		want         provider.Request
		wantUserData []string
		notUserData  []string
		wantErr      []string
	}{
		{
			name: "basic auth with source ranges",
			reason: "the provider gets everything from the Proxy and the placement (the defaulted zone, not the empty " +
				"spec.zone), the credentials only inside the user-data and by Secret reference, and the parsed ranges",
			proxy: requestProxy(crawlv1alpha1.ProxyAuthBasic, "203.0.113.0/24", "2001:db8::/32"),
			creds: creds,
			want: provider.Request{
				OwnerUID:    requestUID,
				Owner:       provider.ObjectRef{Namespace: "team-a", Name: "web"},
				Name:        "team-a-web-3f2a9c1e-r2",
				Zone:        "rack-a",
				MachineType: "small",
				Image:       "debian-12",
				Proxy: provider.ProxySettings{
					Port: 3128,
					Credentials: &provider.SecretRef{Namespace: "team-a", Name: "web-proxy-credentials",
						UsernameKey: "username", PasswordKey: "password"},
					AllowedSourceRanges: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::/32")},
				},
			},
			wantUserData: []string{"BasicAuth u0a1b2c3d4e5 Pw0123456789abcdefghijklmnopqrstu\n", "Port 3128\n",
				"Allow 203.0.113.0/24\n", "Allow 2001:db8::/32\n"},
		},
		{
			name:   "basic auth open to any source",
			reason: "no ranges is allowed with credentials: no range reaches the provider and no Allow line tinyproxy (which then allows any source)",
			proxy:  requestProxy(crawlv1alpha1.ProxyAuthBasic),
			creds:  creds,
			want: provider.Request{
				OwnerUID: requestUID, Owner: provider.ObjectRef{Namespace: "team-a", Name: "web"},
				Name: "team-a-web-3f2a9c1e-r2", Zone: "rack-a", MachineType: "small", Image: "debian-12",
				Proxy: provider.ProxySettings{
					Port: 3128,
					Credentials: &provider.SecretRef{Namespace: "team-a", Name: "web-proxy-credentials",
						UsernameKey: "username", PasswordKey: "password"},
				},
			},
			wantUserData: []string{"BasicAuth u0a1b2c3d4e5 Pw0123456789abcdefghijklmnopqrstu\n"},
			notUserData:  []string{"Allow "},
		},
		{
			name:   "auth None",
			reason: "without credentials a provider must not be told to mount a Secret, and tinyproxy must not ask for a password",
			proxy:  requestProxy(crawlv1alpha1.ProxyAuthNone, "10.0.0.0/8"),
			creds:  nil,
			want: provider.Request{
				OwnerUID: requestUID, Owner: provider.ObjectRef{Namespace: "team-a", Name: "web"},
				Name: "team-a-web-3f2a9c1e-r2", Zone: "rack-a", MachineType: "small", Image: "debian-12",
				Proxy: provider.ProxySettings{
					Port:                3128,
					AllowedSourceRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
				},
			},
			wantUserData: []string{"Allow 10.0.0.0/8\n"},
			notUserData:  []string{"BasicAuth"},
		},
		{
			name: "invalid CIDR",
			reason: "the API server checks CIDRs, but a Proxy stored before that rule existed can still hold one; the error " +
				"must name the field and the value so the user can find it",
			proxy:   requestProxy(crawlv1alpha1.ProxyAuthBasic, "203.0.113.0/24", "10.0.0.0/33"),
			creds:   creds,
			wantErr: []string{"spec.allowedSourceRanges", `"10.0.0.0/33"`},
		},
		{
			name:    "plain address instead of a CIDR",
			reason:  "an address without a prefix length is a common mistake and must not be taken as /32 silently",
			proxy:   requestProxy(crawlv1alpha1.ProxyAuthNone, "203.0.113.7"),
			wantErr: []string{"spec.allowedSourceRanges", `"203.0.113.7"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proxyCopy := tc.proxy.DeepCopy()
			got, err := buildRequest(tc.proxy, requestPlacement(), tc.creds)
			if diff := cmp.Diff(proxyCopy, tc.proxy); diff != "" {
				t.Errorf("buildRequest changed the Proxy (-want +got):\n%s", diff)
			}
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("buildRequest() = %+v, nil; want an error\nwhy this matters: %s", got, tc.reason)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("buildRequest() error %q does not contain %q\nwhy this matters: %s", err, s, tc.reason)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("buildRequest(): %v", err)
			}
			opts := append([]cmp.Option{cmpopts.IgnoreFields(provider.Request{}, "UserData"), cmpopts.EquateEmpty()}, requestCmpOpts...)
			if diff := cmp.Diff(tc.want, got, opts...); diff != "" {
				t.Errorf("buildRequest() (-want +got):\n%s\nwhy this matters: %s", diff, tc.reason)
			}
			if want := instanceName(tc.proxy.Namespace, tc.proxy.Name, string(tc.proxy.UID), tc.proxy.Status.Replacements); got.Name != want {
				t.Errorf("Request.Name = %q, want instanceName() = %q: status.instanceName and the provider must agree", got.Name, want)
			}
			userData := string(got.UserData.Bytes())
			if !strings.HasPrefix(userData, "#cloud-config\n") {
				t.Errorf("user-data does not start with #cloud-config; cloud-init would ignore it")
			}
			for _, s := range tc.wantUserData {
				if !strings.Contains(userData, s) {
					t.Errorf("user-data lacks %q\nwhy this matters: %s", s, tc.reason)
				}
			}
			for _, s := range tc.notUserData {
				if strings.Contains(userData, s) {
					t.Errorf("user-data contains %q\nwhy this matters: %s", s, tc.reason)
				}
			}
		})
	}
}

// TestBuildRequestIsDeterministic: Create is idempotent only if the same
// Proxy always yields the same Request, user-data included; a retry after a
// crash must not look like a different instance.
func TestBuildRequestIsDeterministic(t *testing.T) {
	creds := &credentials{secretName: "web-proxy-credentials", username: "u0a1b2c3d4e5", password: "Pw0123456789abcdefghijklmnopqrstu"}
	p := requestProxy(crawlv1alpha1.ProxyAuthBasic, "203.0.113.0/24", "2001:db8::/32")
	p.Spec.ExtraUserData = "#!/bin/sh\necho hello\n"

	first, err := buildRequest(p, requestPlacement(), creds)
	if err != nil {
		t.Fatal(err)
	}
	second, err := buildRequest(p.DeepCopy(), requestPlacement(), creds)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, second, requestCmpOpts...); diff != "" {
		t.Errorf("two builds of the same Proxy differ (-want +got):\n%s", diff)
	}
	if first.UserData.Len() == 0 {
		t.Errorf("user-data is empty")
	}
	if !strings.Contains(string(first.UserData.Bytes()), "echo hello") {
		t.Errorf("user-data lacks spec.extraUserData")
	}
}

// The entry's egress policy, which the administrator owns, reaches both
// engines: the settings of providers that run the Go proxy, and the
// user-data of VM guests.
func TestBuildRequestCarriesTheEntryEgressPolicy(t *testing.T) {
	pl := requestPlacement()
	pl.Entry.EgressPolicy = egress.Policy{
		AllowCIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		ConnectPorts: []egress.PortRange{{From: 8443, To: 8443}},
	}
	creds := &credentials{secretName: "web-proxy-credentials", username: "u0a1b2c3d4e5", password: "Pw0123456789abcdefghijklmnopqrstu"}
	got, err := buildRequest(requestProxy(crawlv1alpha1.ProxyAuthBasic, "203.0.113.0/24"), pl, creds)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(pl.Entry.EgressPolicy, got.Proxy.Egress, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("Request.Proxy.Egress (-want +got):\n%s", diff)
	}
	userData := string(got.UserData.Bytes())
	for _, want := range []string{"ConnectPort 8443", "set allow4", "127.0.0.0/8", "egress-proxy-nftables.service"} {
		if !strings.Contains(userData, want) {
			t.Errorf("user-data lacks %q: the guest would not enforce the entry's policy", want)
		}
	}
}

func TestCheckOpenSourcesOfAProxy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		auth   crawlv1alpha1.ProxyAuth
		ranges []string
		ok     bool
	}{
		{name: "basic", reason: "with credentials any source may knock", auth: crawlv1alpha1.ProxyAuthBasic, ranges: []string{"0.0.0.0/1", "128.0.0.0/1"}, ok: true},
		{name: "none, narrow", reason: "auth None for one network", auth: crawlv1alpha1.ProxyAuthNone, ranges: []string{"198.51.100.0/24"}, ok: true},
		{name: "none, two halves", reason: "two /1s are an open proxy in two halves", auth: crawlv1alpha1.ProxyAuthNone, ranges: []string{"0.0.0.0/1", "128.0.0.0/1"}},
		{name: "none, garbage", reason: "a range that does not parse is refused, not skipped", auth: crawlv1alpha1.ProxyAuthNone, ranges: []string{"everything"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &crawlv1alpha1.Proxy{Spec: crawlv1alpha1.ProxySpec{Auth: tc.auth, AllowedSourceRanges: tc.ranges}}
			err := checkOpenSources(p)
			if (err == nil) != tc.ok {
				t.Fatalf("%s: checkOpenSources = %v, want accepted %t", tc.reason, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "spec.allowedSourceRanges") {
				t.Errorf("the refusal %q does not name the field", err)
			}
		})
	}
}
