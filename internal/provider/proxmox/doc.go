// Package proxmox is the provider that runs each Proxy as a VM on a Proxmox
// VE cluster: a full clone of a template, booted with a NoCloud seed ISO
// that carries the proxy's cloud-init user-data.
//
// The facts F1 to F26 cited in the code ("F8") and the steps ("create step
// 6") are sections of docs/proxmox-behaviour.md: the Proxmox VE behaviour the
// provider relies on, and the steps it takes because of it. Create never blocks for a whole clone-to-running sequence: each call
// looks at what exists on the API and does the next step, returning
// provider.NewInProgress while a task runs, so that a restarted operator
// resumes from observable state.
package proxmox
