package provider

import (
	"errors"
	"fmt"
	"time"
)

// Class says what the operator should do about a provider error.
type Class string

const (
	// ClassTransient errors may pass by themselves (network, busy API, lock,
	// node briefly unreachable): the operator retries with capped exponential
	// backoff and shows the error in the Proxy's Ready condition meanwhile.
	ClassTransient Class = "Transient"
	// ClassPermanent errors need a human (missing permission, template or
	// storage; invalid configuration the API rejects): the operator latches
	// the Proxy in phase Failed with the error and the admin action, and stops
	// retrying until the spec changes or the retry annotation is set.
	ClassPermanent Class = "Permanent"
	// ClassNotFound means the instance does not exist. From Get it makes the
	// operator replace the instance; Delete never returns it (a missing
	// instance is deleted already).
	ClassNotFound Class = "NotFound"
	// ClassInProgress is not a failure: the provider started a step that takes
	// time and asks to be called again with the same arguments after
	// RetryAfter. The operator requeues without holding a worker.
	ClassInProgress Class = "InProgress"
)

// Reason refines a Class. Only Transient errors carry one today.
type Reason string

// ReasonRefused marks a Transient error for which the provider's API refused
// the operator's credentials or permissions (HTTP 401 or 403, a Kubernetes
// Forbidden). On a read (Get, ListByTag) it is usually brief (a token being
// rotated, an ACL being edited) and says nothing about the instance: the
// operator keeps the last known status, says so in a condition and in
// ProviderHealth, and retries. On Create, or the Delete of a replacement, a
// person must act, so the operator latches the Proxy as if the error were
// Permanent, with Action as the advice.
const ReasonRefused Reason = "Refused"

// ReasonDeadline marks a Transient error for a call that did not return
// within its deadline (the entry's deadlines, config.Deadlines): the
// provider hangs or crawls. The operator gives up the call, keeps the last
// known status and retries with backoff.
const ReasonDeadline Reason = "Deadline"

// NewDeadline classifies a call that passed its deadline d as Transient
// with ReasonDeadline; the decorator adds the entry and the operation.
func NewDeadline(d time.Duration) error {
	return &Error{Class: ClassTransient, Reason: ReasonDeadline,
		Err: fmt.Errorf("no answer within the deadline of %s (deadlines in the entry of the providers configuration); the provider hangs or is overloaded", d)}
}

// IsDeadline reports whether err is a Transient error with ReasonDeadline.
func IsDeadline(err error) bool { return IsTransient(err) && ReasonOf(err) == ReasonDeadline }

// Op names a provider operation, for errors, logs, spans and metrics.
type Op string

// The operations of the Provider, Checker, Sweeper and UnverifiedLister
// interfaces.
const (
	OpCreate     Op = "create"
	OpGet        Op = "get"
	OpDelete     Op = "delete"
	OpListByTag  Op = "list"
	OpCheck      Op = "check"
	OpSweep      Op = "sweep"
	OpUnverified Op = "unverified"
)

// Error is a classified provider error. Providers build it with NewTransient,
// NewPermanent, NewNotFound and NewInProgress; the operator's decorator fills
// in Provider, Op and ID, so that every error that reaches a log or a status
// names the entry, the operation and, when known, the instance.
type Error struct {
	// Class says what to do about the error.
	Class Class
	// Reason refines Class (see ReasonRefused); empty for most errors.
	Reason Reason
	// Provider is the name of the configured entry.
	Provider string
	// Op is the operation that failed.
	Op Op
	// ID is the instance, when known.
	ID ID
	// Action tells an administrator what to do, for Permanent errors; it is
	// shown in the Proxy's Ready condition.
	Action string
	// RetryAfter is how long to wait before calling again, for InProgress
	// errors (and optionally Transient ones, when the API said so).
	RetryAfter time.Duration
	// Err is the underlying cause. Its text must hold no secret.
	Err error
}

