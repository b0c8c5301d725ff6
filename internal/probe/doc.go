// Package probe checks a proxy from outside, the way a crawler uses it: it
// sends requests through the proxy and looks at the answers.
//
// HTTP is the real prober. Each Probe makes up to three requests, each on its
// own connection to the proxy:
//
//   - with a wrong password, expecting 407: the proxy answers and is not
//     open; for a proxy without authentication, a request no proxy
//     forwards (origin-form "GET /"), expecting any HTTP answer;
//   - with the right credentials, to a destination the proxy's egress policy
//     denies (by default http://169.254.169.254/, the link-local metadata
//     address), expecting 403: the credentials are accepted and the policy
//     holds. No packet leaves the proxy for that destination. This check is
//     on only when Target.DeniedURL is set;
//   - with the right credentials, to the check URL when one is configured
//     (an IP-echo service that answers with the caller's address as plain
//     text), expecting 200 and an IP address: the egress address.
//
// Without a check URL and a denied URL, a probe needs no site outside the
// proxy. Credentials never appear in a Result or an error.
//
// Prober is the seam: controllers take a Prober, the envtest suites give
// them internal/testing/fakeprobe.
package probe
