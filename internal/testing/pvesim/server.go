package pvesim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// apiPrefix is the root of the API.
const apiPrefix = "/api2/json"

// Sim is a simulated Proxmox VE cluster with its API server.
type Sim struct {
	cfg Config
	// guestNet is cfg.GuestNetwork parsed; invalid when unset.
	guestNet netip.Prefix
	speed    float64
	timing   Timings
	schema   map[string]*endpointSchema
	routes   []*route
	guests   GuestRunner
	faults   faults

	// countMu guards the request counters, the bytes answered per
	// counter key and the mutation log.
	countMu   sync.Mutex
	counters  map[string]int64
	bytes     map[string]int64
	mutations []Mutation

	// mu guards everything below.
	mu         sync.Mutex
	closed     bool
	bootTime   time.Time
	nextPID    int
	nodes      map[string]*node
	nodeOrder  []string
	storages   map[string]*storage
	vms        map[int]*vm
	containers map[int]ContainerConfig
	tasks      map[string]*task
	// held are, by task type, the ends of tasks of that type kept running
	// by HoldTasks until its release.
	held      map[string][]func()
	tokens    map[string]tokenEntry
	uploadDir string

	srvMu   sync.Mutex
	servers []*http.Server
	url     string
	admin   string
	caPEM   []byte
}

// Option configures a Sim.
type Option func(*Sim)

// WithGuestRunner sets the GuestRunner called when guests start and stop.
func WithGuestRunner(g GuestRunner) Option {
	return func(s *Sim) { s.guests = g }
}

// New builds a simulator from a configuration. Call Serve to listen.
func New(cfg Config, opts ...Option) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	schema, err := loadSchema()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pvesim-upload-")
	if err != nil {
		return nil, fmt.Errorf("create upload directory: %w", err)
	}
	s := &Sim{
		cfg: cfg, speed: cfg.Speed, timing: cfg.Timings.withDefaults(), schema: schema,
		guests: NopGuestRunner{}, counters: map[string]int64{}, bytes: map[string]int64{},
		bootTime: time.Now(), nextPID: 4000,
		nodes: map[string]*node{}, storages: map[string]*storage{}, vms: map[int]*vm{},
		containers: map[int]ContainerConfig{}, tasks: map[string]*task{},
		tokens: map[string]tokenEntry{}, uploadDir: dir,
	}
	s.faults.nodes = map[string]unreachable{}
	if cfg.GuestNetwork != "" {
		s.guestNet, _ = cfg.guestPrefix() // Validate checked it
	}
	if s.speed <= 0 {
		s.speed = 1
	}
	if s.cfg.Version == "" {
		s.cfg.Version = "9.2.20"
	}
	limit := cfg.MaxConcurrentPerNode
	if limit <= 0 {
		limit = 3
	}
	for _, n := range cfg.Nodes {
		nd := &node{name: n.Name, cpus: n.CPUs, memory: int64(n.MemoryGiB) << 30, sem: make(chan struct{}, limit)}
		if nd.cpus == 0 {
			nd.cpus = 8
		}
		if nd.memory == 0 {
			nd.memory = 64 << 30
		}
		s.nodes[n.Name] = nd
		s.nodeOrder = append(s.nodeOrder, n.Name)
	}
	for _, sc := range cfg.Storages {
		if sc.Type == "" {
			sc.Type = "dir"
		}
		if sc.SizeGiB == 0 {
			sc.SizeGiB = 100
		}
		s.storages[sc.ID] = &storage{cfg: sc, volumes: map[string]map[string]*volume{}}
	}
	for _, tc := range cfg.Templates {
		s.addTemplate(tc)
	}
	for _, ct := range cfg.Containers {
		s.containers[ct.VMID] = ct
	}
	for _, tk := range cfg.Tokens {
		s.tokens[tk.ID] = tokenEntry{secret: tk.Secret, p: newPrincipal(tk)}
	}
	for _, o := range opts {
		o(s)
	}
	s.routes = s.buildRoutes()
	return s, nil
}

