package forwardproxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// admissionWait bounds a wait on a loopback connection.
const admissionWait = 20 * time.Second

// admissionLab accepts connections from chosen loopback sources one at a
// time, so that the order admission sees is the order of the steps.
type admissionLab struct {
	t      *testing.T
	ln     net.Listener
	l      *limitListener
	mu     sync.Mutex
	causes []string
}

func newAdmissionLab(t *testing.T, lim admission) *admissionLab {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	lab := &admissionLab{t: t, ln: ln}
	lim.refused = func(cause string) {
		lab.mu.Lock()
		defer lab.mu.Unlock()
		lab.causes = append(lab.causes, cause)
	}
	lab.l = newLimitListener(ln, lim, "")
	return lab
}

// connect dials from src (a 127.0.0.0/8 address), accepts the connection
// and gives it to admission: cc is nil when it was refused.
func (lab *admissionLab) connect(src string) (client net.Conn, cc *countedConn) {
	lab.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: admissionWait}
	client, err := d.Dial("tcp", lab.ln.Addr().String())
	if err != nil {
		lab.t.Fatal(err)
	}
	lab.t.Cleanup(func() { _ = client.Close() })
	raw, err := lab.ln.Accept()
	if err != nil {
		lab.t.Fatal(err)
	}
	cc = lab.l.admit(raw)
	if cc != nil {
		lab.t.Cleanup(func() { _ = cc.Close() })
	}
	return client, cc
}

// state says what became of a connection: "refused" (the client read the
// 503), "closed" (closed without a word) or "open" (the server can still
// write to it).
func state(t *testing.T, client net.Conn, cc *countedConn) string {
	t.Helper()
	_ = client.SetReadDeadline(time.Now().Add(admissionWait))
	if cc == nil {
		line, err := bufio.NewReader(client).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 503 ") {
			return "refused without its answer: " + line
		}
		return "refused"
	}
	if _, err := cc.Write([]byte("ok")); err != nil {
		return "closed"
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(client, buf); err != nil {
		return "closed"
	}
	return "open"
}

// TestAdmissionLimits: the caps per source and on unauthenticated
// connections (#38 item 4), step by step in the order of accept.
func TestAdmissionLimits(t *testing.T) {
	type step struct {
		from string
		// authenticated: the connection's first request is admitted
		// right after its accept.
		authenticated bool
	}
	cases := []struct {
		name       string
		why        string
		lim        admission
		steps      []step
		want       []string // the state of each step's connection at the end
		wantCauses []string
	}{{
		name: "per-source cap",
		why:  "one address holds at most its share of connections, authenticated or not; another address is still served",
		lim:  admission{max: 100, perSource: 2, unauthenticated: 100, unauthPer: 100},
		steps: []step{
			{"127.0.0.2", true}, {"127.0.0.2", true}, {"127.0.0.2", true}, {"127.0.0.3", true},
		},
		want:       []string{"open", "open", "refused", "open"},
		wantCauses: []string{RefusedSourceLimit},
	}, {
		name: "unauthenticated per-source cap",
		why:  "silent connections of one address are refused past their cap; that address's authenticated ones do not count",
		lim:  admission{max: 100, perSource: 100, unauthenticated: 100, unauthPer: 2},
		steps: []step{
			{"127.0.0.2", true}, {"127.0.0.2", false}, {"127.0.0.2", false}, {"127.0.0.2", false}, {"127.0.0.3", false},
		},
		want:       []string{"open", "open", "open", "refused", "open"},
		wantCauses: []string{RefusedUnauthenticatedSourceLimit},
	}, {
		name: "the oldest silent connection makes room",
		why:  "many sources of silent connections displace only each other: the newest is let in, the oldest silent one closed, an authenticated one kept",
		lim:  admission{max: 100, perSource: 100, unauthenticated: 2, unauthPer: 100},
		steps: []step{
			{"127.0.0.9", true}, {"127.0.0.2", false}, {"127.0.0.3", false}, {"127.0.0.4", false}, {"127.0.0.5", false},
		},
		want:       []string{"open", "closed", "closed", "open", "open"},
		wantCauses: []string{RefusedEvicted, RefusedEvicted},
	}, {
		name: "an evicted connection gives its slot back at once",
		why:  "a flood's closed connections must not hold the server's slots until their handlers wake (none does here), or a new client meets the global cap",
		lim:  admission{max: 3, perSource: 100, unauthenticated: 1, unauthPer: 100},
		steps: []step{
			{"127.0.0.2", false}, {"127.0.0.3", false}, {"127.0.0.4", false}, {"127.0.0.5", false}, {"127.0.0.9", true},
		},
		want:       []string{"closed", "closed", "closed", "closed", "open"},
		wantCauses: []string{RefusedEvicted, RefusedEvicted, RefusedEvicted, RefusedEvicted},
	}, {
		name: "global cap",
		why:  "past MaxConnections every new connection is refused, whatever its source",
		lim:  admission{max: 2, perSource: 100, unauthenticated: 100, unauthPer: 100},
		steps: []step{
			{"127.0.0.2", true}, {"127.0.0.3", true}, {"127.0.0.4", true},
		},
		want:       []string{"open", "open", "refused"},
		wantCauses: []string{RefusedLimit},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.lim.firstRequest = time.Hour
			lab := newAdmissionLab(t, tc.lim)
			clients := make([]net.Conn, len(tc.steps))
			conns := make([]*countedConn, len(tc.steps))
			for i, s := range tc.steps {
				clients[i], conns[i] = lab.connect(s.from)
				if s.authenticated && conns[i] != nil {
					markAuthenticated(conns[i])
				}
			}
			got := make([]string, len(tc.steps))
			for i := range tc.steps {
				got[i] = state(t, clients[i], conns[i])
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: states (-want +got):\n%s", tc.why, diff)
			}
			lab.mu.Lock()
			defer lab.mu.Unlock()
			if diff := cmp.Diff(tc.wantCauses, lab.causes); diff != "" {
				t.Errorf("%s: causes counted (-want +got):\n%s", tc.why, diff)
			}
		})
	}
}

