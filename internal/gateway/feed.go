package gateway

// The data path's inlets from the API: the watches of package
// gatewaywatch read the pools' published lists and the ProxyGateway's
// bans and feed them in through these methods and Gateway.SetAdminBans, so
// that this package needs no API client.

// SetPool replaces pool's members in s with entries (nil: the pool has
// none, or its list is gone) and keeps m in step: the members gauge counts
// them, and the series of the members that left are forgotten
// (Metrics.KeepDepartedFor). m may be nil.
func (s *Set) SetPool(pool string, entries []Entry, m *Metrics) {
	m.forget(s, pool, s.Update(pool, entries))
	m.setMembers(pool, len(entries))
}

// RefusePool empties pool in s, the object of its published list not being
// the pool's (reason, as the lists-refused metric labels it), and counts
// the refusal on m; m may be nil.
func (s *Set) RefusePool(pool, reason string, m *Metrics) {
	s.SetPool(pool, nil, m)
	m.refusedList(pool, reason)
}

// ExpectPool sets the members gauge of pool to 0 until its list comes: a
// pool whose list never comes (a name that does not exist) shows as one
// without members, for the alert on a gateway with none. m may be nil.
func (m *Metrics) ExpectPool(pool string) { m.setMembers(pool, 0) }

// setMembers records the number of members of pool; m may be nil.
func (m *Metrics) setMembers(pool string, n int) {
	if m != nil {
		m.members.WithLabelValues(pool).Set(float64(n))
	}
}

// refusedList counts a published list's object that was not the pool's;
// m may be nil.
func (m *Metrics) refusedList(pool, reason string) {
	if m != nil {
		m.listsRefused.WithLabelValues(pool, reason).Inc()
	}
}
