package published_test

import (
	"net/url"
	"testing"

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
