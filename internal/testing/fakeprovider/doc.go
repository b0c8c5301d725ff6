// Package fakeprovider is a stateful, in-memory provider.Provider for tests:
// it keeps instances, honours the contract (idempotent Create keyed by owner
// and name, Delete of a missing instance succeeds, foreign instances are never
// listed nor deleted), records every call, injects errors per operation and
// adds latency. Tests drive the instances' life with SetState and Vanish.
package fakeprovider
