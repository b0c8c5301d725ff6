package proxmox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/egress-proxies/egress-proxies-operator/internal/nocloud"
)

const (
	tracerName = "github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
	// maxErrorBody caps how much of an error answer is read.
	maxErrorBody = 64 << 10
	// maxBody caps a successful answer (a listing of thousands of VMs fits).
	maxBody = 32 << 20
	// callTimeout bounds one API call other than an upload.
	callTimeout = 30 * time.Second
	// defaultUploadTimeout bounds one seed upload, body and answer. A seed
	// is well under a MiB; a storage that takes longer is stuck, and the
	// upload is retried rather than left holding a worker (and the seed's
	// credentials in memory) without end.
	defaultUploadTimeout = 2 * time.Minute
)

// tokenPattern is the shape of an API token: user@realm!tokenid=secret.
var tokenPattern = regexp.MustCompile(`^[^@\s!=]+@[^@\s!=]+![^@\s!=]+=\S+$`)

// APIError is an answer of the API other than 200 (F1).
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Message is the trimmed body message, or the reason phrase.
	Message string
	// Fields are the field errors of a 400.
	Fields map[string]string
}

// Error returns the status, message and field errors.
func (e *APIError) Error() string {
	msg := fmt.Sprintf("%d %s", e.Status, e.Message)
	if len(e.Fields) > 0 {
		keys := make([]string, 0, len(e.Fields))
		for k := range e.Fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+": "+strings.TrimSpace(e.Fields[k]))
		}
		msg += " (" + strings.Join(parts, "; ") + ")"
	}
	return msg
}

// CredentialsError says the token file cannot be used; no request was sent.
type CredentialsError struct {
	// Missing is true when the file does not exist (yet).
	Missing bool
	// Problem says what is wrong, never the content.
	Problem string
}

// Error describes the problem.
func (e *CredentialsError) Error() string { return "api token: " + e.Problem }

// CAError says the CA file cannot be used.
type CAError struct {
	// Missing is true when the file does not exist (yet): Transient.
	Missing bool
	// Problem says what is wrong.
	Problem string
}

// Error describes the problem.
func (e *CAError) Error() string { return "ca file: " + e.Problem }

// TaskStatus is the state of a task (F16).
type TaskStatus struct {
	Status     string `json:"status"`
	ExitStatus string `json:"exitstatus"`
}

// TaskEntry is one task of a node's task list: a finished task's status is
// its exit status, a running task has none.
type TaskEntry struct {
	UPID   string `json:"upid"`
	Status string `json:"status"`
}

// taskListLimit bounds a node's task list; a task past it is read alone.
const taskListLimit = 2000

// tasks lists a node's tasks, running and finished, that started at or
// after since (Unix seconds, the node's clock).
func (c *client) tasks(ctx context.Context, node string, since int64) ([]TaskEntry, error) {
	var out []TaskEntry
	err := c.do(ctx, call{name: "task list", method: http.MethodGet, node: node,
		path:  "/nodes/" + url.PathEscape(node) + "/tasks",
		query: url.Values{"source": {"all"}, "since": {strconv.FormatInt(since, 10)}, "limit": {strconv.Itoa(taskListLimit)}}}, &out)
	return out, err
}

// activeTasks lists the tasks of type typ running on node.
func (c *client) activeTasks(ctx context.Context, node, typ string) ([]TaskEntry, error) {
	var out []TaskEntry
	err := c.do(ctx, call{name: "running tasks", method: http.MethodGet, node: node,
		path:  "/nodes/" + url.PathEscape(node) + "/tasks",
		query: url.Values{"source": {"active"}, "typefilter": {typ}, "limit": {strconv.Itoa(taskListLimit)}}}, &out)
	return out, err
}

// tokenUser is the token's user@realm!tokenid, the user a UPID names
// (F16); never the secret.
func (c *client) tokenUser() (string, error) {
	tok, err := c.token()
	user, _, _ := strings.Cut(tok, "=")
	return user, err
}

// Done reports whether the task stopped.
func (t TaskStatus) Done() bool { return t.Status == "stopped" }

