package libvirt

import (
	"context"
	"net/netip"
)

// domState is libvirt's domain state (virDomainState); virsh domstats and
// the RPC protocol report the same numbers.
type domState int

// The states of virDomainState.
const (
	stateNone        domState = 0
	stateRunning     domState = 1
	stateBlocked     domState = 2
	statePaused      domState = 3
	stateShutdown    domState = 4
	stateShutoff     domState = 5
	stateCrashed     domState = 6
	statePMSuspended domState = 7
)

func (s domState) String() string {
	switch s {
	case stateRunning:
		return "running"
	case stateBlocked:
		return "blocked"
	case statePaused:
		return "paused"
	case stateShutdown:
		return "shutting down"
	case stateShutoff:
		return "shut off"
	case stateCrashed:
		return "crashed"
	case statePMSuspended:
		return "pmsuspended"
	case stateNone:
	}
	return "no state"
}

// active reports whether the domain has a running QEMU process.
func (s domState) active() bool {
	return s == stateRunning || s == stateBlocked || s == statePaused || s == stateShutdown || s == statePMSuspended
}

// domainInfo is one domain of a host's listing.
type domainInfo struct {
	Name  string
	UUID  string
	ID    int // the running process's id; -1 or 0 when inactive
	State domState
}

// lease is one DHCP lease of a libvirt network.
type lease struct {
	MAC  string
	Addr netip.Addr
}

// guestInterface is one interface the guest agent reports.
type guestInterface struct {
	Name  string
	MAC   string
	Addrs []netip.Addr
}

// driver is how the provider talks to a host: libvirt's RPC over an SSH
// tunnel (kvm2) or virsh over SSH (kvm). Every method takes the host, makes
// as few round trips as it can, and maps "does not exist" to the errNo*
// errors and transport failures to *HostError.
type driver interface {
	// listDomains lists every domain of the host with its state: one round
	// trip.
	listDomains(ctx context.Context, h Host) ([]domainInfo, error)
	// domainXML returns a domain's definition.
	domainXML(ctx context.Context, h Host, name string) (string, error)
	// defineDomain defines (creates or replaces) a persistent domain.
	defineDomain(ctx context.Context, h Host, xml string) error
	// startDomain starts a defined domain.
	startDomain(ctx context.Context, h Host, name string) error
	// shutdownDomain asks the guest to power off (ACPI).
	shutdownDomain(ctx context.Context, h Host, name string) error
	// destroyDomain stops a domain at once.
	destroyDomain(ctx context.Context, h Host, name string) error
	// undefineDomain removes a domain's definition with its NVRAM, managed
	// save image and snapshot and checkpoint metadata.
	undefineDomain(ctx context.Context, h Host, name string) error
	// volumeXML returns a volume's definition.
	volumeXML(ctx context.Context, h Host, pool, name string) (string, error)
	// createVolume creates a volume from its definition.
	createVolume(ctx context.Context, h Host, pool, xml string) error
	// cloneVolume creates a volume from its definition, filled from another.
	cloneVolume(ctx context.Context, h Host, pool, xml, from string) error
	// uploadVolume writes data into a volume from its start.
	uploadVolume(ctx context.Context, h Host, pool, name string, data []byte) error
	// deleteVolume deletes a volume.
	deleteVolume(ctx context.Context, h Host, pool, name string) error
	// listVolumes lists the names of a pool's volumes.
	listVolumes(ctx context.Context, h Host, pool string) ([]string, error)
	// ejectMedia empties a running domain's CD-ROM drive (the disk with
	// target dev), in the live domain and in its definition, even when the
	// guest has locked the tray.
	ejectMedia(ctx context.Context, h Host, name, dev string) error
	// poolXML returns an active pool's definition (errInactive when the
	// pool is defined but not running).
	poolXML(ctx context.Context, h Host, pool string) (string, error)
	// networkActive returns nil for an active network, errInactive for an
	// inactive one.
	networkActive(ctx context.Context, h Host, network string) error
	// leases lists the network's DHCP leases.
	leases(ctx context.Context, h Host, network string) ([]lease, error)
	// agentInterfaces asks the guest agent for the guest's addresses.
	agentInterfaces(ctx context.Context, h Host, name string) ([]guestInterface, error)
	// ping checks that libvirt answers.
	ping(ctx context.Context, h Host) error
	// close ends every connection.
	close()
	// calls is the number of round trips to libvirt so far.
	calls() uint64
}
