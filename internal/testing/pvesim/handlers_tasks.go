package pvesim

import (
	"slices"
	"strconv"
	"strings"
)

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

// hTasks answers GET /nodes/{node}/tasks, the node's task list, newest
// first: finished tasks (source=archive, the default), running ones
// (active) or both (all), from since on, at most limit (default 50) after
// skipping start, optionally only errors, one type, one VM or one user. A
// finished task carries its exitstatus as status, and its endtime; a running
// one has neither. The caller sees its own tasks, or all of them with
// Sys.Audit on the node, as Proxmox documents it.
func (s *Sim) hTasks(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.nodes[c.node]; !ok {
		return nil, errInternal("no such node '" + c.node + "'")
	}
	audit := c.p.has("/nodes/"+c.node, "Sys.Audit")
	source := c.params["source"]
	since, _ := strconv.ParseInt(c.params["since"], 10, 64)
	until, _ := strconv.ParseInt(c.params["until"], 10, 64)
	start, _ := strconv.Atoi(c.params["start"])
	limit := 50
	if v, ok := c.params["limit"]; ok {
		limit, _ = strconv.Atoi(v)
	}
	var list []*task
	for _, t := range s.tasks {
		switch {
		case t.node != c.node,
			!audit && (t.user != c.p.user || t.token != c.p.token),
			t.running && source != "active" && source != "all",
			!t.running && source == "active",
			t.start.Unix() < since,
			until != 0 && t.start.Unix() > until,
			paramTrue(c.params["errors"]) && (t.running || t.exit == "OK" || strings.HasPrefix(t.exit, "WARNINGS: ")),
			c.params["typefilter"] != "" && t.typ != c.params["typefilter"],
			c.params["vmid"] != "" && t.id != c.params["vmid"],
			c.params["userfilter"] != "" && !strings.Contains(strings.ToLower(t.user+"!"+t.token), strings.ToLower(c.params["userfilter"])):
			continue
		}
		list = append(list, t)
	}
	slices.SortFunc(list, func(a, b *task) int { return b.start.Compare(a.start) })
	out := []map[string]any{}
	for i, t := range list {
		if i < start {
			continue
		}
		if len(out) >= limit {
			break
		}
		m := map[string]any{"upid": t.upid, "node": t.node, "pid": t.pid, "pstart": t.pstart,
			"starttime": t.start.Unix(), "type": t.typ, "id": t.id, "user": t.user + "!" + t.token}
		if !t.running {
			m["status"] = t.exit
			m["endtime"] = t.end.Unix()
		}
		out = append(out, m)
	}
	return out, nil
}
