package pvesim

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// slowClone makes clones take 200 ms at speed 1000, long enough to observe
// a VM mid-clone.
func slowClone(c *Config) { c.Timings.Clone = Duration(200 * time.Second) }

// TestF1ReasonPhraseAndBody: a failed call carries its text as the reason
// phrase and as the body message ending in "\n"; a 400 adds field errors; a
// 401 has only the reason phrase and an empty body.
func TestF1ReasonPhraseAndBody(t *testing.T) {
	h := newHarness(t, nil)
	r := h.call(http.MethodGet, "/nodes/pve1/qemu/123/config", nil)
	want := "Configuration file 'nodes/pve1/qemu-server/123.conf' does not exist"
	if r.status != "500 "+want {
		t.Errorf("status line = %q, want %q", r.status, "500 "+want)
	}
	if r.body.Message != want+"\n" {
		t.Errorf("message = %q, want %q", r.body.Message, want+"\n")
	}
	if !strings.Contains(string(r.raw), `"data":null`) {
		t.Errorf("body %s lacks data:null", r.raw)
	}

	r = h.call(http.MethodPut, "/nodes/pve1/qemu/9002/config", url.Values{"tags": {"a b"}})
	if r.status != "400 Parameter verification failed." || r.body.Message != "Parameter verification failed.\n" {
		t.Errorf("400 = %q / %q", r.status, r.body.Message)
	}
	if r.body.Errors["tags"] != "invalid format - invalid characters in tag" {
		t.Errorf("field errors = %v", r.body.Errors)
	}

	r = h.callAs("", "", http.MethodGet, "/version", nil)
	if r.status != "401 No ticket" || len(r.raw) != 0 {
		t.Errorf("401 = %q with body %q, want reason only", r.status, r.raw)
	}
}

// TestF2MissingVM: config, status/current and destroy of a missing VMID all
// answer the F2 text with the node of the path.
func TestF2MissingVM(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/nodes/pve2/qemu/4242/config"},
		{http.MethodGet, "/nodes/pve2/qemu/4242/status/current"},
		{http.MethodDelete, "/nodes/pve2/qemu/4242"},
		// A VM that exists on another node is missing on this one.
		{http.MethodGet, "/nodes/pve2/qemu/9000/config"},
	} {
		r := h.call(tc.method, tc.path, nil)
		vmid := strings.Split(tc.path, "/")[4]
		want := fmt.Sprintf("500 Configuration file 'nodes/pve2/qemu-server/%s.conf' does not exist", vmid)
		if r.status != want {
			t.Errorf("%s %s = %q, want %q", tc.method, tc.path, r.status, want)
		}
	}
}

// TestF3StartQueuedBehindCloneLock: a start during the clone is accepted,
// logs the lock wait, and the VM starts once the clone ends.
func TestF3StartQueuedBehindCloneLock(t *testing.T) {
	h := newHarness(t, slowClone)
	cloneUPID := h.clone(200, url.Values{"name": {"f3"}})
	r := h.ok(http.MethodPost, "/nodes/pve1/qemu/200/status/start", nil)
	upid := r.dataString(t)
	if st, _, _ := h.sim.TaskStatus(cloneUPID); st != "running" {
		t.Fatalf("clone already %s: the start was not queued behind it", st)
	}
	if exit := h.waitTask(upid); exit != "OK" {
		t.Fatalf("start exit = %q", exit)
	}
	if st, _, _ := h.sim.TaskStatus(cloneUPID); st != statusStopped {
		t.Errorf("start ended before the clone")
	}
	log := h.ok(http.MethodGet, "/nodes/pve1/tasks/"+url.PathEscape(upid)+"/log", nil).dataList(t)
	if len(log) == 0 || log[0]["t"] != "trying to acquire lock... OK" {
		t.Errorf("start log = %v", log)
	}
	if m := h.ok(http.MethodGet, "/nodes/pve1/qemu/200/status/current", nil).dataMap(t); m["status"] != statusRunning {
		t.Errorf("status = %v", m["status"])
	}
}

// TestF4CloneOntoTakenVMID: fails at once, not in a task, for a VM or a
// container VMID.
func TestF4CloneOntoTakenVMID(t *testing.T) {
	h := newHarness(t, nil)
	for _, id := range []string{"9001", "500"} {
		r := h.call(http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {id}})
		want := "500 unable to create VM " + id + ": config file already exists"
		if r.status != want {
			t.Errorf("clone onto %s = %q, want %q", id, r.status, want)
		}
	}
}

