package pvesim

import (
	"crypto/subtle"
	"net/http"
	"regexp"
	"strings"
)

// principal is an authenticated API token.
type principal struct {
	// user is "<user>@<realm>", token the token id.
	user, token string
	// acl maps ACL paths to privilege sets.
	acl map[string]map[string]bool
}

// newPrincipal builds a principal from a token configuration.
func newPrincipal(tc TokenConfig) *principal {
	user, token, _ := splitTokenID(tc.ID)
	p := &principal{user: user, token: token, acl: map[string]map[string]bool{}}
	for _, e := range tc.ACL {
		path := "/" + strings.Trim(e.Path, "/")
		set := p.acl[path]
		if set == nil {
			set = map[string]bool{}
			p.acl[path] = set
		}
		for _, pr := range e.Privileges {
			set[pr] = true
		}
	}
	return p
}

// has reports whether the principal holds priv on path. As on Proxmox, the
// ACL on the most specific path covering it replaces the inherited ones
// (setup facts in docs/proxmox-behaviour.md).
func (p *principal) has(path, priv string) bool {
	path = "/" + strings.Trim(path, "/")
	for {
		if set, ok := p.acl[path]; ok {
			return set["*"] || set[priv]
		}
		if path == "/" {
			return false
		}
		i := strings.LastIndexByte(path, '/')
		if i <= 0 {
			path = "/"
		} else {
			path = path[:i]
		}
	}
}

// tokenSecretPattern is the shape of the secrets Proxmox generates: a
// lowercase UUID.
var tokenSecretPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// isTokenSecret reports whether s has the shape of a token secret.
func isTokenSecret(s string) bool { return tokenSecretPattern.MatchString(s) }

// tokenEntry is a configured token with its secret.
type tokenEntry struct {
	secret string
	p      *principal
}

// authenticate checks the Authorization header (F22). It returns the
// principal or the 401 to answer: "No ticket" without credentials,
// "Authentication failed!" for a wrong secret or an unknown token.
func (s *Sim) authenticate(r *http.Request) (*principal, *apiError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, &apiError{status: http.StatusUnauthorized, message: msgNoTicket}
	}
	failed := &apiError{status: http.StatusUnauthorized, message: msgAuthFailed}
	rest, ok := strings.CutPrefix(h, "PVEAPIToken=")
	if !ok {
		// F22: a header that carries no token is "No ticket" too, as is a
		// missing one; a malformed token value is an authentication failure.
		if strings.HasPrefix(h, "PVEAPIToken") {
			return nil, failed
		}
		return nil, &apiError{status: http.StatusUnauthorized, message: msgNoTicket}
	}
	id, secret, ok := strings.Cut(strings.TrimSpace(rest), "=")
	if !ok || !isTokenSecret(secret) {
		// A real host refuses a secret that is not a lowercase UUID as it
		// refuses a wrong one (F22), before looking at the token id.
		return nil, failed
	}
	s.mu.Lock()
	te, found := s.tokens[id]
	s.mu.Unlock()
	if !found || subtle.ConstantTimeCompare([]byte(te.secret), []byte(secret)) != 1 {
		return nil, failed
	}
	return te.p, nil
}
