// Package libvirt holds the end-to-end tests of the kvm2 and kvm provider
// types: the operator, built the way the binary builds it, on envtest,
// against a real private libvirt host (internal/testing/libvirtlab) that
// boots real Debian guests running real cloud-init and tinyproxy.
package libvirt
