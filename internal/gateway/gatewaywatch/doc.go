// Package gatewaywatch feeds a pool gateway's data path (package gateway)
// from the API: Watch keeps a gateway.Set equal to the pools' published
// lists (members.go), WatchAdminBans keeps a Gateway's administrator's bans
// equal to its ProxyGateway's spec.bans (adminbans.go). It holds the API
// client, the informers and the API types, so that the data path imports
// none of them; it feeds the gateway through Set.SetPool, Set.RefusePool,
// Metrics.ExpectPool and Gateway.SetAdminBans.
package gatewaywatch
