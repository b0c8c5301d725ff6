package pvesim

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// task is a Proxmox worker task (F16).
type task struct {
	upid, node, typ, id, user, token string
	pid, pstart                      int
	start, end                       time.Time
	running                          bool
	// exit is the exitstatus once stopped: OK, WARNINGS: n, or an error text.
	exit string
	// forced is an exitstatus set by a fault, applied when the task ends.
	forced string
	log    []string
}

// upidFor formats a UPID (F16):
// UPID:<node>:<pid hex 8>:<pstart hex 8>:<starttime hex 8>:<type>:<id>:<user>!<tokenid>:
func upidFor(node string, pid, pstart int, start time.Time, typ, id, user, token string) string {
	// A ':' inside the id (a volid) is encoded, as the UPID fields are
	// ':'-separated.
	id = strings.ReplaceAll(id, ":", `\x3a`)
	return fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s!%s:", node, pid, pstart, start.Unix(), typ, id, user, token)
}

// newTask registers a running task. The caller holds s.mu.
func (s *Sim) newTask(node, typ, id string, p *principal) *task {
	s.nextPID++
	now := time.Now()
	t := &task{
		node: node, typ: typ, id: id, user: p.user, token: p.token,
		pid: s.nextPID, pstart: int(now.Sub(s.bootTime)/(10*time.Millisecond)) + 1000,
		start: now, running: true,
	}
	t.upid = upidFor(node, t.pid, t.pstart, now, typ, id, p.user, p.token)
	if f := s.faults.takeTaskFault(typ); f != "" {
		t.forced = f
	}
	s.tasks[t.upid] = t
	return t
}

// logf appends a line to the task log.
func (t *task) logf(format string, args ...any) {
	t.log = append(t.log, fmt.Sprintf(format, args...))
}

// failed reports whether a forced exitstatus makes the task fail, in which
// case its effect must not be applied. "OK" and "WARNINGS: n" succeed (F16).
func (t *task) failed() bool {
	return t.forced != "" && t.forced != "OK" && !strings.HasPrefix(t.forced, "WARNINGS: ")
}

// finish ends the task with errText ("" for success). A forced exitstatus
// overrides the result. The caller holds s.mu.
func (t *task) finish(errText string) {
	t.running = false
	t.end = time.Now()
	switch {
	case t.forced != "":
		t.exit = t.forced
	case errText != "":
		t.exit = errText
	default:
		t.exit = "OK"
	}
	switch {
	case t.exit == "OK":
		t.log = append(t.log, "TASK OK")
	case strings.HasPrefix(t.exit, "WARNINGS: "):
		t.log = append(t.log, "TASK "+t.exit)
	default:
		t.log = append(t.log, "TASK ERROR: "+t.exit)
	}
}

// statusMap is the answer of GET .../tasks/{upid}/status (F16).
func (t *task) statusMap() map[string]any {
	m := map[string]any{
		"upid": t.upid, "node": t.node, "type": t.typ, "id": t.id,
		"user": t.user, "tokenid": t.token, "pid": t.pid, "pstart": t.pstart,
		"starttime": t.start.Unix(), "status": "running",
	}
	if !t.running {
		m["status"] = statusStopped
		m["exitstatus"] = t.exit
	}
	return m
}

// parseUPID checks the UPID shape and returns its node.
func parseUPID(upid string) (string, bool) {
	parts := strings.Split(upid, ":")
	if len(parts) != 9 || parts[0] != "UPID" || parts[8] != "" {
		return "", false
	}
	for _, h := range parts[2:5] {
		if _, err := strconv.ParseUint(h, 16, 64); err != nil {
			return "", false
		}
	}
	return parts[1], true
}

// after runs fn under s.mu once d (a real-host duration) divided by the
// speed factor has passed, unless the simulator is closed by then.
func (s *Sim) after(d Duration, fn func()) {
	scaled := time.Duration(float64(d) / s.speed)
	time.AfterFunc(scaled, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return
		}
		fn()
	})
}

// afterTask is after for the end of task t, which HoldTasks can delay.
func (s *Sim) afterTask(t *task, d Duration, fn func()) {
	s.after(d, func() {
		if ends, ok := s.held[t.typ]; ok {
			s.held[t.typ] = append(ends, fn)
			return
		}
		fn()
	})
}

// HoldTasks keeps the upload (imgcopy) and volume delete (imgdel) tasks of
// taskType running past their duration, effect not yet applied, until
// release is called; release ends them in the order their durations passed.
// It lets a test order a task's end against the client's calls without
// waiting on the clock. One hold per type at a time.
func (s *Sim) HoldTasks(taskType string) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[string][]func(){}
	}
	if _, ok := s.held[taskType]; !ok {
		s.held[taskType] = nil
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			ends := s.held[taskType]
			delete(s.held, taskType)
			if s.closed {
				return
			}
			for _, fn := range ends {
				fn()
			}
		})
	}
}

// scaled returns a real-host duration divided by the speed factor.
func (s *Sim) scaled(d Duration) time.Duration {
	return time.Duration(float64(d) / s.speed)
}
