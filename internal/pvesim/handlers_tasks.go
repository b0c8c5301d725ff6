package pvesim

import "strconv"

// lookupTask returns a task the principal may read.
func (s *Sim) lookupTask(c *call) (*task, *apiError) {
	upid := c.params["upid"]
	if _, ok := parseUPID(upid); !ok {
		return nil, paramError(map[string]string{"upid": "unable to parse worker upid '" + upid + "'"})
	}
	t := s.tasks[upid]
	if t == nil || t.node != c.node {
		return nil, errInternal("no such task")
	}
	owner := t.user == c.p.user && t.token == c.p.token
	if !owner && !c.p.has("/nodes/"+c.node, "Sys.Audit") {
		return nil, errPerm("/nodes/"+c.node, "Sys.Audit")
	}
	return t, nil
}

// hTaskStatus answers GET /nodes/{node}/tasks/{upid}/status (F16).
func (s *Sim) hTaskStatus(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, aerr := s.lookupTask(c)
	if aerr != nil {
		return nil, aerr
	}
	return t.statusMap(), nil
}

// hTaskLog answers GET /nodes/{node}/tasks/{upid}/log.
func (s *Sim) hTaskLog(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, aerr := s.lookupTask(c)
	if aerr != nil {
		return nil, aerr
	}
	start, limit := 0, 50
	if v, ok := c.params["start"]; ok {
		start, _ = strconv.Atoi(v)
	}
	if v, ok := c.params["limit"]; ok {
		limit, _ = strconv.Atoi(v)
	}
	out := []map[string]any{}
	for i := start; i < len(t.log) && (limit <= 0 || i < start+limit); i++ {
		out = append(out, map[string]any{"n": i + 1, "t": t.log[i]})
	}
	if len(out) == 0 && t.running {
		out = append(out, map[string]any{"n": 1, "t": "no content"})
	}
	return out, nil
}

// TaskStatus returns a task's status and exitstatus ("" while running),
// for tests and benchmarks.
func (s *Sim) TaskStatus(upid string) (status, exitstatus string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[upid]
	if t == nil {
		return "", "", false
	}
	if t.running {
		return "running", "", true
	}
	return statusStopped, t.exit, true
}
