// Package config loads the providers configuration: the YAML file, mounted
// from a ConfigMap, that lists the provider entries proxies can run on, with
// their catalogues of zones, machine types and images and one type-specific
// block each.
//
// Decoding is strict: an unknown field, an unknown type, a block that does
// not match its entry's type, duplicate names or an empty catalogue are
// errors that name the entry and the field path, and the operator refuses to
// start on them. The package knows the shape of each type's block only
// through a Registry built from the registered provider types
// (internal/setup.Types); each block lives in its provider's package, and
// this package imports no provider code.
package config
