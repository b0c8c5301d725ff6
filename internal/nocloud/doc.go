// Package nocloud builds the seed that cloud-init's NoCloud datasource reads:
// an ISO 9660 image labelled "cidata" holding the files user-data, meta-data
// and vendor-data in its root directory.
//
// The image is written in pure Go, deterministically (fixed timestamps, a
// fixed layout), so that the same Seed always yields the same bytes and a
// retried upload sends exactly what the first attempt sent. Size returns the
// image's length before it is written, so that an upload can stream it with
// an exact Content-Length.
//
// ISO 9660 level 1 names are upper-case 8.3 names (USER_DAT.;1); the real
// names, with their lower case and hyphens, are recorded in a Joliet
// Supplementary Volume Descriptor, which Linux (and therefore cloud-init)
// reads when it mounts the image. This is the layout that
// `genisoimage -J -V cidata` produces, minus Rock Ridge.
//
// The same writer makes the guest engine's payload image (payload.go):
// label EPENGINE, the binaries by name, content-addressed by the image's
// digest (Payload.Digest, PayloadImageName), so that a provider stores it
// once per storage and version (docs/guest-engine.md).
//
// The package ships in the operator (the VM providers upload its seeds).
// Reading a seed back is only for tests and simulators: that is
// internal/testing/nocloudread.
package nocloud
