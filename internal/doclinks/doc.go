// Package doclinks holds the test that keeps the documentation's links
// true: every relative link of README.md, CHANGELOG.md and the Markdown
// files under docs/, config/, charts/ and hack/ names a file of the
// repository and, when it has a fragment, a heading or an explicit anchor
// of that file. It has no code of its own.
package doclinks
