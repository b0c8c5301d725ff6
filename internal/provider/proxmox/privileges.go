package proxmox

import "strings"

// RootPrivileges are the privileges the provider's API token needs in one
// role on "/" (F17). VM.Monitor is PVE 8's name for reading the guest agent;
// PVE 9 calls it VM.GuestAgent.Audit, and a role that lists both works on
// either. This is the one list: docs/proxmox.md, docs/proxmox-behaviour.md,
// the simulator's example and the simulated labs follow it, and
// privileges_test.go checks that they do.
var RootPrivileges = []string{
	"VM.Allocate", "VM.Clone", "VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory",
	"VM.Config.Network", "VM.Config.Options", "VM.Config.CDROM", "VM.PowerMgmt",
	"VM.Monitor", "VM.GuestAgent.Audit", "VM.Audit", "Datastore.AllocateSpace",
	"Datastore.AllocateTemplate", "Datastore.Audit", "SDN.Use", "Sys.Audit",
}

// SeedStoragePrivileges are the role on the seed storage only
// (/storage/<seed storage>): Datastore.Allocate, the one privilege that
// deletes seeds (F13), with what the token already has on "/" for a
// storage repeated, since an ACL on a more specific path replaces the
// inherited one.
var SeedStoragePrivileges = []string{"Datastore.Allocate", "Datastore.AllocateTemplate", "Datastore.AllocateSpace", "Datastore.Audit"}

// PrivilegesYAML renders privileges as a YAML flow sequence, for the
// simulator configurations of the tests and labs.
func PrivilegesYAML(privileges []string) string {
	return "[" + strings.Join(privileges, ", ") + "]"
}
