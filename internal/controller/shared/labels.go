package shared

import "time"

// LabelManagedBy, with the value LabelManagedByValue, is on every object
// the operator makes; the manager caches ConfigMaps and the gateways'
// objects only when they carry it (controller.CacheOptions).
const (
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	LabelManagedByValue = "egress-proxies-operator"
)

// CacheDelay is how long a loop waits before it looks again at an object
// its cache has not caught up with (one it made moments ago), and after a
// status patch that conflicted with a newer write.
const CacheDelay = 100 * time.Millisecond
