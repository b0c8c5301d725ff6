package controller_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// eventsList lists events.k8s.io/v1 Events of a namespace.
type eventsList struct {
	eventsv1.EventList
}

func (l *eventsList) load(ns string) error {
	return k8s.List(context.Background(), &l.EventList, client.InNamespace(ns))
}

// TestEventNoteLimitIsTheAPIServers: the recorder cuts notes to 1024 bytes
// (maxEventNote, message.go) because that is where the API server starts
// refusing them, and a refused event is lost.
func TestEventNoteLimitIsTheAPIServers(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	for _, tc := range []struct {
		size   int
		reason string
		refuse bool
	}{
		{size: 1024, reason: "a note cut to the limit must be accepted"},
		{size: 1025, reason: "one byte more is refused: the limit is not higher than the recorder assumes", refuse: true},
	} {
		e := &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "note-limit-"},
			EventTime:  metav1.NowMicro(), ReportingController: "crawl.example.com/test", ReportingInstance: "test",
			Action: "Test", Reason: "Test", Type: corev1.EventTypeNormal,
			Regarding: corev1.ObjectReference{Kind: "ProviderHealth", Name: "lab", APIVersion: "crawl.example.com/v1alpha1"},
			Note:      strings.Repeat("x", tc.size),
		}
		err := k8s.Create(ctx, e)
		if refused := apierrors.IsInvalid(err); refused != tc.refuse || (err != nil && !refused) {
			t.Errorf("note of %d bytes: err = %v: %s", tc.size, err, tc.reason)
		}
		if err == nil {
			_ = k8s.Delete(ctx, e)
		}
	}
}