// OK reports whether a stopped task succeeded (WARNINGS count as success).
func (t TaskStatus) OK() bool {
	return t.ExitStatus == "OK" || strings.HasPrefix(t.ExitStatus, "WARNINGS")
}

// Resource is one entry of /cluster/resources?type=vm (F8).
type Resource struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	VMID     int    `json:"vmid"`
	Name     string `json:"name"`
	Node     string `json:"node"`
	Status   string `json:"status"`
	Template int    `json:"template"`
	Tags     string `json:"tags"`
	Lock     string `json:"lock"`
	Uptime   int64  `json:"uptime"`
}

// VMStatus is status/current (F14).
type VMStatus struct {
	Name      string `json:"name"`
	Status    string `json:"status"`
	QMPStatus string `json:"qmpstatus"`
	Uptime    int64  `json:"uptime"`
	Lock      string `json:"lock"`
}

// NodeVM is one entry of /nodes/{node}/qemu?full=1. Unlike the cluster-wide
// listing, it carries the qmpstatus of a running VM (F14: paused, prelaunch).
type NodeVM struct {
	VMID      int    `json:"vmid"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	QMPStatus string `json:"qmpstatus"`
	Uptime    int64  `json:"uptime"`
	Lock      string `json:"lock"`
}

// AgentInterface is one interface reported by the guest agent (F21).
type AgentInterface struct {
	Name        string `json:"name"`
	IPAddresses []struct {
		Address string `json:"ip-address"`
		Type    string `json:"ip-address-type"`
	} `json:"ip-addresses"`
}

// client is a thin client of the Proxmox VE API: one method per endpoint.
type client struct {
	base      string // ends in /api2/json
	tokenFile string
	caFile    string
	insecure  bool

	// uploadTimeout bounds an upload; zero means defaultUploadTimeout.
	uploadTimeout time.Duration

	mu   sync.Mutex
	http *http.Client // built once the CA has loaded
}

func newClient(apiURL, tokenFile, caFile string, insecure bool) *client {
	return &client{base: strings.TrimRight(apiURL, "/") + "/api2/json", tokenFile: tokenFile, caFile: caFile, insecure: insecure}
}

// token reads the token file; it never returns the content in an error.
func (c *client) token() (string, error) {
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return "", &CredentialsError{Missing: errors.Is(err, fs.ErrNotExist), Problem: fmt.Sprintf("cannot read token file %s: %s", c.tokenFile, pathErrText(err))}
	}
	tok := strings.TrimSpace(string(b))
	if !tokenPattern.MatchString(tok) {
		return "", &CredentialsError{Problem: fmt.Sprintf("token file %s does not hold one line user@realm!tokenid=secret", c.tokenFile)}
	}
	return tok, nil
}

// pathErrText is the cause of a file error without repeating the path.
func pathErrText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// httpClient returns the HTTP client, loading the CA on first use (F18:
// HTTP/1.1 only).
func (c *client) httpClient() (*http.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.http != nil {
		return c.http, nil
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if c.insecure {
		tlsConf.InsecureSkipVerify = true // the admin chose insecureSkipTLSVerify; New logs a warning.
	} else {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, &CAError{Missing: errors.Is(err, fs.ErrNotExist), Problem: fmt.Sprintf("cannot read %s: %s", c.caFile, pathErrText(err))}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &CAError{Problem: c.caFile + " holds no PEM certificate"}
		}
		tlsConf.RootCAs = pool
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   false,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     60 * time.Second,
	}
	c.http = &http.Client{Transport: tr}
	return c.http, nil
}

// call describes one API request.
type call struct {
	name    string // for logs and spans: "clone", "get config", ...
	method  string
	path    string // below /api2/json, escaped
	node    string
	vmid    int
	storage string // the storage a storage call addresses
	// Details logged with the call when set: the new VM of a clone, the
	// file of an upload, the volume of a volume delete.
	newName string
	newVMID int
	file    string
	volid   string
	query   url.Values
	form    url.Values
	// body, contentType and length are for uploads.
	body        io.Reader
	contentType string
	length      int64
}

// do sends one request and decodes its data into out (when not nil).
func (c *client) do(ctx context.Context, cl call, out any) (err error) {
	start := time.Now()
	attrs := []attribute.KeyValue{attribute.String("proxmox.call", cl.name), attribute.String("proxmox.node", cl.node), attribute.Int("proxmox.vmid", cl.vmid)}
	if cl.storage != "" {
		attrs = append(attrs, attribute.String("proxmox.storage", cl.storage))
	}
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName).Start(ctx, "proxmox "+cl.name,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	var upid string
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		if upid != "" {
			span.SetAttributes(attribute.String("proxmox.upid", upid))
		}
		span.End()
		log := logr.FromContextOrDiscard(ctx)
		if log.V(1).Enabled() {
			kv := []any{"call", cl.name, "node", cl.node, "vmid", cl.vmid, "storage", cl.storage, "upid", upid, "duration", time.Since(start)}
			kv = append(kv, cl.details()...)
			log.V(1).Info("proxmox api call", append(kv, "error", errText(err))...)
		}
		log.V(2).Info("proxmox api call details", "method", cl.method, "path", cl.path, "query", cl.query.Encode())
	}()

	tok, err := c.token()
	if err != nil {
		return err
	}
	hc, err := c.httpClient()
	if err != nil {
		return err
	}
	timeout := callTimeout
	if cl.body != nil {
		timeout = cmp.Or(c.uploadTimeout, defaultUploadTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := c.base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var body io.Reader
	switch {
	case cl.body != nil:
		body = cl.body
	case cl.form != nil:
		body = strings.NewReader(cl.form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, body)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	switch {
	case cl.body != nil:
		req.ContentLength = cl.length
		req.Header.Set("Content-Type", cl.contentType)
	case cl.form != nil:
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Authorization", "PVEAPIToken="+tok)
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return transportError(ctx, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return readAPIError(resp, tok)
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&env); err != nil {
		return fmt.Errorf("reading answer: %w", transportError(ctx, err))
	}
	if s, ok := strings.CutPrefix(string(env.Data), `"UPID:`); ok {
		upid = "UPID:" + strings.TrimSuffix(s, `"`)
	}
	if out != nil && len(env.Data) > 0 && string(env.Data) != "null" {
		if err := json.Unmarshal(env.Data, out); err != nil {
			return fmt.Errorf("decoding answer: %w", err)
		}
	}
	return nil
}

