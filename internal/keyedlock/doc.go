// Package keyedlock provides a mutex per key whose Lock gives up when its
// context ends. Keys that nobody holds or waits for take no memory.
package keyedlock
