// Package cloudinitparse reads the tinyproxy settings (port, basic-auth
// credentials, allowed sources) back out of cloud-init user-data, following
// cloud-init's own rules for the parts it handles: multipart messages, gzip,
// base64 write_files content, and the merging of several cloud-configs
// writing one file.
//
// It is for the test world only: a simulated guest (internal/testing/pvesim/guests)
// uses it to run the proxy its seed configures, and its tests check
// internal/cloudinit's renderer against it. The operator never parses
// user-data.
package cloudinitparse
