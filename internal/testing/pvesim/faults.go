package pvesim

import (
	"fmt"
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
	// the connection. The call has no effect.
	Cut bool `json:"cut,omitempty"`
	// LoseAnswer runs the call (its effect takes place: a clone starts, a
	// VM is destroyed) and then cuts the answer as Cut does, as when the
	// connection drops after pveproxy accepted the request: the client
	// cannot tell whether the call happened.
	LoseAnswer bool `json:"loseAnswer,omitempty"`
	// LockTimeout fails the call with the 500 of a VM config lock that could
	// not be taken in time ("can't lock file
	// '/var/lock/qemu-server/lock-<vmid>.conf' - got timeout"), naming the
	// VMID of the path. The call has no effect.
	LockTimeout bool `json:"lockTimeout,omitempty"`
}

// effect is the merged effect of the call faults matching one call.
type effect struct {
	latency                 time.Duration
	fail                    *CallFault
	cut, lose, lockTimedOut bool
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
	// agentNever is how many of the next cloned VMs get a guest agent
	// that never answers.
	agentNever int
}

// takeAgentNever consumes one use of the agent-never fault of new VMs.
func (fs *faults) takeAgentNever() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.agentNever == 0 {
		return false
	}
	fs.agentNever--
	return true
}

// take returns the merged effect of the call faults matching a call and
// consumes one use of each counted fault.
func (fs *faults) take(method, tmpl, concrete string) effect {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var e effect
	kept := fs.calls[:0]
	for _, f := range fs.calls {
		keep := true
		if f.matches(method, tmpl, concrete) {
			e.latency += time.Duration(f.Latency)
			if f.Status != 0 && e.fail == nil {
				e.fail = f
			}
			e.cut = e.cut || f.Cut
			e.lose = e.lose || f.LoseAnswer
			e.lockTimedOut = e.lockTimedOut || f.LockTimeout
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
	return e
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

// LoseAnswerNext runs the next n calls matching method and pathPattern and
// then cuts their answers: the effect takes place, the client sees a broken
// connection.
func (s *Sim) LoseAnswerNext(method, pathPattern string, n int) {
	s.AddCallFault(CallFault{Method: method, Path: pathPattern, Count: n, LoseAnswer: true})
}

// LockTimeoutNext fails the next n calls matching method and pathPattern
// with the 500 of a VM config lock that timed out.
func (s *Sim) LockTimeoutNext(method, pathPattern string, n int) {
	s.AddCallFault(CallFault{Method: method, Path: pathPattern, Count: n, LockTimeout: true})
}

// AgentNeverStartsNext gives the next n VMs cloned a guest agent that never
// answers (see SetAgentNeverStarts), for a test that does not know their
// VMIDs in advance.
func (s *Sim) AgentNeverStartsNext(n int) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.agentNever += n
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

// ClearFaults removes every call, task and node fault and the agent fault
// of future VMs (agent and lock faults of existing VMs stay: they are VM
// state).
func (s *Sim) ClearFaults() {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.calls = nil
	s.faults.tasks = nil
	s.faults.nodes = map[string]unreachable{}
	s.faults.agentNever = 0
}

// lockTimeoutText is the error of a VM config lock not taken in time; the
// VMID names the lock file. A choice: a real host words it so, but the facts
// of docs/proxmox-behaviour.md did not observe it.
func lockTimeoutText(vmid string) string {
	return fmt.Sprintf("can't lock file '/var/lock/qemu-server/lock-%s.conf' - got timeout", vmid)
}

// callFaults waits out the latency faults of a call and returns how the
// other faults answer it: answer is nil when no fault answers the call
// (status is then meaningless); otherwise it writes the fault's answer,
// whose status is status (0 for a cut answer). lose says to cut the answer
// after the handler ran.
func (s *Sim) callFaults(r *http.Request, tmpl, concrete, vmid string) (status int, answer func(http.ResponseWriter), lose bool) {
	e := s.faults.take(r.Method, tmpl, concrete)
	if e.latency > 0 {
		t := time.NewTimer(e.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return 0, func(http.ResponseWriter) {}, false
		}
	}
	switch {
	case e.cut:
		return 0, func(w http.ResponseWriter) { cutAnswer(w, r) }, false
	case e.fail != nil:
		aerr := &apiError{status: e.fail.Status, message: e.fail.Message}
		return aerr.status, func(w http.ResponseWriter) { writeAPIError(w, r, aerr) }, false
	case e.lockTimedOut && vmid != "":
		aerr := errInternal(lockTimeoutText(vmid))
		return aerr.status, func(w http.ResponseWriter) { writeAPIError(w, r, aerr) }, false
	}
	return 0, nil, e.lose
}

// cutAnswer sends a status line, headers and half a body, then closes the
// connection.
func cutAnswer(w http.ResponseWriter, r *http.Request) {
	body := []byte(`{"data":{"truncated":"this answer was cut by a simulator fault"}}`)
	writeRaw(w, r, http.StatusOK, "OK", body[:len(body)/2], len(body))
}
