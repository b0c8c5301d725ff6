package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strings"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// The gateway's own credentials: a client authenticates with them (Basic,
// on Proxy-Authorization), never with a member's, and the options it asks
// for (a session, pools, a zone) follow the username after dashes.

// credentials are the gateway's own, kept as digests (see
// forwardproxy's basicAuth).
type credentials struct {
	user, pass [sha256.Size]byte
	userLen    int
}

type routeKey struct{}

// Authorize implements forwardproxy.Upstream: the gateway's credentials,
// then the options after the username (see parseOptions). Credentials are
// checked first, so that a client without them learns nothing of the
// options.
func (g *Gateway) Authorize(ctx context.Context, value string) (context.Context, error) {
	user, pass, ok := parseBasic(value)
	// The username proper ends at the first dash; options follow.
	base, opts, hasOpts := strings.Cut(user, "-")
	if g.auth != nil {
		if !ok {
			return ctx, errBadCredentials
		}
		u, p := sha256.Sum256([]byte(base)), sha256.Sum256([]byte(pass))
		if subtle.ConstantTimeCompare(u[:], g.auth.user[:])&subtle.ConstantTimeCompare(p[:], g.auth.pass[:]) != 1 {
			return ctx, errBadCredentials
		}
	}
	rest := ""
	if hasOpts {
		rest = "-" + opts
	}
	rt, err := parseOptions(rest)
	if err != nil {
		return ctx, err
	}
	rt.client = forwardproxy.ClientAddr(ctx)
	return context.WithValue(ctx, routeKey{}, rt), nil
}

var errBadCredentials = errors.New("wrong or missing gateway credentials")

// parseBasic decodes a Proxy-Authorization Basic value.
func parseBasic(value string) (user, pass string, ok bool) {
	scheme, encoded, ok := strings.Cut(strings.TrimSpace(value), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}
