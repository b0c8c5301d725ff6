package config

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Deadlines bound each provider call of an entry (the `deadlines` key): a
// call that has not returned by then is given up as Transient, so that a
// hypervisor that hangs while its connection stays up holds no worker for
// good. Unset fields take the defaults below.
type Deadlines struct {
	// Create bounds one Create call (one step of a create: the provider
	// returns InProgress between steps).
	Create *metav1.Duration `json:"create,omitempty"`
	// Get bounds one Get call.
	Get *metav1.Duration `json:"get,omitempty"`
	// Delete bounds one Delete call (one step of a delete).
	Delete *metav1.Duration `json:"delete,omitempty"`
	// List bounds one ListByTag call (garbage collection, deletes whose
	// instance ID was never recorded).
	List *metav1.Duration `json:"list,omitempty"`
	// Check bounds one health check of the entry.
	Check *metav1.Duration `json:"check,omitempty"`
	// Sweep bounds one sweep of what deleted instances left behind.
	Sweep *metav1.Duration `json:"sweep,omitempty"`
}

// Default deadlines: far above what a healthy provider takes on a loaded
// machine (docs/performance.md), far below "for good".
const (
	DefaultCreateDeadline = 2 * time.Minute
	DefaultGetDeadline    = 30 * time.Second
	DefaultDeleteDeadline = 2 * time.Minute
	DefaultListDeadline   = time.Minute
	DefaultCheckDeadline  = 30 * time.Second
	DefaultSweepDeadline  = 2 * time.Minute
)

// Bounds of a configured deadline, to catch a unit mistaken (ms for s).
const (
	minDeadline = time.Second
	maxDeadline = time.Hour
)

// deadlineOps lists the operations, by the names provider.Op gives them,
// with their field and default.
func (d *Deadlines) deadlineOps() []struct {
	op  string
	v   *metav1.Duration
	def time.Duration
} {
	return []struct {
		op  string
		v   *metav1.Duration
		def time.Duration
	}{
		{"create", d.Create, DefaultCreateDeadline},
		{"get", d.Get, DefaultGetDeadline},
		{"delete", d.Delete, DefaultDeleteDeadline},
		{"list", d.List, DefaultListDeadline},
		{"check", d.Check, DefaultCheckDeadline},
		{"sweep", d.Sweep, DefaultSweepDeadline},
	}
}

// For returns the deadline of the operation op (a provider.Op: "create",
// "get", "delete", "list", "check", "sweep"), defaulted; zero for an
// operation it does not know.
func (d *Deadlines) For(op string) time.Duration {
	for _, o := range d.deadlineOps() {
		if o.op == op {
			return DurationOr(o.v, o.def)
		}
	}
	return 0
}

func (d *Deadlines) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, o := range d.deadlineOps() {
		if o.v == nil {
			continue
		}
		if o.v.Duration < minDeadline || o.v.Duration > maxDeadline {
			errs = append(errs, field.Invalid(path.Child(o.op), o.v.Duration.String(),
				fmt.Sprintf("must be between %s and %s, or unset for %s", minDeadline, maxDeadline, o.def)))
		}
	}
	return errs
}
