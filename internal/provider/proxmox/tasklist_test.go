package proxmox

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// upidAt is a UPID of node in the format of F16, started at start.
func upidAt(node string, start time.Time, typ string) string {
	return fmt.Sprintf("UPID:%s:00001234:00005678:%08X:%s:100:op@pve!t:", node, start.Unix(), typ)
}

// TestTaskListSince (F16, #23 item 2): a node's task list starts at the
// oldest task in flight there that no list showed ended, by the start time
// in its UPID (the node's clock), so that its size follows the tasks
// running, not every task since the first of a create phase.
func TestTaskListSince(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	recorded := now.Add(-10 * time.Second)
	for _, tc := range []struct {
		name, reason string
		tasks        map[string]pending
		ends         map[string]string
		want         time.Time
	}{{
		name:   "the oldest running",
		reason: "a list must reach back to the oldest task still running on the node, less the overlap",
		tasks: map[string]pending{
			"a": {node: "pve1", upid: upidAt("pve1", now.Add(-30*time.Second), "qmclone"), at: recorded},
			"b": {node: "pve1", upid: upidAt("pve1", now.Add(-5*time.Second), "qmstart"), at: recorded},
		},
		want: now.Add(-30*time.Second - taskListOverlap),
	}, {
		name:   "an ended task no longer holds the list back",
		reason: "a list showed its end, which is final: the next list starts at the oldest task still running",
		tasks: map[string]pending{
			"a": {node: "pve1", upid: upidAt("pve1", now.Add(-300*time.Second), "qmclone"), at: recorded},
			"b": {node: "pve1", upid: upidAt("pve1", now.Add(-5*time.Second), "qmstart"), at: recorded},
		},
		ends: map[string]string{upidAt("pve1", now.Add(-300*time.Second), "qmclone"): "OK"},
		want: now.Add(-5*time.Second - taskListOverlap),
	}, {
		name:   "further tasks of a step count",
		reason: "a seed delete on every node waits for each of its tasks, on its own node",
		tasks: map[string]pending{
			"a": {node: "pve2", upid: upidAt("pve2", now.Add(-5*time.Second), "imgdel"), at: recorded,
				more: []taskRef{{node: "pve1", upid: upidAt("pve1", now.Add(-7*time.Second), "imgdel")}}},
		},
		want: now.Add(-7*time.Second - taskListOverlap),
	}, {
		name:   "other nodes do not count",
		reason: "each node's list follows the tasks on that node only",
		tasks: map[string]pending{
			"a": {node: "pve2", upid: upidAt("pve2", now.Add(-600*time.Second), "qmclone"), at: recorded},
			"b": {node: "pve1", upid: upidAt("pve1", now.Add(-5*time.Second), "qmstart"), at: recorded},
		},
		want: now.Add(-5*time.Second - taskListOverlap),
	}, {
		name:   "a UPID without a start time",
		reason: "without the node's start time, when the task was recorded less the skew the node's clock may have",
		tasks:  map[string]pending{"a": {node: "pve1", upid: "UPID:pve1:not-a-upid", at: recorded}},
		want:   recorded.Add(-taskSkew),
	}, {
		name:   "nothing in flight",
		reason: "a list read with no task in flight starts a skew before now",
		want:   now.Add(-taskSkew),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Provider{now: func() time.Time { return now }, tasks: tc.tasks, taskEnds: tc.ends}
			if p.tasks == nil {
				p.tasks = map[string]pending{}
			}
			if p.taskEnds == nil {
				p.taskEnds = map[string]string{}
			}
			if diff := cmp.Diff(tc.want.Unix(), p.taskListSince("pve1")); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// sinceRecorder records the since of every task list the provider reads.
type sinceRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	at   []int64
}

func (r *sinceRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if q := req.URL.Query(); req.Method == http.MethodGet && q.Get("source") != "" && q.Get("since") != "" {
		since, err := strconv.ParseInt(q.Get("since"), 10, 64)
		if err == nil {
			r.mu.Lock()
			r.at = append(r.at, since)
			r.mu.Unlock()
		}
	}
	return r.next.RoundTrip(req)
}

func (r *sinceRecorder) take() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.at
	r.at = nil
	return out
}

// TestTaskListsReachBackOnlyToTheTasksRunning (F16, #23 item 2): the creates
// and deletes of a second batch read task lists that start at their own
// tasks, not at the first batch's, and still see every task end in them
// (none is read alone), a failed start included.
func TestTaskListsReachBackOnlyToTheTasksRunning(t *testing.T) {
	const proxies = 4
	h := newHarness(t, nil)
	p := h.provider()
	// Build the HTTP client, then record what it asks.
	if _, err := p.ListByTag(h.ctx); err != nil {
		t.Fatal(err)
	}
	rec := &sinceRecorder{}
	p.api.mu.Lock()
	rec.next = p.api.http.Transport
	p.api.http.Transport = rec
	p.api.mu.Unlock()

	batch := func(n int, startFails bool) []error {
		t.Helper()
		reqs := make([]provider.Request, proxies)
		ids := make([]provider.ID, proxies)
		for i := range reqs {
			reqs[i] = h.request(fmt.Sprintf("uid-since-%d-%d", n, i), fmt.Sprintf("proxy-since%02d%08d", n, i))
		}
		if startFails {
			h.sim.FailTasks("qmstart", "start failed: guest refused", 1)
		}
		var failures []error
		h.roundRobin(proxies, fmt.Sprintf("creates of batch %d", n), func(i int) bool {
			id, err := p.Create(h.ctx, reqs[i])
			if err != nil && !provider.IsInProgress(err) {
				failures = append(failures, err)
				return false
			}
			ids[i] = id
			return err == nil
		})
		h.roundRobin(proxies, fmt.Sprintf("deletes of batch %d", n), func(i int) bool {
			err := p.Delete(h.ctx, ids[i])
			if err != nil && !provider.IsInProgress(err) {
				t.Fatalf("delete: %v", err)
			}
			return err == nil
		})
		return failures
	}
	batch(1, false)
	// The second batch starts in a later second of the node's clock, so
	// that a list reaching back to the first batch's tasks shows.
	first := time.Now().Unix()
	h.eventually("a later second", func() bool { return time.Now().Unix() > first+1 })
	rec.take()
	h.sim.ResetCounters()
	secondStart := time.Now()
	failures := batch(2, true)
	sinces := rec.take()
	if len(sinces) == 0 {
		t.Fatal("the second batch read no task list")
	}
	for _, s := range sinces {
		if s < secondStart.Unix()-int64(taskListOverlap/time.Second) {
			t.Errorf("a task list of the second batch starts at %d, %d s before the batch started: it reaches back to the first batch's tasks (sinces %v)",
				s, secondStart.Unix()-s, sinces)
			break
		}
	}
	if len(failures) != 1 || !provider.IsTransient(failures[0]) {
		t.Errorf("failures %v, want one Transient failed start, seen in a task list", failures)
	}
	if got := h.sim.Counters()["GET /nodes/{node}/tasks/{upid}/status"]; got != 0 {
		t.Errorf("%d tasks read alone, want every end seen in the task lists", got)
	}
	p.mu.Lock()
	left := len(p.taskEnds)
	p.mu.Unlock()
	if left != 0 {
		t.Errorf("%d task ends kept with nothing in flight, want none", left)
	}
}
