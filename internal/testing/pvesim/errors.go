package pvesim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// apiError is a failed API call, written as pveproxy writes it (F1).
type apiError struct {
	// status is the HTTP status code.
	status int
	// message is Proxmox's text without the trailing newline.
	message string
	// fields are the field errors of a 400 (parameter name to message).
	fields map[string]string
}

func (e *apiError) Error() string { return e.message }

// errf builds an apiError with a formatted message.
func errf(status int, format string, args ...any) *apiError {
	return &apiError{status: status, message: fmt.Sprintf(format, args...)}
}

// paramError is the 400 "Parameter verification failed." with field errors (F1).
func paramError(fields map[string]string) *apiError {
	return &apiError{status: http.StatusBadRequest, message: msgParamVerification, fields: fields}
}

// Proxmox's own texts (quoted facts), byte for byte.
const (
	msgParamVerification = "Parameter verification failed."
	msgNoTicket          = "No ticket"              // F22
	msgAuthFailed        = "Authentication failed!" // F22
)

// errNoConfig is F2: the answer for a VMID without a QEMU config on the node.
func errNoConfig(node string, vmid int) *apiError {
	return errf(http.StatusInternalServerError, "Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid)
}

// errLocked is F7: a write on a locked VM.
func errLocked(lock string) *apiError {
	return errf(http.StatusInternalServerError, "VM is locked (%s)", lock)
}

// errPerm is the 403 of a failed permission check (F13).
func errPerm(path, privs string) *apiError {
	return errf(http.StatusForbidden, "Permission check failed (%s, %s)", path, privs)
}

// errorBody is the JSON body of a failed call (F1).
type errorBody struct {
	Errors  map[string]string `json:"errors,omitempty"`
	Message string            `json:"message"`
	Data    any               `json:"data"`
}

// reasonPhrase makes a message usable as an HTTP reason phrase.
func reasonPhrase(msg string) string {
	msg = strings.TrimRight(msg, "\n")
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r < 0x20 {
			return ' '
		}
		return r
	}, msg)
}

// writeAPIError writes e with its text as the reason phrase (F1). A 401 has an
// empty body; other errors carry {"message": "...\n", "data": null} and, for
// 400, "errors". The connection is hijacked to write a custom status line and
// closed afterwards.
func writeAPIError(w http.ResponseWriter, r *http.Request, e *apiError) {
	var body []byte
	if e.status != http.StatusUnauthorized {
		b, err := json.Marshal(errorBody{Errors: e.fields, Message: e.message + "\n"})
		if err == nil {
			body = b
		}
	}
	writeRaw(w, r, e.status, reasonPhrase(e.message), body, len(body))
}

// writeRaw hijacks the connection and writes a status line with any reason
// phrase, headers, and body. declaredLen may exceed len(body) to cut a
// response short (a fault). Without hijack support it falls back to
// WriteHeader, losing the reason phrase.
func writeRaw(w http.ResponseWriter, r *http.Request, status int, reason string, body []byte, declaredLen int) {
	// Drain a little of an unread request body so that closing the
	// connection does not reset it before the client reads the answer.
	if r.Body != nil {
		_, _ = io.CopyN(io.Discard, r.Body, 1<<20)
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	bw := buf.Writer
	if bw == nil {
		bw = bufio.NewWriter(conn)
	}
	var sb strings.Builder
	sb.WriteString("HTTP/1.1 ")
	sb.WriteString(strconv.Itoa(status))
	sb.WriteString(" ")
	sb.WriteString(reason)
	sb.WriteString("\r\nCache-Control: max-age=0\r\nConnection: close\r\nPragma: no-cache\r\nServer: pve-api-daemon/3.0\r\n")
	if len(body) > 0 || declaredLen > 0 {
		sb.WriteString("Content-Type: application/json;charset=UTF-8\r\n")
	}
	sb.WriteString("Content-Length: ")
	sb.WriteString(strconv.Itoa(declaredLen))
	sb.WriteString("\r\nDate: ")
	sb.WriteString(nowHTTPDate())
	sb.WriteString("\r\n\r\n")
	_, _ = bw.WriteString(sb.String())
	_, _ = bw.Write(body)
	_ = bw.Flush()
}

// writeData writes a successful answer {"data": v} and returns the length
// of its body.
func writeData(w http.ResponseWriter, v any) int {
	b, err := json.Marshal(map[string]any{"data": v})
	if err != nil {
		b = []byte(`{"data":null}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json;charset=UTF-8")
	h.Set("Cache-Control", "max-age=0")
	h.Set("Pragma", "no-cache")
	h.Set("Server", "pve-api-daemon/3.0")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return len(b)
}
