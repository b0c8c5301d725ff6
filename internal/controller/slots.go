package controller

import "sync"

// createSlots caps, per provider entry, how many Proxies have a create in
// flight: from the first Create call until the instance runs with an
// address, fails, or the Proxy goes. It lives in memory; after a restart
// each Proxy that is still being created takes its slot back at its first
// reconcile (hold), so the count converges without a scan. The zero value
// is ready; it is safe for concurrent use.
type createSlots struct {
	mu      sync.Mutex
	holders map[string]map[string]struct{} // entry -> Proxy keys
	entryOf map[string]string              // Proxy key -> entry
}

// acquire takes a slot of entry for key, or reports false when the entry's
// limit is reached. A key that holds a slot already keeps it.
func (c *createSlots) acquire(entry, key string, limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entryOf[key] == entry {
		return true
	}
	c.releaseLocked(key)
	if len(c.holders[entry]) >= limit {
		return false
	}
	c.addLocked(entry, key)
	return true
}

// hold takes a slot of entry for key even past the limit: the create is in
// flight already (found after a restart), and refusing to count it would
// let others start.
func (c *createSlots) hold(entry, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entryOf[key] == entry {
		return
	}
	c.releaseLocked(key)
	c.addLocked(entry, key)
}

// release frees key's slot, if it holds one.
func (c *createSlots) release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked(key)
}

// inFlight returns how many creates of entry hold a slot.
func (c *createSlots) inFlight(entry string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.holders[entry])
}

func (c *createSlots) addLocked(entry, key string) {
	if c.holders == nil {
		c.holders, c.entryOf = map[string]map[string]struct{}{}, map[string]string{}
	}
	if c.holders[entry] == nil {
		c.holders[entry] = map[string]struct{}{}
	}
	c.holders[entry][key] = struct{}{}
	c.entryOf[key] = entry
}

func (c *createSlots) releaseLocked(key string) {
	entry, ok := c.entryOf[key]
	if !ok {
		return
	}
	delete(c.holders[entry], key)
	delete(c.entryOf, key)
}
