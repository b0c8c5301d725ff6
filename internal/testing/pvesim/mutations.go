package pvesim

import (
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Mutation is one mutating API call (POST, PUT or DELETE) that passed
// authentication and matched a served route, whatever its outcome: a call
// refused by a fault, a lock or a permission check is recorded too, so that
// a test can say exactly which VMs and volumes a client tried to change.
type Mutation struct {
	// At is when the call arrived.
	At time.Time `json:"at"`
	// Token is the caller's token id, `<user>@<realm>!<tokenid>`.
	Token string `json:"token"`
	// Method and Route are the HTTP method and the route template
	// ("/nodes/{node}/qemu/{vmid}/clone"); Path is the concrete path below
	// /api2/json.
	Method string `json:"method"`
	Route  string `json:"route"`
	Path   string `json:"path"`
	// Node is the node of the path, VMID the VMID of the path (0 when the
	// path has none), NewID the `newid` of a clone (the VM it creates) and
	// Volume the volid of a content deletion or of an upload (known once
	// the upload was read).
	Node   string `json:"node,omitempty"`
	VMID   int    `json:"vmid,omitempty"`
	NewID  int    `json:"newid,omitempty"`
	Volume string `json:"volume,omitempty"`
	// Status is the HTTP status answered; 0 when the answer was cut.
	Status int `json:"status"`
	// Effect is true when the call reached its handler, so that its effect
	// may have taken place (LoseAnswer cuts the answer of such a call).
	Effect bool `json:"effect"`
}

// isMutating reports whether a method changes state on Proxmox VE.
func isMutating(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodDelete
}

// startMutation appends a mutating call to the log as it arrives and
// returns its index, for finishMutation.
func (s *Sim) startMutation(m Mutation) int {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	s.mutations = append(s.mutations, m)
	return len(s.mutations) - 1
}

// finishMutation records the outcome of a call started with startMutation.
func (s *Sim) finishMutation(i int, m Mutation) {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	if i < len(s.mutations) {
		s.mutations[i] = m
	}
}

// Mutations returns every mutating call so far, in arrival order; a call
// still being served has Status 0.
func (s *Sim) Mutations() []Mutation {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	return slices.Clone(s.mutations)
}

// MutationsOf returns the mutating calls whose path names vmid or that
// clone onto it (NewID).
func (s *Sim) MutationsOf(vmid int) []Mutation {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	var out []Mutation
	for _, m := range s.mutations {
		if m.VMID == vmid || m.NewID == vmid {
			out = append(out, m)
		}
	}
	return out
}

// newMutation starts the record of a mutating call from its path
// parameters and, for a clone, its newid.
func newMutation(r *http.Request, p *principal, tmpl, concrete string, pathParams map[string]string) *Mutation {
	m := &Mutation{At: time.Now(), Token: p.user + "!" + p.token, Method: r.Method, Route: tmpl, Path: concrete,
		Node: pathParams["node"], Volume: pathParams["volume"]}
	m.VMID, _ = strconv.Atoi(pathParams["vmid"])
	return m
}