// details are the call's optional log fields.
func (cl call) details() []any {
	var kv []any
	if cl.newName != "" || cl.newVMID != 0 {
		kv = append(kv, "newName", cl.newName, "newVMID", cl.newVMID)
	}
	if cl.file != "" {
		kv = append(kv, "file", cl.file)
	}
	if cl.volid != "" {
		kv = append(kv, "volid", cl.volid)
	}
	return kv
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// transportError keeps the context's error when it ended the call.
func transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

// readAPIError builds an APIError from a non-200 answer (F1): the trimmed
// body message, or the reason phrase; the body is read with a cap. A server
// (or a proxy in front of it) may echo the request, Authorization header
// included: the token and its secret are redacted from every text of the
// error before it leaves the client, so that no log, event, span or status
// can carry them.
func readAPIError(resp *http.Response, tok string) error {
	e := &APIError{Status: resp.StatusCode}
	e.Message = strings.TrimSpace(strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)))
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body struct {
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
	if len(b) > 0 && json.Unmarshal(b, &body) == nil {
		if m := strings.TrimSpace(body.Message); m != "" {
			e.Message = m
		}
		e.Fields = body.Errors
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if e.Message == "" {
		// A status without a standard text (595, 596 from a proxy that
		// sends no reason phrase) must still say something.
		e.Message = "no message"
	}
	e.redact(tok)
	return e
}

// redacted replaces a secret in API texts.
const redacted = "[redacted]"

// redact removes the token, and its secret on its own, from the error's
// texts.
func (e *APIError) redact(tok string) {
	secrets := []string{tok}
	if _, secret, ok := strings.Cut(tok, "="); ok && secret != "" {
		secrets = append(secrets, secret)
	}
	clean := func(s string) string {
		for _, sec := range secrets {
			if sec != "" {
				s = strings.ReplaceAll(s, sec, redacted)
			}
		}
		return s
	}
	e.Message = clean(e.Message)
	for k, v := range e.Fields {
		e.Fields[k] = clean(v)
	}
}

func vmPath(node string, vmid int) string {
	return "/nodes/" + url.PathEscape(node) + "/qemu/" + strconv.Itoa(vmid)
}

func (c *client) version(ctx context.Context) error {
	return c.do(ctx, call{name: "version", method: http.MethodGet, path: "/version"}, nil)
}

func (c *client) nodeStatus(ctx context.Context, node string) error {
	return c.do(ctx, call{name: "node status", method: http.MethodGet, path: "/nodes/" + url.PathEscape(node) + "/status", node: node}, nil)
}

func (c *client) resources(ctx context.Context) ([]Resource, error) {
	var out []Resource
	err := c.do(ctx, call{name: "list vms", method: http.MethodGet, path: "/cluster/resources", query: url.Values{"type": {"vm"}}}, &out)
	return out, err
}

func (c *client) nodeVMs(ctx context.Context, node string) ([]NodeVM, error) {
	var out []NodeVM
	err := c.do(ctx, call{name: "list node vms", method: http.MethodGet, path: "/nodes/" + url.PathEscape(node) + "/qemu", node: node, query: url.Values{"full": {"1"}}}, &out)
	return out, err
}

func (c *client) vmConfig(ctx context.Context, node string, vmid int) (map[string]any, error) {
	var out map[string]any
	err := c.do(ctx, call{name: "get config", method: http.MethodGet, path: vmPath(node, vmid) + "/config", node: node, vmid: vmid}, &out)
	return out, err
}

func (c *client) setConfig(ctx context.Context, node string, vmid int, form url.Values) error {
	return c.do(ctx, call{name: "set config", method: http.MethodPut, path: vmPath(node, vmid) + "/config", node: node, vmid: vmid, form: form}, nil)
}

func (c *client) status(ctx context.Context, node string, vmid int) (VMStatus, error) {
	var out VMStatus
	err := c.do(ctx, call{name: "status", method: http.MethodGet, path: vmPath(node, vmid) + "/status/current", node: node, vmid: vmid}, &out)
	return out, err
}

func (c *client) agentInterfaces(ctx context.Context, node string, vmid int) ([]AgentInterface, error) {
	var out struct {
		Result []AgentInterface `json:"result"`
	}
	err := c.do(ctx, call{name: "agent interfaces", method: http.MethodGet, path: vmPath(node, vmid) + "/agent/network-get-interfaces", node: node, vmid: vmid}, &out)
	return out.Result, err
}

// task runs a call that answers a UPID.
func (c *client) task(ctx context.Context, cl call) (string, error) {
	var upid string
	if err := c.do(ctx, cl, &upid); err != nil {
		return "", err
	}
	if !strings.HasPrefix(upid, "UPID:") {
		return "", fmt.Errorf("%s answered no task id", cl.name)
	}
	return upid, nil
}

func (c *client) clone(ctx context.Context, node string, template int, form url.Values) (string, error) {
	newVMID, _ := strconv.Atoi(form.Get("newid"))
	return c.task(ctx, call{name: "clone", method: http.MethodPost, path: vmPath(node, template) + "/clone", node: node, vmid: template,
		storage: form.Get("storage"), newName: form.Get("name"), newVMID: newVMID, form: form})
}

func (c *client) resize(ctx context.Context, node string, vmid int, disk, size string) (string, error) {
	return c.task(ctx, call{name: "resize", method: http.MethodPut, path: vmPath(node, vmid) + "/resize", node: node, vmid: vmid,
		form: url.Values{"disk": {disk}, "size": {size}}})
}

func (c *client) start(ctx context.Context, node string, vmid int) (string, error) {
	return c.task(ctx, call{name: "start", method: http.MethodPost, path: vmPath(node, vmid) + "/status/start", node: node, vmid: vmid, form: url.Values{}})
}

func (c *client) stop(ctx context.Context, node string, vmid int) (string, error) {
	return c.task(ctx, call{name: "stop", method: http.MethodPost, path: vmPath(node, vmid) + "/status/stop", node: node, vmid: vmid, form: url.Values{}})
}

func (c *client) destroy(ctx context.Context, node string, vmid int) (string, error) {
	return c.task(ctx, call{name: "destroy", method: http.MethodDelete, path: vmPath(node, vmid), node: node, vmid: vmid,
		query: url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}}})
}

