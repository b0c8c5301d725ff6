// Package modroot finds this repository's root from the working directory:
// the nearest directory at or above it whose go.mod declares this module.
// Tests (go test runs them in their package's directory) and the programs
// make runs (go run, from the root) use it to find config/, docs/ and hack/.
// They used to find them from their own source file's path
// (runtime.Caller), which -trimpath, as make test builds, makes
// module-relative.
package modroot
