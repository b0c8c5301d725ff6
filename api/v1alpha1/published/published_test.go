package published_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
)

func TestProxyURL(t *testing.T) {
	cases := []struct {
		reason  string
		address string
		port    int32
		user    *url.Userinfo
		want    string
	}{
		{reason: "without credentials the URL is scheme, address and port", address: "198.51.100.7", port: 3128, want: "http://198.51.100.7:3128"},
		{reason: "credentials go in the userinfo", address: "198.51.100.7", port: 3128, user: url.UserPassword("ualice", "pw"), want: "http://ualice:pw@198.51.100.7:3128"},
		{reason: "an IPv6 address is bracketed, so that the port is not read as part of it", address: "2001:db8::7", port: 8080, want: "http://[2001:db8::7]:8080"},
		{reason: "a character that is not URL-safe in a password is escaped, so that the URL parses back to it", address: "198.51.100.7", port: 3128,
			user: url.UserPassword("u", "p@ss/w"), want: "http://u:p%40ss%2Fw@198.51.100.7:3128"},
	}
	for _, tc := range cases {
		got := published.ProxyURL(tc.address, tc.port, tc.user)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: ProxyURL(%q, %d) (-want +got):\n%s", tc.reason, tc.address, tc.port, diff)
		}
	}
}

func TestListName(t *testing.T) {
	if diff := cmp.Diff("crawl-proxies", published.ListName("crawl")); diff != "" {
		t.Errorf("the list of pool crawl is in <pool>-proxies, as docs/pools.md says (-want +got):\n%s", diff)
	}
}

func TestRenderList(t *testing.T) {
	created := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	txt, js := published.RenderList([]published.ListEntry{
		{Name: "p-a", URL: "http://u:p@198.51.100.1:3128", Provider: "lab", Zone: "rack-a", EgressIP: "203.0.113.1", Created: created},
		{Name: "p-b", URL: "http://u:p@198.51.100.2:3128", Provider: "lab", Zone: "rack-b", Created: created},
	})
	if diff := cmp.Diff("http://u:p@198.51.100.1:3128\nhttp://u:p@198.51.100.2:3128\n", string(txt)); diff != "" {
		t.Errorf("proxies.txt (-want +got):\n%s", diff)
	}
	wantJSON := `[
  {
    "name": "p-a",
    "url": "http://u:p@198.51.100.1:3128",
    "provider": "lab",
    "zone": "rack-a",
    "egressIP": "203.0.113.1",
    "created": "2025-03-01T10:00:00Z"
  },
  {
    "name": "p-b",
    "url": "http://u:p@198.51.100.2:3128",
    "provider": "lab",
    "zone": "rack-b",
    "created": "2025-03-01T10:00:00Z"
  }
]
`
	if diff := cmp.Diff(wantJSON, string(js)); diff != "" {
		t.Errorf("proxies.json (-want +got):\n%s", diff)
	}
	txt, js = published.RenderList(nil)
	if string(txt) != "" || string(js) != "[]\n" {
		t.Errorf("an empty list renders %q and %q, want an empty file and [] (a reader must be able to parse it)", txt, js)
	}
}
