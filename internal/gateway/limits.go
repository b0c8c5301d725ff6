package gateway

import (
	"hash/maphash"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// Limits stop the waterfall (one egress address banned, the others take its
// load and get banned too): each member carries at most MaxPerMember
// requests and tunnels at once through this gateway, and, with a HostRate,
// at most that many per second to one destination host. A request or
// tunnel whose member is at a limit goes to another member the request may
// use; when every one of them is at its limit it is answered 429 with
// Retry-After. A session does not move for a limit (that would change its
// egress address): it gets the 429.

// Defaults of the limits' zero values in Config.
const (
	// DefaultMaxPerMember is how many requests and tunnels a member
	// carries at once through one gateway pod.
	DefaultMaxPerMember = 128
	// maxRateKeys bounds the (member, host) pairs whose rate is tracked:
	// the least recently used is forgotten past it.
	maxRateKeys = 1 << 16
	// maxHostLen is the longest destination host a request may name (a
	// DNS name's bound): it bounds what the rate and ban state keep.
	maxHostLen = 253
	// maxClientTablesBytes bounds the heap that every table a client
	// feeds (bans, reports, rates) holds when full of the longest keys
	// (TestClientFedTablesStayUnderTheirBound); the gateway pod's memory
	// limit is sized from it. Measured full: 60 MiB (docs/gateway.md
	// "Memory").
	maxClientTablesBytes = 80 << 20
)

// Values of the limit label.
const (
	limitConcurrency = "concurrency"
	limitRate        = "rate"
)

// destHost is the lower-case host of a destination (host or host:port),
// or a refusal when it cannot be one: a host longer than a DNS name, a port
// that is not a number from 1 to 65535. It is a substring of its input,
// which may be a whole request line or header: the tables keep its keyOf,
// never the string, so that no entry pins a client's bytes.
func destHost(hostport string) (string, error) {
	host := hostport
	if h, port, err := net.SplitHostPort(hostport); err == nil {
		if n, err := strconv.Atoi(port); err != nil || len(port) > 5 || n < 1 || n > 65535 {
			return "", &forwardproxy.RefusedError{Code: http.StatusBadRequest, Message: "the destination port is not a number from 1 to 65535"}
		}
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	if len(host) > maxHostLen {
		return "", &forwardproxy.RefusedError{Code: http.StatusBadRequest, Message: "the destination host is longer than " + strconv.Itoa(maxHostLen) + " characters"}
	}
	return strings.ToLower(host), nil
}

// hostKey is a destination host as the tables key it: a fixed-size hash,
// so that an entry holds none of the client's bytes (a host of
// maxHostLen bytes, or the whole request line a substring would pin) and
// every key costs the same.
type hostKey uint64

// hostSeed keys the hash: unknown outside the process, so that no client
// can choose two hosts that share a key (and ban one with the other's
// report). The tables are the process's own, so a seed per process will do.
var hostSeed = maphash.MakeSeed()

// keyOf is host's key.
func keyOf(host string) hostKey { return hostKey(maphash.String(hostSeed, host)) }

// limitRefusal is the 429 when every member a request may use is at its
// limit; wait is when one may have room again (0: unknown).
func limitRefusal(wait time.Duration) error {
	secs := int(math.Ceil(wait.Seconds()))
	secs = max(secs, 1)
	return &forwardproxy.RefusedError{Code: http.StatusTooManyRequests,
		Message: "every member proxy this request may use is at its limit; retry later",
		Header:  "Retry-After", Value: strconv.Itoa(secs), ProxyError: forwardproxy.ProxyErrorConnectionLimitReached}
}

// admit takes a place on m for a request or tunnel to host: false, with
// the limit's name and when to retry, when m is at a limit. release gives
// the place back.
func (g *Gateway) admit(m *Member, host string) (release func(), limit string, wait time.Duration, ok bool) {
	if m.state.active.Add(1) > int64(g.maxPerMember) {
		m.state.active.Add(-1)
		return nil, limitConcurrency, time.Second, false
	}
	if g.rates != nil {
		if ok, wait := g.rates.take(m.id, host, g.now()); !ok {
			m.state.active.Add(-1)
			return nil, limitRate, wait, false
		}
	}
	var once sync.Once
	return func() { once.Do(func() { m.state.active.Add(-1) }) }, "", 0, true
}

// rateLimiter is a token bucket per (member, destination host), at rate
// per second with burst, for at most maxRateKeys pairs.
type rateLimiter struct {
	rate, burst float64
	mu          sync.Mutex
	buckets     *lru[rateKey, *bucket]
}

type rateKey struct {
	member uint64
	host   hostKey
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newRateLimiter(rate float64, burst int) *rateLimiter {
	if burst <= 0 {
		burst = max(1, int(math.Ceil(rate)))
	}
	return &rateLimiter{rate: rate, burst: float64(burst), buckets: newLRU[rateKey, *bucket](maxRateKeys)}
}

// take spends a token of (member, host) at now: false, with the wait for
// the next token, when there is none. A pair forgotten past the bound
// starts again with a full bucket.
func (r *rateLimiter) take(member uint64, host string, now time.Time) (bool, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return takeFrom(r.buckets, rateKey{member, keyOf(host)}, r.rate, r.burst, now)
}

// takeFrom spends a token of k's bucket in c at now, making a full one for
// a key it does not hold. Buckets idle long enough to be full again are
// forgotten first: they hold nothing a fresh bucket would not.
func takeFrom[K comparable](c *lru[K, *bucket], k K, rate, burst float64, now time.Time) (bool, time.Duration) {
	b, ok := c.get(k)
	if !ok {
		full := time.Duration(burst / rate * float64(time.Second))
		c.expire(func(_ K, b *bucket) bool { return now.Sub(b.at) >= full })
		b = &bucket{tokens: burst, at: now}
		c.put(k, b)
	}
	return b.take(rate, burst, now)
}

// take spends a token at now, refilling at rate up to burst: false, with
// the wait for the next token, when there is none.
func (b *bucket) take(rate, burst float64, now time.Time) (bool, time.Duration) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(burst, b.tokens+d.Seconds()*rate)
		b.at = now
	}
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) / rate * float64(time.Second))
	}
	b.tokens--
	return true, 0
}
