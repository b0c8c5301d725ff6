package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

func TestDecideRequeue(t *testing.T) {
	iv := intervals{poll: 10 * time.Second, resync: 5 * time.Minute}
	transient := provider.NewTransient(errors.New("node unreachable"))
	permanent := provider.NewPermanent(errors.New("no such template"), "fix the template")
	type args struct {
		obs observation
	}
	cases := map[string]struct {
		reason string
		args   args
		want   requeue
	}{
		"Invalid spec": {
			reason: "a spec that does not resolve waits for the user's edit, which is an event",
			args:   args{obs: observation{specErr: errors.New("no zone"), wait: waitEvent}},
			want:   requeue{},
		},
		"Instance coming up": {
			reason: "an instance that is not Ready yet is polled",
			args:   args{obs: observation{wait: waitPoll}},
			want:   requeue{after: iv.poll},
		},
		"Instance due sooner than the poll": {
			reason: "a provider that knows when its guest answers (the agent's boot time) gets the look then, not up to a poll later",
			args:   args{obs: observation{wait: waitPoll, instance: &provider.Instance{RecheckAfter: 2 * time.Second}}},
			want:   requeue{after: 2 * time.Second},
		},
		"Instance due later than the poll": {
			reason: "a hint never delays a look: the provider reckons in its own time (a simulator's uptime runs faster than the wall clock), and the poll interval is what the administrator asked for",
			args:   args{obs: observation{wait: waitPoll, instance: &provider.Instance{RecheckAfter: 40 * time.Second}}},
			want:   requeue{after: iv.poll},
		},
		"Instance without a hint": {
			reason: "a provider that cannot tell leaves the look to the poll interval",
			args:   args{obs: observation{wait: waitPoll, instance: &provider.Instance{State: provider.StateProvisioning}}},
			want:   requeue{after: iv.poll},
		},
		"Ready": {
			reason: "a Ready instance is looked at again after the resync interval",
			args:   args{obs: observation{wait: waitResync}},
			want:   requeue{after: iv.resync},
		},
		"Ready with a probe due sooner": {
			reason: "the next probe of a Ready instance brings the look forward",
			args:   args{obs: observation{wait: waitResync, nextProbe: 30 * time.Second}},
			want:   requeue{after: 30 * time.Second},
		},
		"Ready with a probe due later": {
			reason: "a probe due after the resync does not delay the resync",
			args:   args{obs: observation{wait: waitResync, nextProbe: time.Hour}},
			want:   requeue{after: iv.resync},
		},
		"Replaced": {
			reason: "after clearing a dead instance the successor is created at once, through the queue",
			args:   args{obs: observation{wait: waitNextStep}},
			want:   requeue{after: nextStepDelay},
		},
		"Stale cache": {
			reason: "a cache behind the API server gets a moment to catch up",
			args:   args{obs: observation{wait: waitCache}},
			want:   requeue{after: cacheDelay},
		},
		"Successor waits out the replacement backoff": {
			reason: "a replaced instance's successor is created only after the backoff that grows with each replacement",
			args:   args{obs: observation{wait: waitReplacement, replacementWait: 40 * time.Second}},
			want:   requeue{after: 40 * time.Second},
		},
		"Replacement loop": {
			reason: "too many replacements stop the Proxy: only the retry annotation, an event, starts a new window",
			args:   args{obs: observation{wait: waitEvent, replacementLoop: "replaced 6 times"}},
			want:   requeue{},
		},
		"Create queued behind the entry's cap": {
			reason: "a create over the entry's concurrency cap waits for the slot's hand-off, which enqueues it; it does not poll, only the resync is a safety net",
			args:   args{obs: observation{wait: waitSlot, createQueued: 10}},
			want:   requeue{after: iv.resync},
		},
		"Refused read": {
			reason: "a 401/403 on a read is transient: the Proxy keeps its status and the read backs off",
			args:   args{obs: observation{providerErr: provider.NewRefused(errors.New("401 token expired"), "rotate the token"), wait: waitResync}},
			want:   requeue{backoff: true},
		},
		"In progress with a delay": {
			reason: "the provider knows when its task will be worth looking at",
			args:   args{obs: observation{providerErr: provider.NewInProgress("cloning", 3*time.Second), wait: waitPoll}},
			want:   requeue{after: 3 * time.Second},
		},
		"In progress without a delay": {
			reason: "an InProgress that names no delay is polled",
			args:   args{obs: observation{providerErr: provider.NewInProgress("cloning", 0)}},
			want:   requeue{after: iv.poll},
		},
		"Transient": {
			reason: "transient failures back off per Proxy",
			args:   args{obs: observation{providerErr: transient}},
			want:   requeue{backoff: true},
		},
		"Permanent": {
			reason: "a permanent failure is latched: only a human's change triggers the next look",
			args:   args{obs: observation{providerErr: permanent}},
			want:   requeue{},
		},
		"Permanent while deleting": {
			reason: "a finalizer must never wait behind a latch: deletion failures back off and retry",
			args:   args{obs: observation{providerErr: permanent, deleting: true}},
			want:   requeue{backoff: true},
		},
		"Unclassified delete failure": {
			reason: "an entry missing from the configuration during deletion is retried with backoff",
			args:   args{obs: observation{providerErr: errors.New("entry not configured"), deleting: true}},
			want:   requeue{backoff: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := decideRequeue(tc.args.obs, iv)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(requeue{})); diff != "" {
				t.Errorf("%s\ndecideRequeue(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestReconcileFollowsTheRecheckHint: a booting instance whose provider says
// when it is due (Instance.RecheckAfter, which the proxmox provider sets for
// the guest agent) is looked at then, through the reconcile's result, and
// not at the poll interval.
func TestReconcileFollowsTheRecheckHint(t *testing.T) {
	fp := fakeprovider.New(nil)
	fp.GetsUntilRunning, fp.RecheckAfter = 1, 3*time.Second
	p := unitProxy()
	c := crfake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(p).WithStatusSubresource(p).Build()
	r := &ProxyReconciler{Client: c, APIReader: c, Config: unitConfig(t), Providers: map[string]provider.Provider{"lab": fp}}
	r.defaults()
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)}
	// The first reconcile creates the instance (its ID at once) and has not
	// seen it yet; the second finds it booting, with the hint.
	want := []time.Duration{r.PollInterval, 3 * time.Second}
	var got []time.Duration
	for i := range want {
		res, err := r.Reconcile(context.Background(), req)
		if err != nil {
			t.Fatalf("reconcile %d: %v", i+1, err)
		}
		got = append(got, res.RequeueAfter)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requeue after each reconcile (-want +got):\n%s", diff)
	}
}
