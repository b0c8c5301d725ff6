package setup

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
)

// GatewayEventSource is the reporting controller of a gateway replica's
// events; each replica reports as <source>-<pod name>.
const GatewayEventSource = "egress-proxies-gateway"

// ReasonMemberEjected is the reason of the Warning event a gateway replica
// records on a member's Proxy when it ejects the member.
const ReasonMemberEjected = "MemberEjected"

// gatewayEvents records what a replica decides alone, its ejections, as
// events on the member's Proxy (related to the ProxyGateway when
// --gateway names it), so that `kubectl describe proxy` and `kubectl get
// events` show them beside the operator's. Recording never blocks a
// request: events are queued, and dropped when the queue is full.
type gatewayEvents struct {
	broadcaster events.EventBroadcaster
	recorder    events.EventRecorder
	namespace   string
	related     runtime.Object // the ProxyGateway; nil without --gateway
}

// startGatewayEvents starts recording to the API server until ctx is done
// or stop is called.
func startGatewayEvents(ctx context.Context, cs kubernetes.Interface, namespace, gatewayName string) (*gatewayEvents, error) {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		return nil, err
	}
	e := &gatewayEvents{broadcaster: b, recorder: b.NewRecorder(clientgoscheme.Scheme, GatewayEventSource), namespace: namespace}
	if gatewayName != "" {
		e.related = &corev1.ObjectReference{APIVersion: crawlv1alpha1.GroupVersion.String(), Kind: "ProxyGateway", Namespace: namespace, Name: gatewayName}
	}
	return e, nil
}

// ejected records a member's ejection.
func (e *gatewayEvents) ejected(m *gateway.Member, cause string, until time.Time, failures int) {
	regarding := &corev1.ObjectReference{APIVersion: crawlv1alpha1.GroupVersion.String(), Kind: "Proxy", Namespace: e.namespace, Name: m.Name}
	e.recorder.Eventf(regarding, e.related, corev1.EventTypeWarning, ReasonMemberEjected, "Eject",
		"A gateway replica ejected member %s of pool %s after %d failures in a row (the last: %s): it gets no new request or tunnel from this replica until %s; the pool's probe still decides whether it stays a member",
		m.Name, m.Pool, failures, cause, until.UTC().Format(time.RFC3339))
}

// stop stops recording; events still queued may be lost.
func (e *gatewayEvents) stop() { e.broadcaster.Shutdown() }
