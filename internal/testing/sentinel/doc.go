// Package sentinel captures what leaves an operator under test (its log
// lines and its spans) and finds secrets in it, in every spelling a logger
// or an encoder could give them: plain, quoted, hex, base64 and as a list of
// byte values. A Watch keeps the history, so that a secret learnt late (a
// password read from a Secret after the fact) is still looked for in text
// produced before, and text produced later is checked against every secret
// known so far: each finding is reported once, as soon as both are known.
package sentinel
