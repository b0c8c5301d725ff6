package controller_test

import (
	"context"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// eventsList lists events.k8s.io/v1 Events of a namespace.
type eventsList struct {
	eventsv1.EventList
}

func (l *eventsList) load(ns string) error {
	return k8s.List(context.Background(), &l.EventList, client.InNamespace(ns))
}
