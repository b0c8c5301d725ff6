package gateway

import (
	"strings"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
)

// Administrator's bans: an administrator (or a crawler team) bans a member
// from a destination host with kubectl egress ban, which writes the ban,
// with its expiry, into the ProxyGateway's spec.bans. Every gateway pod
// watches its ProxyGateway by name (gatewaywatch.WatchAdminBans) and honours the bans
// there as it honours those it learned (bans.go): the member gets no
// request or tunnel to that host until the ban expires, a session on it
// moves for that host only. The API server is the only state the replicas
// share: each pod holds the list the object had at its last event, replaced
// whole, so a lifted ban ends in every pod as soon as it sees the change.
// The API bounds the list (256 entries, validated names and hosts).

// causeAdmin is the cause label of an administrator's ban.
const causeAdmin = "admin"

// AdminBan is one entry of a ProxyGateway's spec.bans.
type AdminBan struct {
	// Pool and Member name the member (pool/name, as its pool lists it).
	Pool, Member string
	// Host is the destination host, lower case, without a port.
	Host string
	// Expires is when the ban ends.
	Expires time.Time
}

// adminEntry is an administrator's ban with its host, for the log: the
// administrator's, not a client's, so it is kept.
type adminEntry struct {
	ban
	host string
}

// SetAdminBans replaces the administrator's bans this gateway honours with
// bans (nil: none). A ban it did not hold before is counted
// (egress_proxies_gateway_bans_total, cause admin) and logged; an expired
// one is kept out.
func (g *Gateway) SetAdminBans(bans []AdminBan) {
	now := g.now()
	next := make(map[banKey]adminEntry, len(bans))
	hosts := map[hostKey]int{}
	for _, b := range bans {
		host := strings.ToLower(strings.TrimSuffix(b.Host, "."))
		if !now.Before(b.Expires) || host == "" {
			continue
		}
		k := banKey{published.MemberKey(b.Pool, b.Member), keyOf(host)}
		if _, dup := next[k]; !dup {
			hosts[k.host]++
		}
		next[k] = adminEntry{ban: ban{until: b.Expires, pool: b.Pool, name: b.Member}, host: host}
	}
	t := g.bans
	t.mu.Lock()
	prev := t.admin
	t.admin, t.adminHosts = next, hosts
	t.mu.Unlock()
	for k, b := range next {
		if old, ok := prev[k]; ok && old.until.Equal(b.until) {
			continue
		}
		if g.metrics != nil {
			g.metrics.bans.WithLabelValues(b.pool, b.name, causeAdmin).Inc()
		}
		g.log.Info("administrator's ban", "member", b.pool+"/"+b.name, "host", b.host, "until", b.until.UTC().Format(time.RFC3339))
	}
	for k, b := range prev {
		if _, ok := next[k]; !ok && now.Before(b.until) {
			g.log.Info("administrator's ban lifted", "member", b.pool+"/"+b.name, "host", b.host)
		}
	}
}
