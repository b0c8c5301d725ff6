package forwardproxy

import (
	"errors"
	"net"
	"net/http"
)

// ProxyStatusHeader is RFC 9209's header, on every answer a Proxy with a
// Config.ProxyStatus name gives itself: "<name>; error=<type>". It names
// no next hop: the proxy's upstreams (a gateway's members) stay unnamed.
const ProxyStatusHeader = "Proxy-Status"

// RFC 9209 error types (section 2.3) that the proxy and its Upstreams use.
const (
	ProxyErrorDestinationUnavailable  = "destination_unavailable"
	ProxyErrorDestinationIPProhibited = "destination_ip_prohibited"
	ProxyErrorDestinationIPUnroutable = "destination_ip_unroutable"
	ProxyErrorDestinationNotFound     = "destination_not_found"
	ProxyErrorConnectionRefused       = "connection_refused"
	ProxyErrorConnectionTerminated    = "connection_terminated"
	ProxyErrorConnectionTimeout       = "connection_timeout"
	ProxyErrorConnectionLimitReached  = "connection_limit_reached"
	ProxyErrorHTTPRequestError        = "http_request_error"
	ProxyErrorHTTPRequestDenied       = "http_request_denied"
	ProxyErrorHTTPResponseTimeout     = "http_response_timeout"
	ProxyErrorInternal                = "proxy_internal_error"
)

// proxyErrorOf is the error type of a refusal that names none, by its
// status code.
func proxyErrorOf(code int) string {
	switch code {
	case http.StatusBadRequest, http.StatusRequestHeaderFieldsTooLarge, http.StatusHTTPVersionNotSupported:
		return ProxyErrorHTTPRequestError
	case http.StatusForbidden, http.StatusProxyAuthRequired:
		return ProxyErrorHTTPRequestDenied
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return ProxyErrorConnectionLimitReached
	case http.StatusBadGateway:
		return ProxyErrorDestinationUnavailable
	case http.StatusGatewayTimeout:
		return ProxyErrorConnectionTimeout
	}
	return ProxyErrorInternal
}

// timeoutErrorOf tells a dial's timeout from the wait for an answer.
func timeoutErrorOf(err error) string {
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "dial" {
		return ProxyErrorConnectionTimeout
	}
	return ProxyErrorHTTPResponseTimeout
}

// validProxyStatusName reports whether name is an RFC 8941 token, which a
// Proxy-Status member may be without quoting.
func validProxyStatusName(name string) bool {
	if name == "" {
		return false
	}
	if c := name[0]; c != '*' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !isTokenChar(c) && c != ':' && c != '/' {
			return false
		}
	}
	return true
}

// proxyStatus is the header value of refusal r from the proxy named name,
// "" without a name.
func proxyStatus(name string, r refusal) string {
	if name == "" {
		return ""
	}
	t := r.proxyError
	if t == "" {
		t = proxyErrorOf(r.code)
	}
	return name + "; error=" + t
}