// addTemplate creates a VM from its configuration, with its disk volumes.
func (s *Sim) addTemplate(tc TemplateConfig) {
	isTemplate := tc.Template == nil || *tc.Template
	conf := map[string]string{
		"name": tc.Name, "cores": "1", "memory": "1024",
		"meta":    fmt.Sprintf("creation-qemu=11.0.0,ctime=%d", s.bootTime.Add(-30*24*time.Hour).Unix()),
		"smbios1": fmt.Sprintf("uuid=%s", fakeUUID(tc.VMID, 0)), "vmgenid": fakeUUID(tc.VMID, 1),
		"ostype": "l26", "scsihw": "virtio-scsi-single",
	}
	if tc.Cores > 0 {
		conf["cores"] = strconv.Itoa(tc.Cores)
	}
	if tc.MemoryMiB > 0 {
		conf["memory"] = strconv.Itoa(tc.MemoryMiB)
	}
	if isTemplate {
		conf["template"] = "1"
	}
	for i, d := range tc.Disks {
		size, _ := parseSize(d.Size)
		name := fmt.Sprintf("vm-%d-disk-%d", tc.VMID, i)
		if isTemplate {
			name = fmt.Sprintf("base-%d-disk-%d", tc.VMID, i)
		}
		volid := d.Storage + ":" + name
		conf[d.Slot] = fmt.Sprintf("%s,iothread=1,size=%s", volid, formatSize(size))
		st := s.storages[d.Storage]
		st.vols(tc.Node)[volid] = &volume{volid: volid, content: "images", format: "raw", size: size, vmid: tc.VMID, ctime: s.bootTime.Unix()}
	}
	switch {
	case tc.Boot != "":
		conf["boot"] = tc.Boot
	case len(tc.Disks) > 0:
		conf["boot"] = "order=" + tc.Disks[0].Slot
	}
	if tc.Net0 != "" {
		conf["net0"] = tc.Net0
	}
	if tc.Agent != "" {
		conf["agent"] = tc.Agent
	}
	if tc.Tags != "" {
		conf["tags"] = strings.ToLower(tc.Tags)
	}
	if tc.CloudInitStorage != "" {
		// F19: a Proxmox cloud-init drive on ide2.
		volid := fmt.Sprintf("%s:vm-%d-cloudinit", tc.CloudInitStorage, tc.VMID)
		conf["ide2"] = volid + ",media=cdrom"
		if st := s.storages[tc.CloudInitStorage]; st != nil {
			st.vols(tc.Node)[volid] = &volume{volid: volid, content: "images", format: "raw", size: 4 << 20, vmid: tc.VMID, ctime: s.bootTime.Unix()}
		}
	}
	maps.Copy(conf, tc.Extra)
	s.vms[tc.VMID] = &vm{vmid: tc.VMID, node: tc.Node, status: statusStopped, qmp: statusStopped, conf: conf}
}

// fakeUUID derives a stable UUID-shaped string.
func fakeUUID(vmid, n int) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", vmid, n, vmid%4096, n%4096, int64(vmid)*7919+int64(n))
}

// Config returns the configuration the simulator was built from.
func (s *Sim) Config() Config { return s.cfg }

// ServeOptions says where and how the API listens.
type ServeOptions struct {
	// Addr is a loopback host:port (127.0.0.1:0 picks a free port), or one
	// in 198.51.100.0/24 or 203.0.113.0/24 for a simulator a test runs in a
	// network namespace of its own; the certificate names that address.
	Addr string
	// TLS serves HTTPS with a certificate from a CA generated at start
	// (CACertPEM); otherwise plain HTTP.
	TLS bool
}

// testNets are the documentation ranges a test's own network namespace may
// use (RFC 5737: never routed on the Internet); the simulator listens there
// only when a test put it in such a namespace.
var testNets = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24")}

// checkListen refuses listen addresses outside loopback (127.0.0.0/8, ::1)
// and the documentation ranges of testNets. It returns the host's address
// when it is one (invalid for localhost), for the certificate.
func checkListen(addr string) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return netip.Addr{}, nil
	}
	ip, err := netip.ParseAddr(host)
	if err == nil && (ip.IsLoopback() || slices.ContainsFunc(testNets, func(p netip.Prefix) bool { return p.Contains(ip) })) {
		return ip, nil
	}
	return netip.Addr{}, fmt.Errorf("listen address %q is neither loopback (127.0.0.0/8, ::1) nor in a test network namespace's documentation range (198.51.100.0/24, 203.0.113.0/24)", addr)
}

// newHTTPServer returns a server that speaks HTTP/1.1 only (F18).
func newHTTPServer(h http.Handler) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		Protocols:         &protocols,
		// F18: pveproxy never negotiates HTTP/2.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
}

