package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

func unverifiedInstances(n int) []provider.Instance {
	out := make([]provider.Instance, n)
	for i := range out {
		out[i] = provider.Instance{ID: provider.ID(fmt.Sprintf("fake/%d", 101+i)), Name: fmt.Sprintf("crawl-%d", i)}
	}
	return out
}

// TestKeyVerdict: only a fleet of this installation of which nothing
// verifies holds creates; foreign and copied marks never do.
func TestKeyVerdict(t *testing.T) {
	two := unverifiedInstances(2)
	for _, c := range []struct {
		name, reason string
		check        keyCheck
		want         keyVerdict
	}{
		{"not listed yet", "a key loss shows only in a listing: the first create after a start waits for one", keyCheck{}, keyUnchecked},
		{"empty entry", "a new installation has nothing to recognise", keyCheck{checked: true}, keyVerified},
		{"the fleet verifies", "the usual case", keyCheck{checked: true, verified: 5}, keyVerified},
		{"some copied marks beside the fleet", "a forged or copied mark must not let a hypervisor user stop the entry", keyCheck{checked: true, verified: 5, unverified: two}, keyVerified},
		{"only unverified instances", "the lost key: creating now would make a second fleet", keyCheck{checked: true, unverified: two}, keyMismatch},
		{"only unverified, start afresh", "the administrator's word, for the current key", keyCheck{checked: true, unverified: two, afresh: true}, keyAfresh},
		{"afresh without a mismatch", "an annotation left from an earlier loss changes nothing on a fleet that verifies", keyCheck{checked: true, verified: 1, afresh: true}, keyVerified},
	} {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, c.check.verdict()); diff != "" {
				t.Errorf("verdict (-want +got) (%s):\n%s", c.reason, diff)
			}
		})
	}
}

// TestOwnershipGate: the gate keeps the administrator's word across
// listings, and an annotation arriving before the first listing counts.
func TestOwnershipGate(t *testing.T) {
	g := &ownershipGate{}
	g.observe("lab", 0, unverifiedInstances(1))
	if v := g.get("lab").verdict(); v != keyMismatch {
		t.Fatalf("after a listing of only unverified instances: verdict %v, want keyMismatch", v)
	}
	g.setAfresh("lab", true)
	g.observe("lab", 0, unverifiedInstances(1))
	if v := g.get("lab").verdict(); v != keyAfresh {
		t.Errorf("a new listing forgot the start afresh: verdict %v", v)
	}
	g.setAfresh("lab", false)
	if v := g.get("lab").verdict(); v != keyMismatch {
		t.Errorf("removing the annotation before any new instance verified: verdict %v, want keyMismatch", v)
	}
	if v := g.get("other").verdict(); v != keyUnchecked {
		t.Errorf("an entry never listed: verdict %v, want keyUnchecked", v)
	}
	if !g.begin("lab") || g.begin("lab") {
		t.Error("two reconciles could list the entry for its first check at once")
	}
	g.end("lab")
	if !g.begin("lab") {
		t.Error("the first check's claim was not released")
	}
}

// TestOwnershipCondition: the ProviderHealth condition says what happened,
// names the key and lists the instances, capped; nothing before a listing.
func TestOwnershipCondition(t *testing.T) {
	now := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	many := unverifiedInstances(12)
	for _, c := range []struct {
		name, reason string
		check        keyCheck
		want         *metav1.Condition
	}{
		{"not listed", "a condition before a listing would claim what nobody saw", keyCheck{}, nil},
		{"verified", "the usual case, quiet", keyCheck{checked: true, verified: 3}, &metav1.Condition{
			Status: metav1.ConditionTrue, Reason: crawlv1alpha1.ReasonKeyVerified,
			Message: "3 instances verify with the ownership key k3y."}},
		{"verified beside copied marks", "foreign-looking marks of this installation are worth a look, not a hold",
			keyCheck{checked: true, verified: 3, unverified: many[:1]}, &metav1.Condition{
				Status: metav1.ConditionTrue, Reason: crawlv1alpha1.ReasonKeyVerified,
				Message: "3 instances verify with the ownership key k3y. 1 others carry this installation's mark with a signature that does not verify " +
					"(copied or forged marks, or left from an earlier key); they are never touched: look at them. They are: fake/101 (crawl-0)."}},
		{"mismatch", "what to do, the key to name, and the old instances, at most ten of them",
			keyCheck{checked: true, unverified: many}, &metav1.Condition{
				Status: metav1.ConditionFalse, Reason: crawlv1alpha1.ReasonOwnershipKeyMismatch,
				Message: "12 instances carry this installation's mark, and none verifies with the current ownership key (ID k3y): " +
					"the key Secret was lost or replaced. Nothing is created or replaced on this entry meanwhile, so that no second fleet is made. " +
					"Restore the key Secret from its backup and restart the operator (docs/security.md); or, to start afresh with the current key, " +
					"kubectl annotate providerhealth lab crawl.example.com/start-afresh=k3y and remove the old instances by hand. They are: " +
					listInstances(many) + "."}},
		{"started afresh", "the old instances still run with working passwords: the message keeps listing them",
			keyCheck{checked: true, unverified: many[:2], afresh: true}, &metav1.Condition{
				Status: metav1.ConditionTrue, Reason: crawlv1alpha1.ReasonStartedAfresh,
				Message: "Started afresh with the ownership key k3y, as the annotation crawl.example.com/start-afresh says. The 2 instances made with the old key " +
					"are never touched and may still serve with their old passwords: remove them by hand. They are: fake/101 (crawl-0), fake/102 (crawl-1)."}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := c.want
			if want != nil {
				want.Type, want.LastTransitionTime = crawlv1alpha1.ConditionOwnershipKey, metav1.NewTime(now)
			}
			if diff := cmp.Diff(want, ownershipCondition("lab", c.check, "k3y", now)); diff != "" {
				t.Errorf("ownershipCondition (-want +got) (%s):\n%s", c.reason, diff)
			}
		})
	}
	if got := listInstances(many); !strings.HasSuffix(got, "fake/110 (crawl-9), and 2 more") {
		t.Errorf("listInstances of 12 = %q, want ten named and 2 more", got)
	}
}