func (c *client) storageStatus(ctx context.Context, node, storage string) (map[string]any, error) {
	var out map[string]any
	err := c.do(ctx, call{name: "storage status", method: http.MethodGet, node: node, storage: storage,
		path: "/nodes/" + url.PathEscape(node) + "/storage/" + url.PathEscape(storage) + "/status"}, &out)
	return out, err
}

// deleteVolume deletes a volume; the volid's / is escaped (F13).
func (c *client) deleteVolume(ctx context.Context, node, storage, volid string) (string, error) {
	return c.task(ctx, call{name: "delete volume", method: http.MethodDelete, node: node, storage: storage, volid: volid,
		path: "/nodes/" + url.PathEscape(node) + "/storage/" + url.PathEscape(storage) + "/content/" + url.PathEscape(volid)})
}

func (c *client) taskStatus(ctx context.Context, node, upid string) (TaskStatus, error) {
	var out TaskStatus
	err := c.do(ctx, call{name: "task status", method: http.MethodGet, node: node,
		path: "/nodes/" + url.PathEscape(node) + "/tasks/" + url.PathEscape(upid) + "/status"}, &out)
	return out, err
}

// upload streams a NoCloud seed as filename onto storage (F12) with an exact
// Content-Length; the image is written while it is sent, never held whole.
func (c *client) upload(ctx context.Context, node, storage, filename string, seed nocloud.Seed) (string, error) {
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	if err := mw.WriteField("content", "iso"); err != nil {
		return "", fmt.Errorf("building upload: %w", err)
	}
	if _, err := mw.CreateFormFile("filename", filename); err != nil {
		return "", fmt.Errorf("building upload: %w", err)
	}
	pre := bytes.Clone(head.Bytes())
	head.Reset()
	if err := mw.Close(); err != nil {
		return "", fmt.Errorf("building upload: %w", err)
	}
	trailer := bytes.Clone(head.Bytes())
	size := nocloud.Size(seed)
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := nocloud.Write(pw, seed)
		_ = pw.CloseWithError(err)
	}()
	defer func() {
		_ = pr.CloseWithError(errors.New("upload ended"))
		<-done
	}()
	return c.task(ctx, call{name: "upload seed", method: http.MethodPost, node: node, storage: storage, file: filename,
		path:        "/nodes/" + url.PathEscape(node) + "/storage/" + url.PathEscape(storage) + "/upload",
		body:        io.MultiReader(bytes.NewReader(pre), pr, bytes.NewReader(trailer)),
		contentType: mw.FormDataContentType(),
		length:      int64(len(pre)) + size + int64(len(trailer)),
	})
}

// Volume is one entry of a storage's content listing.
type Volume struct {
	VolID string `json:"volid"`
	Size  int64  `json:"size"`
	// CTime is when the volume was written, in Unix seconds.
	CTime int64 `json:"ctime"`
}

func (c *client) storageContent(ctx context.Context, node, storage, content string) ([]Volume, error) {
	var out []Volume
	err := c.do(ctx, call{name: "storage content", method: http.MethodGet, node: node, storage: storage,
		path:  "/nodes/" + url.PathEscape(node) + "/storage/" + url.PathEscape(storage) + "/content",
		query: url.Values{"content": {content}}}, &out)
	return out, err
}