// Serve starts the API server in the background and returns its base URL
// (scheme://host:port, without /api2/json). ctx bounds the listen call
// only; Close stops the server.
func (s *Sim) Serve(ctx context.Context, opts ServeOptions) (string, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	host, err := checkListen(opts.Addr)
	if err != nil {
		return "", err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", opts.Addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", opts.Addr, err)
	}
	srv := newHTTPServer(s)
	scheme := "http"
	if opts.TLS {
		cert, caPEM, err := newCertificates(host)
		if err != nil {
			_ = ln.Close()
			return "", err
		}
		srv.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{cert},
			NextProtos:   []string{"http/1.1"}, // F18
			MinVersion:   tls.VersionTLS12,
		}
		ln = tls.NewListener(ln, srv.TLSConfig)
		scheme = "https"
		s.srvMu.Lock()
		s.caPEM = caPEM
		s.srvMu.Unlock()
	}
	u := scheme + "://" + ln.Addr().String()
	s.srvMu.Lock()
	s.servers = append(s.servers, srv)
	s.url = u
	s.srvMu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return u, nil
}

// ServeAdmin starts the admin HTTP server (plain HTTP, loopback only) in
// the background and returns its base URL.
func (s *Sim) ServeAdmin(ctx context.Context, addr string) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if _, err := checkListen(addr); err != nil {
		return "", err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := newHTTPServer(s.AdminHandler())
	u := "http://" + ln.Addr().String()
	s.srvMu.Lock()
	s.servers = append(s.servers, srv)
	s.admin = u
	s.srvMu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return u, nil
}

// URL returns the API base URL of the last Serve call.
func (s *Sim) URL() string {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	return s.url
}

// CACertPEM returns the PEM certificate of the CA that signed the HTTPS
// certificate (nil before a TLS Serve).
func (s *Sim) CACertPEM() []byte {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	return slices.Clone(s.caPEM)
}

// Close stops the servers, cancels pending tasks and removes uploaded files.
func (s *Sim) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.srvMu.Lock()
	servers := s.servers
	s.servers = nil
	s.srvMu.Unlock()
	var errs []error
	for _, srv := range servers {
		if err := srv.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close server: %w", err))
		}
	}
	if err := os.RemoveAll(s.uploadDir); err != nil {
		errs = append(errs, fmt.Errorf("remove upload directory: %w", err))
	}
	return errors.Join(errs...)
}

// call is one API request being served.
type call struct {
	s      *Sim
	r      *http.Request
	p      *principal
	params map[string]string
	node   string
	vmid   int
	// volume is the volid an upload wrote, for the mutation log.
	volume string
}

// handlerFunc serves a call and returns the data or an error.
type handlerFunc func(c *call) (any, *apiError)

// route is one served endpoint.
type route struct {
	method, tmpl string
	segs         []string
	schema       *endpointSchema
	h            handlerFunc
	// multipart routes parse their own body (upload).
	multipart bool
}

// match returns the path parameters when the path matches the template.
func (rt *route) match(segs []string) (map[string]string, bool) {
	if len(segs) != len(rt.segs) {
		return nil, false
	}
	var params map[string]string
	for i, t := range rt.segs {
		if strings.HasPrefix(t, "{") {
			if segs[i] == "" {
				return nil, false
			}
			if params == nil {
				params = map[string]string{}
			}
			params[t[1:len(t)-1]] = segs[i]
			continue
		}
		if t != segs[i] {
			return nil, false
		}
	}
	return params, true
}

// addRoute registers an endpoint; the schema key is "<tmpl> <METHOD>".
func (s *Sim) addRoute(list []*route, method, tmpl string, h handlerFunc) []*route {
	rt := &route{method: method, tmpl: tmpl, segs: strings.Split(strings.TrimPrefix(tmpl, "/"), "/"), h: h}
	rt.schema = s.schema[tmpl+" "+method]
	if rt.schema == nil {
		rt.schema = &endpointSchema{}
	}
	return append(list, rt)
}

