package libvirt

import (
	"context"
	"errors"
	"fmt"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Reasons of a libvirt host's entry in ProviderHealth.status.targets, for
// the provider types kvm2 and kvm. Each host gets exactly one; they are
// checked in this order, so the first failure is the one reported.
// docs/libvirt.md says what to do about each.
const (
	// ReasonOK (healthy): SSH and libvirt answer, the storage pool and the
	// network are active and every image's base volume is in the pool.
	ReasonOK = "OK"
	// ReasonUnreachable: no TCP connection or SSH handshake with the host
	// (down, firewalled, wrong address or port).
	ReasonUnreachable = "Unreachable"
	// ReasonHostKeyMismatch: the host's SSH key is not the one the
	// known_hosts file lists for it (or the host is not listed); the
	// operator sent nothing.
	ReasonHostKeyMismatch = "HostKeyMismatch"
	// ReasonAuthenticationFailed: the host refused the operator's key, or
	// the key file cannot be read.
	ReasonAuthenticationFailed = "AuthenticationFailed"
	// ReasonLibvirtUnavailable: SSH works but libvirt does not answer on its
	// socket (daemon stopped, socket path wrong, user not allowed).
	ReasonLibvirtUnavailable = "LibvirtUnavailable"
	// ReasonPoolNotFound: the configured storage pool is missing or not
	// started.
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonNetworkNotFound: the configured libvirt network is missing or
	// not started.
	ReasonNetworkNotFound = "NetworkNotFound"
	// ReasonImageNotFound: an image's base volume is not in the pool.
	ReasonImageNotFound = "ImageNotFound"
)

// HostError is a failure to reach a host or its libvirt, with the verdict
// reason it stands for.
type HostError struct {
	// Host is the configured host name.
	Host string
	// Reason is one of the Reason constants.
	Reason string
	// Err is the cause; it holds no secret.
	Err error
}

// Error returns `host kvm1: <cause>`.
func (e *HostError) Error() string { return fmt.Sprintf("host %s: %v", e.Host, e.Err) }

// Unwrap returns the cause.
func (e *HostError) Unwrap() error { return e.Err }

func hostErr(host, reason string, err error) error {
	return &HostError{Host: host, Reason: reason, Err: err}
}

// Errors a driver returns for objects that do not exist, whatever the
// transport said.
var (
	errNoDomain  = errors.New("domain not found")
	errNoVolume  = errors.New("volume not found")
	errNoPool    = errors.New("storage pool not found")
	errNoNetwork = errors.New("network not found")
	errNoAgent   = errors.New("guest agent not answering")
	errInactive  = errors.New("object is not active")
)

// reasonOf is the verdict reason of an error of a host operation.
func reasonOf(err error) string {
	var he *HostError
	switch {
	case errors.As(err, &he):
		return he.Reason
	case errors.Is(err, errNoPool):
		return ReasonPoolNotFound
	case errors.Is(err, errNoNetwork):
		return ReasonNetworkNotFound
	case errors.Is(err, errNoVolume):
		return ReasonImageNotFound
	}
	return ReasonLibvirtUnavailable
}

// classify wraps err with what was being done and gives it its class. A
// host that cannot be reached is Transient; a host key or key problem needs
// a human, as does a missing pool, network or image. Failures while staging
// (temporary space, uploads) are Transient: they pass.
func classify(what string, err error) error {
	if err == nil {
		return nil
	}
	werr := fmt.Errorf("%s: %w", what, err)
	var he *HostError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return provider.NewTransient(werr)
	case errors.As(err, &he):
		switch he.Reason {
		case ReasonHostKeyMismatch:
			return provider.NewPermanent(werr, "put the host's current SSH host key into the known_hosts file (ssh-keyscan, checked out of band); see docs/libvirt.md")
		case ReasonAuthenticationFailed:
			return provider.NewPermanent(werr, "authorise the kvm-ssh public key for the host's user and check the key file; see docs/libvirt.md")
		}
		return provider.NewTransient(werr)
	case errors.Is(err, errNoPool):
		return provider.NewPermanent(werr, "define and start the storage pool on the host, or fix pool in the entry")
	case errors.Is(err, errNoNetwork):
		return provider.NewPermanent(werr, "define and start the libvirt network on the host, or fix network in the entry")
	}
	return provider.NewTransient(werr)
}
