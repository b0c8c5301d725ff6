package gateway

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
)

// Entry is one member as a pool's published list describes it (an object
// of proxies.json, api/v1alpha1/published). Its URL holds the member's
// credentials: an Entry is never printed, only its Name.
type Entry = published.ListEntry

// ParseList reads proxies.json. An entry without a name or with a URL that
// is not http://[user:password@]host:port is an error; the error names the
// entry, never its URL.
func ParseList(data []byte) ([]Entry, error) {
	var entries []Entry
	if err := json.Unmarshal(data, &entries); err != nil {
		// The JSON decoder's message may quote a piece of the input.
		return nil, fmt.Errorf("%s is not a JSON list of members", published.ListKeyJSON)
	}
	for i, e := range entries {
		if e.Name == "" {
			return nil, fmt.Errorf("%s: entry %d has no name", published.ListKeyJSON, i)
		}
		if _, err := parseMemberURL(e.URL); err != nil {
			return nil, fmt.Errorf("%s: member %s: %w", published.ListKeyJSON, e.Name, err)
		}
	}
	return entries, nil
}

// memberURL is what the gateway needs of a member's URL.
type memberURL struct {
	url  *url.URL // with credentials, for the upgrades' Transport
	host string   // host:port
	auth string   // its Proxy-Authorization value, "" without credentials
}

func parseMemberURL(s string) (memberURL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return memberURL{}, errors.New("the URL is not http://[user:password@]host:port")
	}
	if _, port, err := net.SplitHostPort(u.Host); err != nil || port == "" {
		return memberURL{}, errors.New("the URL has no port")
	}
	m := memberURL{url: &url.URL{Scheme: "http", Host: u.Host, User: u.User}, host: u.Host}
	if u.User != nil {
		pass, _ := u.User.Password()
		m.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass))
	}
	return m, nil
}

// Member is one proxy the gateway sends to. Its credentials are unexported
// and String prints only pool/name.
type Member struct {
	// Pool and Name identify the member (a Proxy of that pool).
	Pool, Name string
	// Provider, Zone and EgressIP are where it runs and what the world
	// sees of it.
	Provider, Zone, EgressIP string
	// Engine is the forward proxy it runs, as its pool published it
	// (published.Engine*; empty when the list does not say).
	Engine string

	target memberURL
	state  *memberState
	id     uint64 // hash of pool/name, for session placement
}

// String returns pool/name.
func (m *Member) String() string { return m.Pool + "/" + m.Name }

// keepAlive reports whether a connection to the member may carry more than
// one request: only when the member runs this project's forward proxy,
// which parses every answer it relays and sends nothing past its framing.
// tinyproxy, and any engine the list does not name, relays an origin's
// bytes as they come, so an origin could answer past its framing and read
// the next request on the connection, another crawler's
// (docs/security.md, "Kept connections to members").
func (m *Member) keepAlive() bool { return m.Engine == published.EngineForwardProxy }

// Host returns the member's host:port (no credentials).
func (m *Member) Host() string { return m.target.host }

// memberState is what the gateway keeps of a member across list updates.
type memberState struct {
	active atomic.Int64 // requests and tunnels in flight
	// failures counts member failures in a row (failover).
	failures atomic.Int64
	// ejectedUntil (UnixNano) keeps the member out of new picks until
	// then (failover's ejection).
	ejectedUntil atomic.Int64
	// handles are its per-member metrics, looked up once (metrics.go).
	handles atomic.Pointer[memberHandles]
}

// ejected reports whether the member sits out a cool-down at now.
func (s *memberState) ejected(now time.Time) bool { return now.UnixNano() < s.ejectedUntil.Load() }

// Set is the gateway's members: the union of its pools' published lists,
// replaced a pool at a time as a watch sees them change. Readers take a
// snapshot without locking.
type Set struct {
	mu     sync.Mutex
	pools  map[string][]*Member
	states map[string]*memberState // by pool/name@host: a new address is a new member
	snap   atomic.Pointer[[]*Member]
	// changed is closed and replaced on each update, for waiters.
	changed chan struct{}
}

// NewSet returns an empty Set.
func NewSet() *Set {
	s := &Set{pools: map[string][]*Member{}, states: map[string]*memberState{}, changed: make(chan struct{})}
	s.snap.Store(&[]*Member{})
	return s
}

// Update replaces pool's members with entries (nil: the pool has none, or
// its list is gone). A member that stays keeps its counts; one that left
// gets no new request or tunnel, and those open go on until they end.
// It returns the names of the pool's members that left, for the metrics to
// forget their series.
func (s *Set) Update(pool string, entries []Entry) (left []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var members []*Member
	for _, e := range entries {
		target, err := parseMemberURL(e.URL)
		if err != nil {
			continue // ParseList refused it already
		}
		key := pool + "/" + e.Name + "@" + target.host
		st := s.states[key]
		if st == nil {
			st = &memberState{}
			s.states[key] = st
		}
		members = append(members, &Member{Pool: pool, Name: e.Name, Provider: e.Provider, Zone: e.Zone, EgressIP: e.EgressIP, Engine: e.Engine, target: target, state: st, id: published.MemberKey(pool, e.Name)})
	}
	if len(members) == 0 {
		delete(s.pools, pool)
	} else {
		s.pools[pool] = members
	}
	var all []*Member
	live := map[string]bool{}
	for _, ms := range s.pools {
		for _, m := range ms {
			all = append(all, m)
			live[m.Pool+"/"+m.Name+"@"+m.target.host] = true
		}
	}
	names := map[string]bool{}
	for _, m := range s.pools[pool] {
		names[m.Name] = true
	}
	for key := range s.states {
		if !live[key] {
			delete(s.states, key)
			if name, ok := strings.CutPrefix(key, pool+"/"); ok {
				if name, _, _ = strings.Cut(name, "@"); !names[name] && !slices.Contains(left, name) {
					left = append(left, name)
				}
			}
		}
	}
	// A stable order, so that round-robin and tests see the same sequence
	// on every replica.
	slices.SortFunc(all, func(a, b *Member) int { return strings.Compare(a.String(), b.String()) })
	s.snap.Store(&all)
	close(s.changed)
	s.changed = make(chan struct{})
	return left
}

// Members returns the current members, sorted by pool/name. The slice must
// not be changed.
func (s *Set) Members() []*Member { return *s.snap.Load() }

// has says whether pool's member name is in the set.
func (s *Set) has(pool, name string) bool {
	for _, mb := range s.Members() {
		if mb.Pool == pool && mb.Name == name {
			return true
		}
	}
	return false
}

// Len is the number of members.
func (s *Set) Len() int { return len(s.Members()) }

// Changed returns a channel that is closed at the next Update.
func (s *Set) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}