// buildRoutes lists the served endpoints.
func (s *Sim) buildRoutes() []*route {
	var r []*route
	const vmPath = "/nodes/{node}/qemu/{vmid}"
	r = s.addRoute(r, http.MethodGet, "/version", s.hVersion)
	r = s.addRoute(r, http.MethodGet, "/cluster/resources", s.hResources)
	r = s.addRoute(r, http.MethodGet, "/cluster/nextid", s.hNextID)
	r = s.addRoute(r, http.MethodGet, "/nodes", s.hNodes)
	r = s.addRoute(r, http.MethodGet, "/nodes/{node}/status", s.hNodeStatus)
	r = s.addRoute(r, http.MethodGet, "/nodes/{node}/qemu", s.hNodeVMs)
	r = s.addRoute(r, http.MethodGet, vmPath+"/config", s.hGetConfig)
	r = s.addRoute(r, http.MethodPost, vmPath+"/config", s.hSetConfigAsync)
	r = s.addRoute(r, http.MethodPut, vmPath+"/config", s.hSetConfigSync)
	r = s.addRoute(r, http.MethodGet, vmPath+"/status/current", s.hStatusCurrent)
	r = s.addRoute(r, http.MethodPost, vmPath+"/status/start", s.hStart)
	r = s.addRoute(r, http.MethodPost, vmPath+"/status/stop", s.hStop)
	r = s.addRoute(r, http.MethodPost, vmPath+"/status/shutdown", s.hShutdown)
	r = s.addRoute(r, http.MethodPost, vmPath+"/status/suspend", s.hSuspend)
	r = s.addRoute(r, http.MethodPost, vmPath+"/status/resume", s.hResume)
	r = s.addRoute(r, http.MethodPost, vmPath+"/clone", s.hClone)
	r = s.addRoute(r, http.MethodPut, vmPath+"/resize", s.hResize)
	r = s.addRoute(r, http.MethodDelete, vmPath, s.hDestroy)
	r = s.addRoute(r, http.MethodGet, vmPath+"/agent/network-get-interfaces", s.hAgentNet)
	r = s.addRoute(r, http.MethodGet, "/nodes/{node}/storage/{storage}/status", s.hStorageStatus)
	r = s.addRoute(r, http.MethodGet, "/nodes/{node}/storage/{storage}/content", s.hStorageContent)
	r = s.addRoute(r, http.MethodPost, "/nodes/{node}/storage/{storage}/upload", s.hUpload)
	r[len(r)-1].multipart = true
	r = s.addRoute(r, http.MethodDelete, "/nodes/{node}/storage/{storage}/content/{volume}", s.hDeleteVolume)
	r = s.addRoute(r, http.MethodGet, "/nodes/{node}/tasks", s.hTasks)
	r = s.addRoute(r, http.MethodGet, "/nodes/{node}/tasks/{upid}/status", s.hTaskStatus)
	r = s.addRoute(r, http.MethodGet, "/nodes/{node}/tasks/{upid}/log", s.hTaskLog)
	return r
}

// splitPath splits the escaped API path into unescaped segments, so that a
// volid's %2F stays inside its segment (F13).
func splitPath(escaped string) ([]string, bool) {
	raw := strings.Split(strings.TrimPrefix(escaped, "/"), "/")
	out := make([]string, len(raw))
	for i, r := range raw {
		u, err := url.PathUnescape(r)
		if err != nil {
			return nil, false
		}
		out[i] = u
	}
	return out, true
}

// ServeHTTP serves the API: count, authenticate (F22), wait for a worker of
// the node, apply faults, route to the node (595/596 when unreachable),
// check permissions, verify parameters (F1 400), then run the handler.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	escaped, ok := strings.CutPrefix(r.URL.EscapedPath(), apiPrefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	segs, ok := splitPath(escaped)
	var rt *route
	var pathParams map[string]string
	if ok {
		for _, cand := range s.routes {
			if cand.method != r.Method {
				continue
			}
			if pp, m := cand.match(segs); m {
				rt, pathParams = cand, pp
				break
			}
		}
	}
	tmpl := "unmatched"
	if rt != nil {
		tmpl = rt.tmpl
	}
	key := r.Method + " " + tmpl
	s.count(key)
	p, aerr := s.authenticate(r)
	if aerr != nil {
		writeAPIError(w, r, aerr)
		return
	}
	if rt == nil {
		writeAPIError(w, r, errf(http.StatusNotImplemented, "Method '%s %s' not implemented", r.Method, escaped))
		return
	}
	// Every mutating call is recorded as it arrives and again with its
	// outcome (see Mutation), before the answer is written, so that a client
	// that has its answer finds the call recorded.
	var mut *Mutation
	finish := func(status int) {}
	if isMutating(r.Method) {
		mut = newMutation(r, p, tmpl, escaped, pathParams)
		i := s.startMutation(*mut)
		finish = func(status int) {
			mut.Status = status
			s.finishMutation(i, *mut)
		}
	}
	fail := func(aerr *apiError) {
		finish(aerr.status)
		writeAPIError(w, r, aerr)
	}
	nodeName := pathParams["node"]
	release, aerr := s.admit(r.Context(), nodeName)
	if aerr != nil {
		fail(aerr)
		return
	}
	defer release()
	status, answer, lose := s.callFaults(r, tmpl, escaped, pathParams["vmid"])
	if answer != nil {
		finish(status)
		answer(w)
		return
	}
	if nodeName != "" {
		if aerr := s.routeToNode(nodeName); aerr != nil {
			fail(aerr)
			return
		}
	}
	c := &call{s: s, r: r, p: p, node: nodeName}
	if rt.multipart {
		c.params = pathParams
	} else {
		params, aerr := readParams(r)
		if aerr != nil {
			fail(aerr)
			return
		}
		maps.Copy(params, pathParams)
		c.params = params
	}
	if mut != nil {
		mut.NewID, _ = strconv.Atoi(c.params["newid"])
	}
	if aerr := evalCheck(rt.schema.Check, p, c.params); aerr != nil {
		fail(aerr)
		return
	}
	if !rt.multipart {
		if errs := rt.schema.validate(c.params); len(errs) > 0 {
			fail(paramError(errs))
			return
		}
	}
	if v, ok := c.params["vmid"]; ok {
		c.vmid, _ = strconv.Atoi(v)
	}
	if mut != nil {
		mut.Effect = true
	}
	data, aerr := rt.h(c)
	if mut != nil && c.volume != "" {
		mut.Volume = c.volume
	}
	switch {
	case lose:
		// LoseAnswer: the effect took place, the answer is lost.
		finish(0)
		cutAnswer(w, r)
	case aerr != nil:
		fail(aerr)
	default:
		finish(http.StatusOK)
		s.countBytes(key, writeData(w, data))
	}
}