// TestF5AgentMessages: the three agent failures by whole message, and the
// boot delay before the agent answers.
func TestF5AgentMessages(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Timings.AgentBoot = Duration(300 * time.Second) }) // 300 ms
	h.cloneAndWait(201, nil)
	agent := "/nodes/pve1/qemu/201/agent/network-get-interfaces"
	if r := h.call(http.MethodGet, agent, nil); r.status != "500 VM 201 is not running" {
		t.Errorf("stopped: %q", r.status)
	}
	h.startAndWait(201)
	if r := h.call(http.MethodGet, agent, nil); r.status != "500 QEMU guest agent is not running" {
		t.Errorf("booting: %q", r.status)
	}
	h.eventually("agent answers", func() bool { return h.call(http.MethodGet, agent, nil).code == http.StatusOK })

	h.cloneAndWait(202, nil)
	h.ok(http.MethodPut, "/nodes/pve1/qemu/202/config", url.Values{"agent": {"0"}})
	h.startAndWait(202)
	if r := h.call(http.MethodGet, "/nodes/pve1/qemu/202/agent/network-get-interfaces", nil); r.status != "500 No QEMU guest agent configured" {
		t.Errorf("agent off: %q", r.status)
	}
}

// TestF7ConfigWriteUnderLock: a config write on a locked VM fails with the
// lock name in brackets.
func TestF7ConfigWriteUnderLock(t *testing.T) {
	h := newHarness(t, slowClone)
	h.clone(203, nil)
	if r := h.call(http.MethodPut, "/nodes/pve1/qemu/203/config", url.Values{"cores": {"2"}}); r.status != "500 VM is locked (clone)" {
		t.Errorf("during clone: %q", r.status)
	}
	h.sim.SetLock(9002, "backup")
	if r := h.call(http.MethodPost, "/nodes/pve1/qemu/9002/config", url.Values{"cores": {"2"}}); r.status != "500 VM is locked (backup)" {
		t.Errorf("backup lock: %q", r.status)
	}
}

// TestF8NamelessMidCloneEntry: a VM being cloned is listed with only type,
// vmid, id, node, lock and status unknown; guests of an unreachable node are
// listed with status unknown.
func TestF8NamelessMidCloneEntry(t *testing.T) {
	h := newHarness(t, slowClone)
	h.clone(204, url.Values{"name": {"mid-clone"}})
	e := h.resourceByVMID(204)
	want := map[string]any{"type": "qemu", "vmid": float64(204), "id": "qemu/204", "node": "pve1", "lock": "clone", "status": "unknown"}
	if len(e) != len(want) {
		t.Errorf("entry %v has other fields than %v", e, want)
	}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("%s = %v, want %v", k, e[k], v)
		}
	}
	if _, ok := e["name"]; ok {
		t.Errorf("mid-clone entry has a name")
	}
	if tmpl := h.resourceByVMID(9000); tmpl["name"] != "debian-13" || tmpl["status"] != statusStopped {
		t.Errorf("template entry = %v", tmpl)
	}
	if ct := h.resourceByVMID(500); ct["type"] != "lxc" {
		t.Errorf("container entry = %v", ct)
	}
	h.sim.SetNodeUnreachable("pve1", true, 0, "")
	if tmpl := h.resourceByVMID(9000); tmpl["status"] != statusUnknown {
		t.Errorf("unreachable node guest status = %v", tmpl["status"])
	}
}

// TestF9TagFoldingAndRejection: hyphens kept, upper case folded, ';'
// separates; a space or '!' is rejected with the exact field error.
func TestF9TagFoldingAndRejection(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct{ in, stored, fieldErr string }{
		{"Proxy_Operator", "proxy_operator", ""},
		{"proxy-operator;Zone-A", "proxy-operator;zone-a", ""},
		{"bad tag", "", "invalid format - invalid characters in tag"},
		{"bad!", "", "invalid format - invalid characters in tag"},
	} {
		r := h.call(http.MethodPut, "/nodes/pve1/qemu/9002/config", url.Values{"tags": {tc.in}})
		if tc.fieldErr != "" {
			if r.code != http.StatusBadRequest || r.body.Errors["tags"] != tc.fieldErr {
				t.Errorf("tags %q: %s %v", tc.in, r.status, r.body.Errors)
			}
			continue
		}
		if r.code != http.StatusOK {
			t.Fatalf("tags %q: %s", tc.in, r.status)
		}
		if m := h.ok(http.MethodGet, "/nodes/pve1/qemu/9002/config", nil).dataMap(t); m["tags"] != tc.stored {
			t.Errorf("tags %q stored as %v, want %q", tc.in, m["tags"], tc.stored)
		}
	}
}

