package controller

import (
	"context"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
)

// Defaults of the probe through the proxy.
const (
	DefaultProbeInterval         = 30 * time.Second
	DefaultProbeFailureThreshold = 3
)

// Event reasons of the probe.
const (
	eventProbeFailed = "ProbeFailed"
	eventServing     = "Serving"
)

// probeOutcome is what one probe of this reconcile found.
type probeOutcome struct {
	result probe.Result
	err    error
}

// probeDue reports whether a Ready proxy is due for a probe, and when the
// next one is due otherwise. The last probe is the later of the status's
// and this process's record: a routine probe is not always written
// (routineProbe).
func (r *ProxyReconciler) probeDue(key types.NamespacedName, s crawlv1alpha1.ProxyStatus) (bool, time.Duration) {
	if r.Prober == nil {
		return false, 0
	}
	if s.LastProbeTime == nil || s.Phase != crawlv1alpha1.ProxyPhaseReady {
		return true, 0
	}
	last := s.LastProbeTime.Time
	if t, ok := r.probed.Load(key); ok && t.After(last) {
		last = t
	}
	next := last.Add(r.ProbeInterval).Sub(r.Now())
	return next <= 0, next
}

// runProbe probes the proxy at address through itself, with its
// credentials. It is called only for a running instance with an address,
// at most once per reconcile, and never holds a provider lock. With the
// manager running, the probe runs off the reconcile workers (probeRuns):
// this call starts it and returns nil, and the reconcile that its end
// wakes takes the outcome. Without one (a reconciler driven by hand) the
// probe runs here.
func (r *ProxyReconciler) runProbe(ctx context.Context, p *crawlv1alpha1.Proxy, entry *config.Entry, creds *credentials, address string) *probeOutcome {
	t := probe.Target{
		Address:   net.JoinHostPort(address, strconv.Itoa(int(p.Spec.Port))),
		CheckURL:  entry.Probe.CheckURL,
		DeniedURL: entry.Probe.DeniedURL,
	}
	if creds != nil {
		t.Username, t.Password = creds.username, creds.password
	}
	if r.probes != nil {
		key := client.ObjectKeyFromObject(p)
		if e, ok := r.probes.take(key, t.Address); ok {
			return r.probeEnded(p, e.result, e.err)
		}
		if r.probes.start(key, t) { //nolint:contextcheck // the probe outlives this reconcile: it runs with the manager's context (probeRuns.Start).
			return nil
		}
	}
	res, err := r.Prober.Probe(ctx, t)
	return r.probeEnded(p, res, err)
}

// probeEnded counts a probe's outcome and announces a change of it.
func (r *ProxyReconciler) probeEnded(p *crawlv1alpha1.Proxy, res probe.Result, err error) *probeOutcome {
	if r.Metrics != nil {
		if err != nil {
			r.Metrics.ProbeFailures.WithLabelValues(p.Spec.Provider).Inc()
		} else {
			r.Metrics.ProbeDuration.WithLabelValues(p.Spec.Provider).Observe(res.Latency.Seconds())
		}
	}
	out := &probeOutcome{result: res, err: err}
	serving := servingCondition(p.Status)
	switch {
	case err != nil && (serving == nil || serving.Reason != crawlv1alpha1.ReasonProbeFailing && serving.Reason != crawlv1alpha1.ReasonProbeFailed):
		r.event(p, corev1.EventTypeWarning, eventProbeFailed, "Probe", "Probe through the proxy failed: %v", err)
	case err == nil && (serving == nil || serving.Reason != crawlv1alpha1.ReasonProbePassed):
		r.event(p, corev1.EventTypeNormal, eventServing, "Probe", "Probe through the proxy passed in %s", res.Latency.Round(time.Millisecond))
	}
	return out
}

func servingCondition(s crawlv1alpha1.ProxyStatus) *metav1.Condition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == crawlv1alpha1.ConditionServing {
			return &s.Conditions[i]
		}
	}
	return nil
}
