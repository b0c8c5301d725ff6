// Package sharedread shares one read of a slow, rate-limited source (a
// hypervisor's VM listing, a node's task list) among every caller that can
// use the same answer: the last answer is kept with the time its read
// started, a caller says how old an answer it accepts, and at most one read
// is in flight at a time. It is what lets the VM providers poll a thousand
// instances at the cost of one listing per poll interval.
//
// It sits beside internal/keyedlock: a leaf of the project, importing
// nothing of the project's own.
package sharedread
