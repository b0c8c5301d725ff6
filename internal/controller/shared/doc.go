// Package shared holds the few helpers that more than one loop of
// internal/controller needs: the Proxy reconciler (internal/controller) and
// the ProxyPool and ProxyGateway reconcilers (internal/controller/proxypool,
// internal/controller/proxygateway), which live in packages of their own and
// may not import each other or their parent (internal/archtest).
//
// It is named for what it is, the code the loops share, and holds nothing
// that only one loop uses: the label the operator puts on what it makes
// (LabelManagedBy), the delay before looking again at an object the cache
// has not shown yet (CacheDelay), generated credentials
// (RandomCredentials), the canonical form of an egress policy
// (PolicyBytes) and the typed concurrent map the loops remember objects in
// between reconciles (Memo). It imports nothing of the controller.
package shared