// TestF10DescriptionAndName: a description with newlines is stored
// verbatim and a 22-character name is accepted.
func TestF10DescriptionAndName(t *testing.T) {
	h := newHarness(t, nil)
	desc := "owner: 1234\nname: proxy-abcdefghijklmnop\ncreated: 2026-01-01T00:00:00Z\n"
	h.cloneAndWait(205, url.Values{"name": {"proxy-abcdefghijklmnop"}, "description": {desc}})
	m := h.ok(http.MethodGet, "/nodes/pve1/qemu/205/config", nil).dataMap(t)
	if m["description"] != desc || m["name"] != "proxy-abcdefghijklmnop" {
		t.Errorf("config = %v", m)
	}
}

// TestF11MetaCopiedFromTemplate: meta says nothing about the clone's age.
func TestF11MetaCopiedFromTemplate(t *testing.T) {
	h := newHarness(t, nil)
	h.cloneAndWait(206, nil)
	tmpl := h.ok(http.MethodGet, "/nodes/pve1/qemu/9000/config", nil).dataMap(t)
	clone := h.ok(http.MethodGet, "/nodes/pve1/qemu/206/config", nil).dataMap(t)
	if tmpl["meta"] == nil || clone["meta"] != tmpl["meta"] {
		t.Errorf("meta: template %v, clone %v", tmpl["meta"], clone["meta"])
	}
	if clone["net0"] == tmpl["net0"] {
		t.Errorf("clone kept the template's MAC: %v", clone["net0"])
	}
}

// TestF12UploadOverwriteAndExtension: an upload is an imgcopy task; the
// same name overwrites silently; a wrong extension is a 400 field error;
// Datastore.AllocateTemplate suffices.
func TestF12UploadOverwriteAndExtension(t *testing.T) {
	h := newHarness(t, nil)
	for i, data := range []string{"first seed", "second, longer seed"} {
		r := h.upload(noSeedToken, noSeedSecret, "seeds", "proxy-x-seed.iso", []byte(data))
		if r.code != http.StatusOK {
			t.Fatalf("upload %d: %s %s", i, r.status, r.raw)
		}
		upid := r.dataString(t)
		if !strings.Contains(upid, ":imgcopy::") {
			t.Errorf("UPID %q is not an imgcopy task", upid)
		}
		if exit := h.waitTask(upid); exit != "OK" {
			t.Fatalf("upload %d exit %q", i, exit)
		}
		list := h.ok(http.MethodGet, "/nodes/pve1/storage/seeds/content", nil).dataList(t)
		if len(list) != 1 || list[0]["volid"] != "seeds:iso/proxy-x-seed.iso" || list[0]["size"] != float64(len(data)) {
			t.Errorf("content after upload %d = %v", i, list)
		}
	}
	r := h.upload(opToken, opSecret, "seeds", "seed.txt", []byte("x"))
	if r.status != "400 Parameter verification failed." || r.body.Errors["filename"] != "wrong file extension" {
		t.Errorf("wrong extension: %s %v", r.status, r.body.Errors)
	}
	if r := h.upload(nobodyToken, nobodySecret, "seeds", "a.iso", []byte("x")); r.status != "403 Permission check failed (/storage/seeds, Datastore.AllocateTemplate)" {
		t.Errorf("no privilege: %q", r.status)
	}
	path, ok := h.sim.VolumePath("pve1", "seeds:iso/proxy-x-seed.iso")
	if !ok || !strings.Contains(path, "pveupload-") {
		t.Errorf("VolumePath = %q, %v", path, ok)
	}
}

