// Package clientcheck drives the simulator with an independent Proxmox API
// client, github.com/luthermonson/go-proxmox, which nobody in this project
// wrote. It is a separate module (its own go.mod) so that the client stays a
// dependency of this check only, not of the operator:
//
//	cd internal/testing/pvesim/clientcheck && go test ./...
package clientcheck
