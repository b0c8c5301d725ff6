package pvesim

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTaskList: GET /nodes/{node}/tasks lists the node's tasks newest
// first, finished ones by default, running ones with source=active or all;
// a finished task carries its exit status as status (F16's exitstatus), a
// running one has no status; since, typefilter and limit narrow the list.
func TestTaskList(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Timings.Clone = Duration(3600e9) }) // a clone that outlasts the test
	running := h.clone(101, nil)
	h.sim.FailTasks("qmstart", "simulated start failure", 1)
	failed := h.ok(http.MethodPost, "/nodes/pve1/qemu/9002/status/start", nil).dataString(t)
	h.waitTask(failed)

	type entry struct{ UPID, Status string }
	list := func(params url.Values) []entry {
		t.Helper()
		var out []entry
		for _, m := range h.ok(http.MethodGet, "/nodes/pve1/tasks", params).dataList(t) {
			upid, _ := m["upid"].(string)
			st, _ := m["status"].(string)
			out = append(out, entry{UPID: upid, Status: st})
		}
		return out
	}
	for _, tc := range []struct {
		name, reason string
		params       url.Values
		want         []entry
	}{
		{"default", "the archive: finished tasks only, with their exit status",
			nil, []entry{{failed, "simulated start failure"}}},
		{"active", "running tasks only, without a status",
			url.Values{"source": {"active"}}, []entry{{UPID: running}}},
		{"all", "both, newest first",
			url.Values{"source": {"all"}}, []entry{{failed, "simulated start failure"}, {UPID: running}}},
		{"typefilter", "one type of task",
			url.Values{"source": {"all"}, "typefilter": {"qmclone"}}, []entry{{UPID: running}}},
		{"limit", "at most limit tasks, the newest",
			url.Values{"source": {"all"}, "limit": {"1"}}, []entry{{failed, "simulated start failure"}}},
		{"since", "nothing started after the far future",
			url.Values{"source": {"all"}, "since": {"4102444800"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, list(tc.params)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
	if r := h.call(http.MethodGet, "/nodes/pve1/tasks", url.Values{"source": {"some"}}); r.status[:3] != "400" {
		t.Errorf("source=some: %s, want 400 (schema enum)", r.status)
	}
}
