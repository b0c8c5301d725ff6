package kubectlegress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/kubectlegress"
)

// TestSessions: kubectl egress sessions places each session id on the
// member a gateway with the same members puts it on (the gateway's own
// placement, run here on a gateway.Set), lists the members without ids,
// and refuses what the gateway would refuse, with errors that say what to
// do; it reads the ConfigMaps, never a password.
func TestSessions(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	c := env.Client
	mustDo(t, c.Create(ctx, &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "front"},
		Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"crawl", "spare", "missing"}}}))
	lists := map[string][]gateway.Entry{
		"crawl": {{Name: "crawl-0", URL: "http://198.51.100.7:3128", EgressIP: "203.0.113.7", Zone: "rack-a", Provider: "lab"},
			{Name: "crawl-1", URL: "http://198.51.100.8:3128", EgressIP: "203.0.113.8", Zone: "rack-b", Provider: "lab"}},
		"spare": {{Name: "spare-0", URL: "http://198.51.100.9:3128", EgressIP: "203.0.113.9", Zone: "rack-a", Provider: "colo"}},
	}
	set := gateway.NewSet()
	for pool, es := range lists {
		data, err := json.Marshal(es)
		mustDo(t, err)
		mustDo(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: published.ListName(pool)},
			Data: map[string]string{published.ListKeyJSON: string(data)}}))
		set.Update(pool, es)
	}

	var ids []string
	var want []kubectlegress.SessionRow
	seen := map[string]bool{}
	for i := range 40 {
		id := fmt.Sprintf("s%d", i)
		ids = append(ids, id)
		m := set.PlaceSession(id, 0, time.Now())
		seen[m.Name] = true
		want = append(want, kubectlegress.SessionRow{Session: id, Pool: m.Pool, Member: m.Name, EgressIP: m.EgressIP, Zone: m.Zone, Provider: m.Provider})
	}
	if len(seen) != 3 {
		t.Fatalf("40 sessions landed on %v; want all 3 members, or the test shows little", seen)
	}
	code, out, errOut := w.run(ctx, append([]string{"sessions", "front", "-n", w.ns, "-o", "json"}, ids...)...)
	var got []kubectlegress.SessionRow
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("sessions -o json: exit %d, out %q, err %q", code, out, errOut)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the plugin's placement against the gateway's (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		reason string
		args   []string
		code   int
		want   []string // in the output, or in the error when code is 1
	}{
		{"a table of one session", []string{"sessions", "front", "s1"}, 0,
			[]string{"SESSION  MEMBER", "s1       " + want[1].Pool + "/" + want[1].Member + "  " + want[1].EgressIP}},
		{"no id: the members sessions land on", []string{"sessions", "front"}, 0,
			[]string{"-        crawl/crawl-0  203.0.113.7  rack-a  lab", "-        crawl/crawl-1", "-        spare/spare-0  203.0.113.9  rack-a  colo"}},
		{"an id the gateway would refuse", []string{"sessions", "front", "a.b"}, 1, []string{`"a.b" is not a session id: 1 to 64 letters`}},
		{"no such gateway", []string{"sessions", "back"}, 1, []string{"no ProxyGateway back in namespace " + w.ns}},
		{"a gateway whose pools list no member", []string{"sessions", "empty"}, 1, []string{"has no member: its pools missing list no Serving member"}},
	} {
		if tc.args[1] == "empty" {
			mustDo(t, c.Create(ctx, &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "empty"},
				Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"missing"}}}))
		}
		code, out, errOut := w.run(ctx, append(tc.args, "-n", w.ns)...)
		text := out
		if tc.code != 0 {
			text = errOut
		}
		for _, s := range tc.want {
			if code != tc.code || !strings.Contains(text, s) {
				t.Errorf("%s: exit %d, out %q, err %q; want exit %d with %q", tc.reason, code, out, errOut, tc.code, s)
			}
		}
		if strings.Contains(out+errOut, password) {
			t.Errorf("%s: a password was printed", tc.reason)
		}
	}
}
