// Package pvesim is a Proxmox VE API simulator: an HTTP(S) server answering
// the subset of /api2/json that the proxmox provider uses, with the
// behaviour a real Proxmox VE 9.2 host showed (facts F1 to F26, described
// in docs/proxmox-behaviour.md and cited in comments as "F8: ...").
//
// A Sim holds a cluster built from a Config (nodes, storages, templates, API
// tokens with ACLs). Clients clone templates, write configs, start, stop,
// suspend and destroy VMs, read the guest agent, upload ISO images and delete
// volumes; long operations are tasks with UPIDs whose durations default to
// the real host's timings (F26) divided by Config.Speed.
//
// Errors are written the way pveproxy writes them (F1): the text is both the
// HTTP reason phrase and the JSON body's message. Because net/http cannot send
// a custom reason phrase, the simulator hijacks the connection for every
// non-200 answer and writes the status line itself, then closes the
// connection.
//
// Faults (unreachable nodes, failing calls, latency, task exit statuses,
// agents that never start, cut connections, leftover locks) and per-route
// request counters are available from Go (Sim methods) and from the admin
// HTTP handler (AdminHandler). The Sim calls a GuestRunner when a VM starts,
// stops or is destroyed; the default does nothing, and package guests runs
// the proxy each VM's seed configures, so that the VMs serve traffic.
//
// The simulator listens on loopback addresses only.
package pvesim
