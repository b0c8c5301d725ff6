// Package guests makes the Proxmox VE simulator's VMs serve: for each VM
// that starts, it reads the NoCloud seed attached on ide2 as the guest's
// cloud-init would, takes the tinyproxy settings its user-data writes (port,
// basic-auth credentials, allowed sources) and runs the product's forward
// proxy with them on the VM's own loopback address. A request through a
// Ready Proxy then really works end to end, and a wrong rendering of the
// configuration shows up as a failed request.
package guests
