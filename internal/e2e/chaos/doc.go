// Package chaos holds the seeded chaos run of the operator on the Proxmox VE
// simulator (docs/testing.md, "Chaos run"): Proxies created, replaced and
// deleted over a long simulated period while the simulator injects faults
// and the operator is killed and restarted at random points, with the
// invariants (one VM per Proxy, nothing left after delete, no foreign VM
// touched, no secret in any output) checked at every poll.
package chaos
