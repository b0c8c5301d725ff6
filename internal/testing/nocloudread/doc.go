// Package nocloudread reads a NoCloud seed image back: the ISO 9660 image
// that internal/nocloud writes, or one made by genisoimage, as cloud-init
// finds it on a VM's seed drive (Joliet names first, then Rock Ridge, then the
// 8.3 names).
//
// It is for the test world only: simulated guests (internal/testing/pvesim/guests,
// and any other simulator) read their seed with it, and its tests check the
// writer against an independent reader and against genisoimage's images. The
// operator never reads a seed.
package nocloudread