// Error returns a lower-case message of the form
// `provider "lab": create "pve1/104": <cause>`.
func (e *Error) Error() string {
	msg := ""
	if e.Provider != "" {
		msg = fmt.Sprintf("provider %q: ", e.Provider)
	}
	if e.Op != "" {
		msg += string(e.Op)
		if e.ID != "" {
			msg += fmt.Sprintf(" %q", string(e.ID))
		}
		msg += ": "
	}
	cause := "unknown error"
	if e.Err != nil {
		cause = e.Err.Error()
	}
	return msg + cause
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// NewTransient classifies err as Transient: retry with backoff.
func NewTransient(err error) error {
	return &Error{Class: ClassTransient, Err: err}
}

// NewRefused classifies err as Transient with ReasonRefused: the API refused
// the credentials or permissions. action says what an administrator must fix
// if the refusal lasts (for example "grant the token VM.Audit on /vms").
func NewRefused(err error, action string) error {
	return &Error{Class: ClassTransient, Reason: ReasonRefused, Err: err, Action: action}
}

// NewPermanent classifies err as Permanent: a human must act. action says
// what to do, in a sentence (for example "grant the token VM.Clone on
// /vms/9000").
func NewPermanent(err error, action string) error {
	return &Error{Class: ClassPermanent, Err: err, Action: action}
}

// NewNotFound classifies err as NotFound: the instance does not exist.
func NewNotFound(err error) error {
	return &Error{Class: ClassNotFound, Err: err}
}

// NewInProgress says that a step is under way and the call must be repeated
// after the given delay. step says what is under way, for the Proxy's status
// (for example "waiting for clone task").
func NewInProgress(step string, after time.Duration) error {
	return &Error{Class: ClassInProgress, Err: errors.New(step), RetryAfter: after}
}

// ClassOf returns the class of err: the class of the first *Error in its
// chain, Transient for any other non-nil error (an unclassified failure is
// assumed to be passing), and "" for nil.
func ClassOf(err error) Class {
	if err == nil {
		return ""
	}
	var pe *Error
	if errors.As(err, &pe) && pe.Class != "" {
		return pe.Class
	}
	return ClassTransient
}

// IsTransient reports whether err is a Transient error (or unclassified).
func IsTransient(err error) bool { return ClassOf(err) == ClassTransient }

// IsPermanent reports whether err is a Permanent error.
func IsPermanent(err error) bool { return ClassOf(err) == ClassPermanent }

// IsNotFound reports whether err is a NotFound error.
func IsNotFound(err error) bool { return ClassOf(err) == ClassNotFound }

// IsInProgress reports whether err is an InProgress notice.
func IsInProgress(err error) bool { return ClassOf(err) == ClassInProgress }

// IsRefused reports whether err is a Transient error with ReasonRefused.
func IsRefused(err error) bool { return IsTransient(err) && ReasonOf(err) == ReasonRefused }

// ReasonOf returns the reason of the first *Error in err's chain, or "".
func ReasonOf(err error) Reason {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return ""
}

// ActionOf returns the administrator action of a Permanent or Refused
// error, or "".
func ActionOf(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Action
	}
	return ""
}

// RetryAfterOf returns the delay an error asks for before the next call, or
// zero when it asks for none.
func RetryAfterOf(err error) time.Duration {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.RetryAfter
	}
	return 0
}

// Annotate returns err with the entry, operation and instance filled in,
// classifying an unclassified error as Transient. A provider's own *Error
// keeps its class, action and delay. It returns nil for nil, and err itself
// when it already names its entry.
func Annotate(err error, providerName string, op Op, id ID) error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) && pe.Provider != "" {
		return err
	}
	out := &Error{Class: ClassOf(err), Reason: ReasonOf(err), Provider: providerName, Op: op, ID: id,
		Action: ActionOf(err), RetryAfter: RetryAfterOf(err), Err: err}
	if pe != nil && err == error(pe) { //nolint:errorlint // identity, not matching: is err the *Error itself, with nothing wrapped around it?
		// Fold the provider's bare *Error into the annotated one, so that
		// its cause is not printed twice.
		out.Err = pe.Err
		if pe.Op != "" {
			out.Op = pe.Op
		}
		if pe.ID != "" {
			out.ID = pe.ID
		}
	}
	return out
}