// TestF13IdempotentContentDeleteAnd403: delete needs Datastore.Allocate
// (exact 403), runs as imgdel, and succeeds for a missing volume.
func TestF13IdempotentContentDeleteAnd403(t *testing.T) {
	h := newHarness(t, nil)
	vol := "/nodes/pve1/storage/seeds/content/" + url.PathEscape("seeds:iso/s.iso")
	if r := h.callAs(noSeedToken, noSeedSecret, http.MethodDelete, vol, nil); r.status != "403 Permission check failed (/storage/seeds, Datastore.Allocate)" {
		t.Errorf("403 = %q", r.status)
	}
	h.waitTask(h.upload(opToken, opSecret, "seeds", "s.iso", []byte("seed")).dataString(t))
	for i := range 2 {
		upid := h.ok(http.MethodDelete, vol, nil).dataString(t)
		if !strings.Contains(upid, `:imgdel:seeds\x3aiso/s.iso:`) {
			t.Errorf("UPID %q", upid)
		}
		if exit := h.waitTask(upid); exit != "OK" {
			t.Errorf("delete %d exit %q", i, exit)
		}
	}
	if list := h.ok(http.MethodGet, "/nodes/pve1/storage/seeds/content", nil).dataList(t); len(list) != 0 {
		t.Errorf("content = %v", list)
	}
}

// TestF14PausedAndPrelaunch: stopped, prelaunch while starting, paused is
// running/paused in status/current but plain running in the listing.
func TestF14PausedAndPrelaunch(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Timings.Start = Duration(300 * time.Second) })
	h.cloneAndWait(207, nil)
	cur := func() map[string]any {
		return h.ok(http.MethodGet, "/nodes/pve1/qemu/207/status/current", nil).dataMap(t)
	}
	if m := cur(); m["status"] != statusStopped || m["qmpstatus"] != statusStopped {
		t.Errorf("stopped: %v/%v", m["status"], m["qmpstatus"])
	}
	upid := h.ok(http.MethodPost, "/nodes/pve1/qemu/207/status/start", nil).dataString(t)
	if m := cur(); m["status"] != statusRunning || m["qmpstatus"] != qmpPrelaunch {
		t.Errorf("starting: %v/%v", m["status"], m["qmpstatus"])
	}
	h.waitTask(upid)
	h.waitTask(h.ok(http.MethodPost, "/nodes/pve1/qemu/207/status/suspend", nil).dataString(t))
	if m := cur(); m["status"] != statusRunning || m["qmpstatus"] != qmpPaused {
		t.Errorf("paused: %v/%v", m["status"], m["qmpstatus"])
	}
	if e := h.resourceByVMID(207); e["status"] != statusRunning {
		t.Errorf("listing of paused VM: %v", e["status"])
	}
	h.waitTask(h.ok(http.MethodPost, "/nodes/pve1/qemu/207/status/resume", nil).dataString(t))
	if m := cur(); m["qmpstatus"] != statusRunning {
		t.Errorf("resumed: %v", m["qmpstatus"])
	}
}

// TestF15CloneOntoStorageWithoutImages: refused up front with a storage
// field error, no VM left.
func TestF15CloneOntoStorageWithoutImages(t *testing.T) {
	h := newHarness(t, nil)
	r := h.call(http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"208"}, "storage": {"seeds"}, "full": {"1"}})
	if r.code != http.StatusBadRequest || r.body.Errors["storage"] != "storage 'seeds' does not support vm images" {
		t.Errorf("%s %v", r.status, r.body.Errors)
	}
	if h.resourceByVMID(208) != nil {
		t.Errorf("a VM was left")
	}
}

