// Package metrics defines the operator's Prometheus metrics. They are
// registered on controller-runtime's registry and served on its metrics
// endpoint together with the controller and workqueue metrics.
package metrics
