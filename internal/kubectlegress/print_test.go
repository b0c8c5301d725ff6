package kubectlegress

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		reason string
		in     string
		want   string
	}{
		{"the password is hidden, the user and address stay", "http://u:p4ss@198.51.100.7:3128", "http://u:xxxxx@198.51.100.7:3128"},
		{"a URL without credentials is unchanged", "http://198.51.100.7:3128", "http://198.51.100.7:3128"},
		{"a line that is not a URL may hold a password: hidden whole", "u:p4ss@%zz", "(a line that is not a URL, hidden)"},
	}
	for _, tt := range tests {
		if got := redact(tt.in); got != tt.want {
			t.Errorf("%s: redact(%q) = %q, want %q", tt.reason, tt.in, got, tt.want)
		}
	}
}

func TestPrintReport(t *testing.T) {
	r := &Report{
		Providers: []ProviderRow{{Name: "lab", Type: "proxmox", Healthy: "False", Reason: "NoHealthyTarget", Message: "no node answers"}},
		Pools:     []PoolRow{{Namespace: "crawlers", Name: "crawl", Desired: 3, Members: 3, Ready: 2, Serving: 2, DistinctAddresses: 2}},
		Proxies: []ProxyRow{
			{Namespace: "crawlers", Name: "a", Phase: "Ready", Provider: "lab", Zone: "rack-a", Ready: true, Serving: true, Reason: "Running",
				Address: "198.51.100.7", EgressIP: "203.0.113.7"},
			{Namespace: "crawlers", Name: "b", Phase: "Failed", Provider: "lab", Zone: "rack-a", Reason: "InvalidSpec", Message: "fix spec.image"},
		},
	}
	want := `PROVIDER  TYPE     HEALTHY  REASON
lab       proxmox  False    NoHealthyTarget

POOL            DESIRED  MEMBERS  READY  SERVING  ADDRESSES
crawlers/crawl  3        3        2      2        2

PROXY       PHASE   PROVIDER  ZONE    SERVING  REASON
crawlers/a  Ready   lab       rack-a  true     Running
crawlers/b  Failed  lab       rack-a  false    InvalidSpec

Not ready:
  provider lab: NoHealthyTarget: no node answers
  proxy crawlers/b: InvalidSpec: fix spec.image
`
	var buf bytes.Buffer
	if err := printReport(&buf, r, ""); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	buf.Reset()
	if err := printReport(&buf, r, "wide"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "ADDRESS       EGRESS") || !strings.Contains(buf.String(), "198.51.100.7  203.0.113.7") {
		t.Errorf("-o wide lacks the address columns:\n%s", buf.String())
	}
}