// TestF16UPIDFormatAndWarnings: UPID shape, status fields, and a task whose
// exitstatus is forced to "WARNINGS: 2" (which still succeeds).
func TestF16UPIDFormatAndWarnings(t *testing.T) {
	h := newHarness(t, nil)
	h.sim.FailTasks("qmclone", "WARNINGS: 2", 1)
	upid := h.clone(209, nil)
	re := regexp.MustCompile(`^UPID:pve1:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:qmclone:9000:op@pve!prov:$`)
	if !re.MatchString(upid) {
		t.Errorf("UPID %q does not match %s", upid, re)
	}
	if exit := h.waitTask(upid); exit != "WARNINGS: 2" {
		t.Errorf("exit = %q", exit)
	}
	m := h.ok(http.MethodGet, "/nodes/pve1/tasks/"+url.PathEscape(upid)+"/status", nil).dataMap(t)
	for _, k := range []string{"type", "id", "node", "user", "tokenid", "upid", "starttime", "pid", "pstart"} {
		if _, ok := m[k]; !ok {
			t.Errorf("task status lacks %s: %v", k, m)
		}
	}
	if m["user"] != "op@pve" || m["tokenid"] != "prov" {
		t.Errorf("user/tokenid = %v/%v", m["user"], m["tokenid"])
	}
	h.eventually("VM cloned despite warnings", func() bool {
		e := h.resourceByVMID(209)
		return e != nil && e["name"] != nil
	})
	h.sim.FailTasks("qmclone", "clone failed: out of space", 1)
	if exit := h.waitTask(h.clone(210, nil)); exit != "clone failed: out of space" {
		t.Errorf("forced failure exit = %q", exit)
	}
	if h.resourceByVMID(210) != nil {
		t.Errorf("a failed clone left a VM")
	}
}

// TestF17Privileges: ide2 as a CD-ROM needs no VM.Config.Cloudinit; a VLAN
// tag needs SDN.Use; a token without VM.Audit sees nothing.
func TestF17Privileges(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Tokens = append(c.Tokens, TokenConfig{ID: "nosdn@pve!t", Secret: "0005d000-0000-4000-8000-000000000005", ACL: []ACLEntry{{Path: "/", Privileges: slices.DeleteFunc(slices.Clone(rolePrivs), func(p string) bool { return p == "SDN.Use" || p == "Sys.Audit" })}}})
	})
	h.cloneAndWait(211, nil)
	h.waitTask(h.upload(opToken, opSecret, "seeds", "s.iso", []byte("x")).dataString(t))
	h.ok(http.MethodPut, "/nodes/pve1/qemu/211/config", url.Values{"ide2": {"seeds:iso/s.iso,media=cdrom"}})
	r := h.callAs("nosdn@pve!t", "0005d000-0000-4000-8000-000000000005", http.MethodPut, "/nodes/pve1/qemu/211/config", url.Values{"net0": {"virtio,bridge=vmbr0,tag=4"}})
	if r.status != "403 Permission check failed (/sdn/zones/localnetwork/vmbr0/4, SDN.Use)" {
		t.Errorf("VLAN without SDN.Use: %q", r.status)
	}
	h.ok(http.MethodPut, "/nodes/pve1/qemu/211/config", url.Values{"net0": {"virtio,bridge=vmbr0,tag=4"}})
	r = h.callAs(nobodyToken, nobodySecret, http.MethodGet, "/nodes/pve1/qemu/211/config", nil)
	if r.status != "403 Permission check failed (/vms/211, VM.Audit)" {
		t.Errorf("no VM.Audit: %q", r.status)
	}
	if l := h.callAs(nobodyToken, nobodySecret, http.MethodGet, "/cluster/resources", url.Values{"type": {"vm"}}).dataList(t); len(l) != 0 {
		t.Errorf("listing without VM.Audit: %v", l)
	}
}

