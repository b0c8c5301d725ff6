package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// liveReader is the API server as isCurrent sees it: one Proxy at a
// version, or an error; it counts the reads.
type liveReader struct {
	version string
	err     error
	reads   int
}

func (l *liveReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	l.reads++
	if l.err != nil {
		return l.err
	}
	p, ok := obj.(*crawlv1alpha1.Proxy)
	if !ok {
		return fmt.Errorf("isCurrent read a %T, not a Proxy", obj)
	}
	p.Namespace, p.Name, p.ResourceVersion = key.Namespace, key.Name, l.version
	return nil
}

func (l *liveReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("isCurrent never lists")
}

func TestIsCurrent(t *testing.T) {
	key := types.NamespacedName{Namespace: "crawl", Name: "p"}
	type result struct {
		Current bool
		Err     bool
		Reads   int
	}
	cases := map[string]struct {
		reason      string
		lastWritten string // "" remembers nothing, as after a restart
		cached      string
		live        string
		liveErr     error
		want        result
	}{
		"Cache at our last write": {
			reason:      "the cached copy has seen every write of ours: no request to the API server",
			lastWritten: "12", cached: "12", live: "12",
			want: result{Current: true},
		},
		"Cache behind our last write": {
			reason:      "the cache has not seen the status that records the instance yet: a create now would be a second one",
			lastWritten: "12", cached: "11", live: "12",
			want: result{Current: false, Reads: 1},
		},
		"Nothing remembered, cache current": {
			reason: "after a restart the last write may be a previous process's: read live",
			cached: "12", live: "12",
			want: result{Current: true, Reads: 1},
		},
		"Nothing remembered, cache stale": {
			reason: "after a restart a cache behind the API server is caught by the live read",
			cached: "11", live: "12",
			want: result{Current: false, Reads: 1},
		},
		"Live read fails": {
			reason:      "a guard that cannot read does not let the create through",
			lastWritten: "10", cached: "11", liveErr: errors.New("connection refused"),
			want: result{Err: true, Reads: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			live := &liveReader{version: tc.live, err: tc.liveErr}
			r := &ProxyReconciler{APIReader: live}
			if tc.lastWritten != "" {
				r.written.record(key, tc.lastWritten)
			}
			p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, ResourceVersion: tc.cached}}
			current, err := r.isCurrent(context.Background(), p)
			got := result{Current: current, Err: err != nil, Reads: live.reads}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\n(-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// TestReadyCredentialsHoldNoSecret: the credentials held between the looks
// at a Ready proxy are the names and the pair, not the decoded Secret they
// came from (2 KiB each, 20 MiB at 10 000 proxies). The caller's own copy
// keeps its Secret: the reconcile that read it may still write the URL.
func TestReadyCredentialsHoldNoSecret(t *testing.T) {
	var c readyCredentials
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	read := &credentials{secretName: "p-proxy-credentials", username: "u", password: "pw",
		secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "p-proxy-credentials", Namespace: "ns"}}}
	now := time.Unix(1000, 0)
	c.put(key, "uid-1", 1, "198.51.100.7", read, now)
	got, ok := c.get(key, "uid-1", 1, "198.51.100.7", now, time.Minute)
	if !ok {
		t.Fatal("nothing held right after put")
	}
	if diff := cmp.Diff(credentials{secretName: "p-proxy-credentials", username: "u", password: "pw"}, *got, cmp.AllowUnexported(credentials{})); diff != "" {
		t.Errorf("held credentials (-want +got):\n%s", diff)
	}
	if read.secret == nil {
		t.Error("put took the Secret from the caller's credentials")
	}
}
