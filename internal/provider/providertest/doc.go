// Package providertest is the contract suite every provider type passes:
// the promises of internal/provider's doc comments, checked the same way for
// the fake, proxmox on the simulator, kvm2 and kvm on the libvirt lab,
// kubernetes on envtest and any type that comes next. A provider's own tests then keep only what is specific to it
// (its API calls, its object shapes, its failure modes).
//
// A provider type joins by implementing Harness, usually in its package's
// tests, and calling Run:
//
//	func TestContract(t *testing.T) {
//		providertest.Run(t, func(t *testing.T) providertest.Harness { return newContractHarness(t) })
//	}
package providertest
