package published

import (
	"bytes"
	"encoding/json"
	"net"
	"net/url"
	"strconv"
	"time"
)

// Keys of a Proxy's credentials Secret (status.credentialsSecretName), a
// Secret of type kubernetes.io/basic-auth.
const (
	CredentialsKeyUsername = "username"
	CredentialsKeyPassword = "password"
	// CredentialsKeyURL holds the ready-to-use URL with the credentials,
	// once the proxy's address is known.
	CredentialsKeyURL = "url"
)

// Keys of a pool's published list, in the Secret ListName(pool) (URLs with
// credentials) and the ConfigMap of the same name (without).
const (
	// ListKeyText is proxies.txt: one URL a line.
	ListKeyText = "proxies.txt"
	// ListKeyJSON is proxies.json: a JSON array of ListEntry.
	ListKeyJSON = "proxies.json"
)

// Labels of a pool's published Secret and ConfigMap: LabelManagedBy with
// the value ManagedBy, and crawl.example.com/pool (v1alpha1.LabelPool)
// with the pool's name. With them each carries a controller reference to
// its ProxyPool; a reader (the gateway) follows only an object that has
// all three.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "egress-proxies-operator"
)

// ListName is the name of a pool's published Secret and ConfigMap.
func ListName(pool string) string { return pool + "-proxies" }

// ListEntry is one element of proxies.json. A reader computes a member's age
// from Created: an age field would change the list every second and wake
// every reader for nothing.
type ListEntry struct {
	// Name is the member Proxy.
	Name string `json:"name"`
	// URL is http://user:password@address:port in the Secret, and
	// http://address:port in the ConfigMap.
	URL string `json:"url"`
	// Provider and Zone are where the member runs.
	Provider string `json:"provider"`
	Zone     string `json:"zone"`
	// EgressIP is the address the world sees, when the probe has a check
	// URL.
	EgressIP string `json:"egressIP,omitempty"`
	// Created is when the member was created.
	Created time.Time `json:"created"`
	// Engine is the forward proxy the member runs (EngineForwardProxy,
	// EngineTinyproxy); empty when not known. A gateway keeps its
	// connections to a member alive only for EngineForwardProxy.
	Engine string `json:"engine,omitempty"`
}

// The engines a member may run, as ListEntry.Engine names them.
const (
	// EngineForwardProxy is this project's own forward proxy (the
	// operator's `proxy` subcommand): it parses every answer it relays
	// and writes nothing past the answer's framing.
	EngineForwardProxy = "egress-proxies-operator"
	// EngineTinyproxy is tinyproxy, which relays an origin's answer as
	// raw bytes once it has passed the head on.
	EngineTinyproxy = "tinyproxy"
)

// ProxyURL is the URL of a proxy at address and port: http://address:port,
// with user (nil for none) as its userinfo. The status's url, the
// credentials Secret's url and the published lists are all written by it.
func ProxyURL(address string, port int32, user *url.Userinfo) string {
	u := url.URL{Scheme: "http", User: user, Host: net.JoinHostPort(address, strconv.Itoa(int(port)))}
	return u.String()
}

// RenderList returns proxies.txt and proxies.json of the entries, as the
// pool controller publishes them: one URL a line, and an indented JSON
// array ([] for none, so that a reader can always parse it).
func RenderList(entries []ListEntry) (txt, js []byte) {
	var b bytes.Buffer
	for _, e := range entries {
		b.WriteString(e.URL)
		b.WriteByte('\n')
	}
	if entries == nil {
		entries = []ListEntry{}
	}
	js, _ = json.MarshalIndent(entries, "", "  ") //nolint:errchkjson // strings and a time always marshal.
	return b.Bytes(), append(js, '\n')
}
