package proxmox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"regexp"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Texts of the API matched whole (F2, F4, F5, F7).
var (
	reLocked    = regexp.MustCompile(`^VM is locked \([a-z-]+\)$`)
	reMissingVM = regexp.MustCompile(`^Configuration file 'nodes/[^/]+/qemu-server/\d+\.conf' does not exist$`)
	reVMIDTaken = regexp.MustCompile(`^unable to create VM \d+: config file already exists$`)
	reNotRunVM  = regexp.MustCompile(`^VM \d+ is not running$`)
)

// F5 messages of the agent endpoint.
const (
	msgAgentNotRunning    = "QEMU guest agent is not running"
	msgAgentNotConfigured = "No QEMU guest agent configured"
)

func apiErr(err error) (*APIError, bool) {
	var ae *APIError
	ok := errors.As(err, &ae)
	return ae, ok
}

func isMissingVM(err error) bool {
	ae, ok := apiErr(err)
	return ok && ae.Status >= 500 && reMissingVM.MatchString(ae.Message)
}

func isVMIDTaken(err error) bool {
	ae, ok := apiErr(err)
	return ok && reVMIDTaken.MatchString(ae.Message)
}

// isTLSVerify reports a certificate verification failure.
func isTLSVerify(err error) bool {
	var ua x509.UnknownAuthorityError
	var ci x509.CertificateInvalidError
	var he x509.HostnameError
	var cv *tls.CertificateVerificationError
	return errors.As(err, &ua) || errors.As(err, &ci) || errors.As(err, &he) || errors.As(err, &cv)
}

// classify wraps err with what was being done and gives it its class
// (error classes in docs/proxmox-behaviour.md).
func classify(what string, err error) error {
	if err == nil {
		return nil
	}
	werr := fmt.Errorf("%s: %w", what, err)
	var ce *CredentialsError
	var ca *CAError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return provider.NewTransient(werr)
	case errors.As(err, &ce):
		if ce.Missing {
			return provider.NewTransient(werr)
		}
		return provider.NewPermanent(werr, "write the API token as one line user@realm!tokenid=secret into the token file")
	case errors.As(err, &ca):
		if ca.Missing {
			return provider.NewTransient(werr)
		}
		return provider.NewPermanent(werr, "put the PEM certificate of the CA that signed the API certificate into caFile")
	case isTLSVerify(err):
		return provider.NewPermanent(werr, "give the CA of the API certificate in caFile and an apiURL that matches a name in the certificate")
	}
	if ae, ok := apiErr(err); ok {
		switch {
		case isMissingVM(err):
			return provider.NewNotFound(werr)
		case ae.Status == 400:
			return provider.NewPermanent(werr, "fix the configuration or template the API refused")
		// 401 and 403 are refusals: brief during a token rotation or an
		// ACL edit, so a read retries while a create latches (see
		// provider.ReasonRefused).
		case ae.Status == 401:
			return provider.NewRefused(werr, "check the API token in the token file (user, token id and secret)")
		case ae.Status == 403:
			return provider.NewRefused(werr, "grant the token the privilege named in the message (see docs/proxmox.md)")
		}
		// 5xx, 595 (no response), 596 (connection error), locks.
		return provider.NewTransient(werr)
	}
	return provider.NewTransient(werr)
}

// Reasons of the proxmox provider's verdicts (health check in docs/proxmox-behaviour.md).
const (
	ReasonReachable              = "Reachable"
	ReasonUnreachable            = "Unreachable"
	ReasonTimeout                = "Timeout"
	ReasonCertificateInvalid     = "CertificateInvalid"
	ReasonCredentialsUnavailable = "CredentialsUnavailable"
	ReasonUnauthorized           = "Unauthorized"
	ReasonForbidden              = "Forbidden"
	ReasonStorageNotFound        = "StorageNotFound"
	ReasonTemplateNotFound       = "TemplateNotFound"
	ReasonAPIError               = "APIError"
)

// reasonFor maps an API call's error to a verdict reason.
func reasonFor(err error) string {
	var ce *CredentialsError
	var ca *CAError
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.As(err, &ce):
		return ReasonCredentialsUnavailable
	case errors.As(err, &ca), isTLSVerify(err):
		return ReasonCertificateInvalid
	case errors.As(err, &oe) && oe.Op == "dial":
		// A dial that fails, timed out included, never reached the API:
		// the host is down or filtered, not slow.
		return ReasonUnreachable
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout
	}
	if ae, ok := apiErr(err); ok {
		switch ae.Status {
		case 595, 596:
			return ReasonUnreachable
		case 401:
			return ReasonUnauthorized
		case 403:
			return ReasonForbidden
		}
		return ReasonAPIError
	}
	if errors.As(err, &oe) {
		return ReasonUnreachable
	}
	return ReasonAPIError
}