// admit waits for a free worker of the node (the entry node for
// cluster-wide calls), like pveproxy's bounded worker pool.
func (s *Sim) admit(ctx context.Context, nodeName string) (func(), *apiError) {
	nd := s.nodes[nodeName]
	if nd == nil {
		nd = s.nodes[s.nodeOrder[0]]
	}
	select {
	case nd.sem <- struct{}{}:
		return func() { <-nd.sem }, nil
	case <-ctx.Done():
		return nil, errf(StatusNoResponse, "request cancelled while waiting for a worker")
	}
}

// routeToNode fails a call for an unknown or unreachable node.
func (s *Sim) routeToNode(name string) *apiError {
	if _, ok := s.nodes[name]; !ok {
		return errf(http.StatusInternalServerError, "hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", name, name)
	}
	if u, down := s.faults.nodeDown(name); down {
		return errf(u.status, "%s", u.text)
	}
	return nil
}

// readParams reads query parameters and, for POST and PUT, a form or JSON
// body, as pveproxy accepts both.
func readParams(r *http.Request) (map[string]string, *apiError) {
	params := map[string]string{}
	for k, v := range r.URL.Query() {
		if len(v) > 0 {
			params[k] = v[0]
		}
	}
	if r.Method != http.MethodPost && r.Method != http.MethodPut && r.Method != http.MethodDelete {
		return params, nil
	}
	ct := r.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "application/json") {
		var body map[string]any
		dec := jsonDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
		if err := dec.Decode(&body); err != nil && !errors.Is(err, errEOF) {
			return nil, errf(http.StatusBadRequest, "unable to parse JSON body: %v", err)
		}
		for k, v := range body {
			params[k] = jsonParamString(v)
		}
		return params, nil
	}
	if err := r.ParseForm(); err != nil {
		return nil, errf(http.StatusBadRequest, "unable to parse form: %v", err)
	}
	for k, v := range r.PostForm {
		if len(v) > 0 {
			params[k] = v[0]
		}
	}
	return params, nil
}

// count adds one to the counter of a "METHOD /template" key.
func (s *Sim) count(key string) {
	s.countMu.Lock()
	s.counters[key]++
	s.countMu.Unlock()
}

// countBytes adds n bytes answered to the "METHOD /template" key.
func (s *Sim) countBytes(key string, n int) {
	s.countMu.Lock()
	s.bytes[key] += int64(n)
	s.countMu.Unlock()
}

// Counters returns the request counts by "METHOD /path/template", e.g.
// "GET /nodes/{node}/qemu/{vmid}/status/current". Unknown paths count as
// "METHOD unmatched".
func (s *Sim) Counters() map[string]int64 {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	return maps.Clone(s.counters)
}

// ResetCounters sets every counter, and every byte count, back to zero.
func (s *Sim) ResetCounters() {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	s.counters = map[string]int64{}
	s.bytes = map[string]int64{}
}

// ResponseBytes returns the bytes of the JSON bodies of successful answers
// (the {"data": ...} document a client decodes), by the same keys as
// Counters. A benchmark reads it to see what the listings cost a client:
// GET /cluster/resources grows with the number of VMs. Error answers are
// short and not counted.
func (s *Sim) ResponseBytes() map[string]int64 {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	return maps.Clone(s.bytes)
}