// TestAdmissionReleasesSlots: a closed connection gives back its slots,
// its source's included, so that a capped source is served again.
func TestAdmissionReleasesSlots(t *testing.T) {
	lab := newAdmissionLab(t, admission{max: 100, perSource: 1, unauthenticated: 100, unauthPer: 100, firstRequest: time.Hour})
	_, first := lab.connect("127.0.0.2")
	if first == nil {
		t.Fatal("the first connection was refused")
	}
	if c, cc := lab.connect("127.0.0.2"); state(t, c, cc) != "refused" {
		t.Fatal("a second connection of a source capped at 1 was not refused")
	}
	_ = first.Close()
	if c, cc := lab.connect("127.0.0.2"); state(t, c, cc) != "open" {
		t.Error("the source is still refused after its connection closed")
	}
	lab.l.mu.Lock()
	defer lab.l.mu.Unlock()
	if n := len(lab.l.sources); n != 1 {
		t.Errorf("%d sources counted with one connection open", n)
	}
}

// TestFirstRequestTimeout: a silent connection is closed at the first
// request timeout; one whose client was admitted is not, even when its
// timer fires late.
func TestFirstRequestTimeout(t *testing.T) {
	lab := newAdmissionLab(t, admission{max: 100, perSource: 100, unauthenticated: 100, unauthPer: 100, firstRequest: 50 * time.Millisecond})
	silent, _ := lab.connect("127.0.0.2")
	_ = silent.SetReadDeadline(time.Now().Add(admissionWait))
	if n, err := silent.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the silent connection read %d bytes, %v; want it closed", n, err)
	}
	c, cc := lab.connect("127.0.0.3")
	markAuthenticated(cc)
	lab.l.expire(cc) // as a timer that fired while its client was admitted
	if got := state(t, c, cc); got != "open" {
		t.Errorf("the admitted connection is %s", got)
	}
	lab.mu.Lock()
	defer lab.mu.Unlock()
	if diff := cmp.Diff([]string{RefusedFirstRequestTimeout}, lab.causes); diff != "" {
		t.Errorf("causes counted (-want +got):\n%s", diff)
	}
}