// TestF18HTTP1Only: neither TLS ALPN nor plain HTTP negotiates HTTP/2.
func TestF18HTTP1Only(t *testing.T) {
	sim, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	u, err := sim.Serve(context.Background(), ServeOptions{Addr: "127.0.0.1:0", TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(sim.CACertPEM()) {
		t.Fatal("CA PEM holds no certificate")
	}
	d := tls.Dialer{Config: &tls.Config{RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(context.Background(), "tcp", strings.TrimPrefix(u, "https://"))
	if err != nil {
		t.Fatalf("TLS dial with the generated CA: %v", err)
	}
	defer func() { _ = conn.Close() }()
	tc, ok := conn.(*tls.Conn)
	if !ok {
		t.Fatal("not a TLS connection")
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Errorf("negotiated %q", p)
	}
	// An HTTP/2-attempting client still gets HTTP/1.1 answers.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, u+"/api2/json/version", nil)
	req.Header.Set("Authorization", "PVEAPIToken="+opToken+"="+opSecret)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.ProtoMajor != 1 || resp.StatusCode != http.StatusOK {
		t.Errorf("proto %s status %d", resp.Proto, resp.StatusCode)
	}
	// Plain-text HTTP/2 (prior knowledge) is refused too.
	pc, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", strings.TrimPrefix(h2cURL(t), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Close() }()
	_ = pc.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = pc.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	line, _ := bufio.NewReader(pc).ReadString('\n')
	if line != "" && !strings.HasPrefix(line, "HTTP/1.1 ") {
		t.Errorf("h2c preface answered %q, want an HTTP/1.1 answer or a closed connection", line)
	}
}

// h2cURL starts a plain-HTTP simulator for the h2c part of F18.
func h2cURL(t *testing.T) string {
	t.Helper()
	return newHarness(t, nil).url
}

// TestF19BootOrderAppend: setting ide2 appends it to the boot order.
func TestF19BootOrderAppend(t *testing.T) {
	h := newHarness(t, nil)
	h.cloneAndWait(212, nil)
	h.waitTask(h.upload(opToken, opSecret, "seeds", "s.iso", []byte("x")).dataString(t))
	h.waitTask(h.ok(http.MethodPost, "/nodes/pve1/qemu/212/config", url.Values{"ide2": {"seeds:iso/s.iso,media=cdrom"}}).dataString(t))
	if m := h.ok(http.MethodGet, "/nodes/pve1/qemu/212/config", nil).dataMap(t); m["boot"] != "order=scsi0;ide2" {
		t.Errorf("boot = %v", m["boot"])
	}
	// A template with a Proxmox cloud-init drive keeps it on ide2.
	if m := h.ok(http.MethodGet, "/nodes/pve1/qemu/9001/config", nil).dataMap(t); m["ide2"] != "local-lvm:vm-9001-cloudinit,media=cdrom" {
		t.Errorf("cloud-init template ide2 = %v", m["ide2"])
	}
}

// TestF20ResizeTask: resize is a task; same size OK, larger grows, smaller
// fails in the task.
func TestF20ResizeTask(t *testing.T) {
	h := newHarness(t, nil)
	h.cloneAndWait(213, nil)
	for _, tc := range []struct{ size, exit, stored string }{
		{"3G", "OK", "3G"},
		{"10G", "OK", "10G"},
		{"+2G", "OK", "12G"},
		{"5G", "shrinking disks is not supported", "12G"},
	} {
		upid := h.ok(http.MethodPut, "/nodes/pve1/qemu/213/resize", url.Values{"disk": {"scsi0"}, "size": {tc.size}}).dataString(t)
		if exit := h.waitTask(upid); exit != tc.exit {
			t.Errorf("resize %s exit %q, want %q", tc.size, exit, tc.exit)
		}
		m := h.ok(http.MethodGet, "/nodes/pve1/qemu/213/config", nil).dataMap(t)
		scsi0, _ := m["scsi0"].(string)
		if got := driveOption(scsi0, "size"); got != tc.stored {
			t.Errorf("after %s size = %s, want %s", tc.size, got, tc.stored)
		}
	}
}

// TestF21AgentAnswerShape: result list with lo and ens18, ip-addresses with
// ip-address, ip-address-type and prefix, and hardware-address.
func TestF21AgentAnswerShape(t *testing.T) {
	h := newHarness(t, nil)
	h.cloneAndWait(214, nil)
	h.startAndWait(214)
	var r *result
	h.eventually("agent", func() bool {
		r = h.call(http.MethodGet, "/nodes/pve1/qemu/214/agent/network-get-interfaces", nil)
		return r.code == http.StatusOK
	})
	var got struct {
		Result []struct {
			Name  string `json:"name"`
			HW    string `json:"hardware-address"`
			Addrs []struct {
				IP     string `json:"ip-address"`
				Type   string `json:"ip-address-type"`
				Prefix int    `json:"prefix"`
			} `json:"ip-addresses"`
		} `json:"result"`
	}
	if err := jsonUnmarshal(r.body.Data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Result) != 2 || got.Result[0].Name != "lo" || got.Result[1].Name != "ens18" {
		t.Fatalf("interfaces = %+v", got.Result)
	}
	ens := got.Result[1]
	if ens.Addrs[0].IP != GuestAddress(214).String() || ens.Addrs[0].Type != "ipv4" || ens.HW == "" {
		t.Errorf("ens18 = %+v", ens)
	}
}

// TestF22AuthTexts: exact 401 reason phrases.
func TestF22AuthTexts(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct{ id, secret, want string }{
		{"", "", "401 No ticket"},
		{opToken, "wrong-secret", "401 Authentication failed!"},
		{"ghost@pve!x", opSecret, "401 Authentication failed!"},
		// A secret that is not a lowercase UUID is refused like a wrong
		// one, even when it is the right one in another case.
		{opToken, strings.ToUpper(opSecret), "401 Authentication failed!"},
		{opToken, opSecret + "0", "401 Authentication failed!"},
		{opToken, "5f0c7a3e2b1d4e8f9a6c000000000001", "401 Authentication failed!"},
		{opToken, opSecret, "200 OK"},
	} {
		if r := h.callAs(tc.id, tc.secret, http.MethodGet, "/version", nil); r.status != tc.want {
			t.Errorf("%q: %q, want %q", tc.id, r.status, tc.want)
		}
	}
}

// TestF23UnknownStorage: a 400 with the storage field error, not a 500.
func TestF23UnknownStorage(t *testing.T) {
	h := newHarness(t, nil)
	r := h.call(http.MethodGet, "/nodes/pve1/storage/nosuch/status", nil)
	if r.code != http.StatusBadRequest || r.body.Errors["storage"] != "No such storage." {
		t.Errorf("%s %v", r.status, r.body.Errors)
	}
	if m := h.ok(http.MethodGet, "/nodes/pve1/storage/seeds/status", nil).dataMap(t); m["active"] != float64(1) {
		t.Errorf("seeds status = %v", m)
	}
}

// TestF24HibernateThenDestroy: todisk=1 leaves the VM stopped with lock
// suspended and a state volume; destroy with purge accepts it and removes
// disks and state.
func TestF24HibernateThenDestroy(t *testing.T) {
	h := newHarness(t, nil)
	h.cloneAndWait(215, nil)
	h.startAndWait(215)
	h.waitTask(h.ok(http.MethodPost, "/nodes/pve1/qemu/215/status/suspend", url.Values{"todisk": {"1"}}).dataString(t))
	e := h.resourceByVMID(215)
	if e["status"] != statusStopped || e["lock"] != lockSuspended {
		t.Errorf("hibernated entry = %v", e)
	}
	vols := h.ok(http.MethodGet, "/nodes/pve1/storage/local-lvm/content", url.Values{"vmid": {"215"}}).dataList(t)
	foundState := false
	for _, v := range vols {
		if volid, _ := v["volid"].(string); strings.Contains(volid, "vm-215-state-suspend-") {
			foundState = true
		}
	}
	if !foundState || len(vols) != 2 {
		t.Errorf("volumes = %v", vols)
	}
	upid := h.ok(http.MethodDelete, "/nodes/pve1/qemu/215", url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}}).dataString(t)
	if exit := h.waitTask(upid); exit != "OK" {
		t.Errorf("destroy exit %q", exit)
	}
	if vols := h.ok(http.MethodGet, "/nodes/pve1/storage/local-lvm/content", url.Values{"vmid": {"215"}}).dataList(t); len(vols) != 0 {
		t.Errorf("left volumes %v", vols)
	}
}

// TestF25StopPausedVM: stopping a paused VM ends OK with the VM stopped.
func TestF25StopPausedVM(t *testing.T) {
	h := newHarness(t, nil)
	h.cloneAndWait(216, nil)
	h.startAndWait(216)
	h.waitTask(h.ok(http.MethodPost, "/nodes/pve1/qemu/216/status/suspend", nil).dataString(t))
	if exit := h.waitTask(h.ok(http.MethodPost, "/nodes/pve1/qemu/216/status/stop", nil).dataString(t)); exit != "OK" {
		t.Errorf("stop exit %q", exit)
	}
	if m := h.ok(http.MethodGet, "/nodes/pve1/qemu/216/status/current", nil).dataMap(t); m["status"] != statusStopped || m["qmpstatus"] != statusStopped {
		t.Errorf("after stop: %v/%v", m["status"], m["qmpstatus"])
	}
}

// TestF26TimingsAsDefaults: the defaults are the real host's timings and
// Speed divides them.
func TestF26TimingsAsDefaults(t *testing.T) {
	d := DefaultTimings()
	for _, tc := range []struct {
		name    string
		got     Duration
		lo, hi  time.Duration
		comment string
	}{
		{"clone", d.Clone, 2 * time.Second, 4 * time.Second, "clone task 2 to 4 s"},
		{"upload", d.Upload, 3 * time.Second, 5 * time.Second, "seed upload about 4 s"},
		{"configWrite", d.ConfigWrite, 0, time.Second, "config write under 1 s"},
		{"start", d.Start, 4 * time.Second, 6 * time.Second, "start task about 5 s"},
		{"agentBoot", d.AgentBoot, 47 * time.Second, 50 * time.Second, "address 47 to 50 s after start"},
		{"destroy", d.Destroy, 0, time.Second, "destroy under a second"},
	} {
		if g := time.Duration(tc.got); g < tc.lo || g > tc.hi {
			t.Errorf("%s = %v, want %s", tc.name, g, tc.comment)
		}
	}
	sim, err := New(Config{Nodes: []NodeConfig{{Name: "n1"}}, Speed: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sim.Close() }()
	if got := sim.scaled(d.Clone); got != 30*time.Millisecond {
		t.Errorf("clone at speed 100 = %v", got)
	}
}

// TestNodeVMListing: GET /nodes/{node}/qemu lists the VMs of one node (not
// containers, not other nodes' VMs, only those the token may audit); a
// paused VM is running there like in the cluster-wide listing, and only
// full=1 adds the qmpstatus that tells it apart (F14).
func TestNodeVMListing(t *testing.T) {
	h := newHarness(t, nil)
	h.cloneAndWait(231, nil)
	h.cloneAndWait(232, nil)
	h.startAndWait(231)
	h.startAndWait(232)
	h.waitTask(h.ok(http.MethodPost, "/nodes/pve1/qemu/232/status/suspend", nil).dataString(t))
	byVMID := func(list []map[string]any) map[int]map[string]any {
		out := map[int]map[string]any{}
		for _, e := range list {
			vmid, _ := e["vmid"].(float64)
			out[int(vmid)] = e
		}
		return out
	}
	type row struct{ Status, QMP string }
	states := func(params url.Values) map[int]row {
		out := map[int]row{}
		for vmid, e := range byVMID(h.ok(http.MethodGet, "/nodes/pve1/qemu", params).dataList(t)) {
			st, _ := e["status"].(string)
			qmp, _ := e["qmpstatus"].(string)
			out[vmid] = row{st, qmp}
		}
		return out
	}
	want := map[int]row{
		9000: {statusStopped, ""}, 9001: {statusStopped, ""}, 9002: {statusStopped, ""},
		231: {statusRunning, statusRunning}, 232: {statusRunning, qmpPaused},
	}
	if diff := cmp.Diff(want, states(url.Values{"full": {"1"}})); diff != "" {
		t.Errorf("full=1 listing of pve1 (-want +got):\n%s", diff)
	}
	want[231], want[232] = row{statusRunning, ""}, row{statusRunning, ""}
	if diff := cmp.Diff(want, states(nil)); diff != "" {
		t.Errorf("listing of pve1 without full (-want +got):\n%s", diff)
	}
	if e := byVMID(h.ok(http.MethodGet, "/nodes/pve1/qemu", nil).dataList(t))[9000]; e["template"] != float64(1) || e["name"] != "debian-13" {
		t.Errorf("template entry = %v, want template 1 and its name", e)
	}
	if got := h.ok(http.MethodGet, "/nodes/pve2/qemu", url.Values{"full": {"1"}}).dataList(t); len(got) != 0 {
		t.Errorf("pve2 hosts only a container, listed %v", got)
	}
	if got := h.callAs(nobodyToken, nobodySecret, http.MethodGet, "/nodes/pve1/qemu", nil); got.code != http.StatusOK || len(got.dataList(t)) != 0 {
		t.Errorf("a token without VM.Audit: %s %v, want 200 and no VM", got.status, got.body)
	}
	if r := h.call(http.MethodGet, "/nodes/pve1/qemu", url.Values{"full": {"maybe"}}); r.code != http.StatusBadRequest || r.body.Errors["full"] == "" {
		t.Errorf("full=maybe: %s %v, want 400 with a field error", r.status, r.body.Errors)
	}
}
