package pvesim

import (
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

// Default texts of an unreachable node. docs/proxmox-behaviour.md, error classes: 595 is "no
// response from node", 596 a node connection error.
const (
	// StatusNoResponse is pveproxy's 595.
	StatusNoResponse = 595
	// StatusConnectionError is pveproxy's 596.
	StatusConnectionError  = 596
	defaultUnreachableText = "Connection timed out"
)

// CallFault makes calls matching Method and Path misbehave.
type CallFault struct {
	// Method matches the HTTP method; empty matches any.
	Method string `json:"method,omitempty"`
	// Path matches the route template ("/nodes/{node}/qemu/{vmid}/config")
	// or, as a path.Match glob, the concrete path below /api2/json
	// ("/nodes/pve1/qemu/1*/config"). Empty matches any.
	Path string `json:"path,omitempty"`
	// Count is how many matching calls are affected; 0 means all.
	Count int `json:"count,omitempty"`
	// Status and Message make the call fail with this status and text
	// (written as Proxmox writes errors, F1). Status 0 does not fail.
	Status  int    `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	// Latency delays the answer.
	Latency Duration `json:"latency,omitempty"`
	// Cut sends the status line, headers and half the body, then closes
	// the connection.
	Cut bool `json:"cut,omitempty"`
}

// matches reports whether the fault applies to a call.
func (f *CallFault) matches(method, tmpl, concrete string) bool {
	if f.Method != "" && !strings.EqualFold(f.Method, method) {
		return false
	}
	if f.Path == "" || f.Path == tmpl || f.Path == concrete {
		return true
	}
	ok, err := path.Match(f.Path, concrete)
	return err == nil && ok
}

// taskFault forces the exitstatus of the next tasks of a type.
type taskFault struct {
	typ, exit string
	count     int
}

// unreachable is a node fault.
type unreachable struct {
	status int
	text   string
}

// faults holds the active faults. It has its own lock so that request
// admission does not contend with the cluster state.
type faults struct {
	mu    sync.Mutex
	calls []*CallFault
	tasks []*taskFault
	nodes map[string]unreachable
}

// take returns the merged effect of the call faults matching a call and
// consumes one use of each counted fault.
func (fs *faults) take(method, tmpl, concrete string) (latency time.Duration, fail *CallFault, cut bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	kept := fs.calls[:0]
	for _, f := range fs.calls {
		keep := true
		if f.matches(method, tmpl, concrete) {
			latency += time.Duration(f.Latency)
			if f.Status != 0 && fail == nil {
				fail = f
			}
			cut = cut || f.Cut
			if f.Count > 0 {
				f.Count--
				keep = f.Count > 0
			}
		}
		if keep {
			kept = append(kept, f)
		}
	}
	fs.calls = kept
	return latency, fail, cut
}

// takeTaskFault consumes a forced exitstatus for a task type.
func (fs *faults) takeTaskFault(typ string) string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, f := range fs.tasks {
		if f.typ == "" || f.typ == typ {
			exit := f.exit
			if f.count > 0 {
				f.count--
				if f.count == 0 {
					fs.tasks = append(fs.tasks[:i], fs.tasks[i+1:]...)
				}
			}
			return exit
		}
	}
	return ""
}

// nodeDown returns the fault of an unreachable node.
func (fs *faults) nodeDown(name string) (unreachable, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	u, ok := fs.nodes[name]
	return u, ok
}

// AddCallFault installs a call fault (failure, latency or cut connection).
func (s *Sim) AddCallFault(f CallFault) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	c := f
	s.faults.calls = append(s.faults.calls, &c)
}

// FailNext makes the next n calls matching method and pathPattern fail with
// status and message (see CallFault for the pattern).
func (s *Sim) FailNext(method, pathPattern string, n, status int, message string) {
	s.AddCallFault(CallFault{Method: method, Path: pathPattern, Count: n, Status: status, Message: message})
}

// AddLatency delays every call matching method and pathPattern by d (a
// wall-clock duration, not scaled by Speed).
func (s *Sim) AddLatency(method, pathPattern string, d time.Duration) {
	s.AddCallFault(CallFault{Method: method, Path: pathPattern, Latency: Duration(d)})
}

// CutNext cuts the connection in the middle of the next n answers to calls
// matching method and pathPattern.
func (s *Sim) CutNext(method, pathPattern string, n int) {
	s.AddCallFault(CallFault{Method: method, Path: pathPattern, Count: n, Cut: true})
}

// FailTasks makes the next n tasks of taskType ("qmclone", "qmstart", ...;
// empty for any) end with exitstatus. "WARNINGS: <n>" and "OK" still apply
// the task's effect (F16); any other text fails the task without effect.
func (s *Sim) FailTasks(taskType, exitstatus string, n int) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.tasks = append(s.faults.tasks, &taskFault{typ: taskType, exit: exitstatus, count: n})
}

// SetNodeUnreachable makes calls routed to node fail with status (595 or
// 596; 0 means 595) and text, lists the node offline and its guests with
// status unknown (F8). unreachable=false restores the node.
func (s *Sim) SetNodeUnreachable(node string, unreachableNow bool, status int, text string) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	if !unreachableNow {
		delete(s.faults.nodes, node)
		return
	}
	if status == 0 {
		status = StatusNoResponse
	}
	if text == "" {
		text = defaultUnreachableText
	}
	s.faults.nodes[node] = unreachable{status: status, text: text}
}

// SetAgentNeverStarts makes the guest agent of vmid never answer (F5:
// "QEMU guest agent is not running" forever), or restores it.
func (s *Sim) SetAgentNeverStarts(vmid int, never bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vms[vmid]
	if v == nil {
		return false
	}
	v.agentNever = never
	return true
}

// SetLock sets (or, with "", clears) the lock of a VM, as a crashed task
// leaves it (F7). Clearing runs the operations queued behind the lock.
func (s *Sim) SetLock(vmid int, lock string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vms[vmid]
	if v == nil {
		return false
	}
	v.setLock(lock)
	return true
}

// ClearFaults removes every call, task and node fault (agent and lock
// faults stay: they are VM state).
func (s *Sim) ClearFaults() {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.calls = nil
	s.faults.tasks = nil
	s.faults.nodes = map[string]unreachable{}
}

// applyCallFaults handles latency, failure and cut faults for a call. It
// returns true when the call was answered by a fault.
func (s *Sim) applyCallFaults(w http.ResponseWriter, r *http.Request, tmpl, concrete string) bool {
	latency, fail, cut := s.faults.take(r.Method, tmpl, concrete)
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return true
		}
	}
	if cut {
		body := []byte(`{"data":{"truncated":"this answer was cut by a simulator fault"}}`)
		writeRaw(w, r, http.StatusOK, "OK", body[:len(body)/2], len(body))
		return true
	}
	if fail != nil {
		writeAPIError(w, r, &apiError{status: fail.Status, message: fail.Message})
		return true
	}
	return false
}
