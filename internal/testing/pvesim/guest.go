package pvesim

import "net/netip"

// Guest describes a VM to a GuestRunner.
type Guest struct {
	// VMID, Node and Name identify the VM.
	VMID int
	Node string
	Name string
	// Address is the loopback address the guest reports through the agent
	// (GuestAddress) and should listen on.
	Address netip.Addr
	// Config is a copy of the VM config (ide2 names the NoCloud seed).
	Config map[string]string
	// SeedPath is the file holding the ISO attached on ide2, or "" (no ISO,
	// or a volume that was not uploaded through the simulator).
	SeedPath string
}

// GuestRunner runs what is inside the guests. The Sim calls Start when a VM
// leaves prelaunch and Stop when it stops (stop, shutdown, hibernate) or is
// destroyed. Calls are made from their own goroutine, outside the
// simulator's lock, in order per VM is not guaranteed; an implementation
// must tolerate Stop for a guest it never started.
type GuestRunner interface {
	// Start starts the guest's services.
	Start(g Guest) error
	// Stop stops them.
	Stop(g Guest)
}

// NopGuestRunner is the default GuestRunner: guests run nothing.
type NopGuestRunner struct{}

// Start implements GuestRunner.
func (NopGuestRunner) Start(Guest) error { return nil }

// Stop implements GuestRunner.
func (NopGuestRunner) Stop(Guest) {}
