// Package libvirt runs proxies as libvirt domains on a set of hosts reached
// over SSH: the provider types kvm2 (libvirt's RPC protocol tunnelled over
// SSH to the host's libvirt socket) and kvm (virsh run over SSH, for hosts
// where only a shell is allowed). Both share one host model, one config
// block and one implementation of the provider contract; they differ only
// in their driver.
//
// Every domain the operator creates carries a mark in its <metadata>, under
// the operator's own XML namespace (MarkNamespace): the owner Proxy's UID,
// the instance name and the creation time, signed with the installation's
// key (internal/ownership) for this entry, host and domain; a domain whose
// mark does not verify is foreign. Domain, volume and pool XML is
// built and read with libvirt.org/go/libvirtxml. docs/libvirt.md describes
// the host prerequisites, the configuration and the verdicts.
package libvirt
