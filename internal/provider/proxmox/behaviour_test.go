package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// destroyBehindOurBack stops and destroys a VM through the API, as an
// administrator would, without the provider knowing.
func (h *harness) destroyBehindOurBack(node string, vmid int) {
	h.t.Helper()
	c := newClient(h.block.APIURL, h.block.TokenFile, h.block.CAFile, false)
	if upid, err := c.stop(h.ctx, node, vmid); err == nil {
		h.waitTask(c, node, upid)
	}
	upid, err := c.destroy(h.ctx, node, vmid)
	if err != nil {
		h.t.Fatal(err)
	}
	h.waitTask(c, node, upid)
}

// seedFile is the file name of the seed of name that the harness's
// providers upload (Provider.seedFile).
func (h *harness) seedFile(name string) string {
	return testIdentity.SignedName("seed", h.entry.Name, name) + seedSuffix
}

// seedOn reports whether the seed of name is on the ISO storage of node.
func (h *harness) seedOn(node, name string) bool {
	_, ok := h.sim.VolumePath(node, h.block.ISOStorage+":iso/"+h.seedFile(name))
	return ok
}

// TestDeleteLeavesWhatIsNotOursAlone: when the VMID of a Proxy's instance
// holds something else by the time it is deleted (F8: a container, a VM
// without the mark, another instance's VM), Delete touches none of them and
// succeeds (once the seed deletes it started ended): the Proxy's own
// instance counts as gone. Its seed is still deleted (F13).
func TestDeleteLeavesWhatIsNotOursAlone(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	req := h.request("uid-reused", "proxy-reused0000000001")
	id := h.create(p, req)
	node, vmid, _, _ := parseID(id)
	other := h.request("uid-other", "proxy-other00000000001")
	otherID := h.create(p, other)
	otherNode, otherVMID, _, _ := parseID(otherID)

	// Ours goes behind the operator's back, and someone else's VM takes
	// its VMID.
	h.destroyBehindOurBack(node, vmid)
	h.foreignClone(vmid, "someone-elses")
	foreignBefore, _ := h.sim.VMConfig(vmid)
	otherBefore, _ := h.sim.VMConfig(otherVMID)

	for _, tc := range []struct {
		name, reason string
		id           provider.ID
	}{
		{"foreign VM at the VMID", "a VM without the mark is never stopped or destroyed", id},
		{"container at the VMID", "an LXC container is never ours (F8 lists both)", ID("pve1", 500, req.Name)},
		{"another instance's VM at the VMID", "the mark names another instance: that VM is not this Proxy's", ID(otherNode, otherVMID, req.Name)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A fresh process: nothing cached. Every error but InProgress
			// fails the test (deleteAll).
			h.deleteAll(h.provider(), tc.id)
		})
	}
	foreignAfter, ok := h.sim.VMConfig(vmid)
	if !ok || !cmp.Equal(foreignBefore, foreignAfter) {
		t.Errorf("the foreign VM changed (-before +after):\n%s", cmp.Diff(foreignBefore, foreignAfter))
	}
	otherAfter, ok := h.sim.VMConfig(otherVMID)
	if !ok || !cmp.Equal(otherBefore, otherAfter) {
		t.Errorf("the other instance's VM changed (-before +after):\n%s", cmp.Diff(otherBefore, otherAfter))
	}
	if vms := h.vmsNamed(other.Name); len(vms) != 1 || vms[0].Status != "running" {
		t.Errorf("the other instance's VM: %+v, want it running", vms)
	}
	c := newClient(h.block.APIURL, h.block.TokenFile, h.block.CAFile, false)
	list, err := c.resources(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := find(list, 500); !ok || r.Type != "lxc" {
		t.Errorf("the container at VMID 500 is gone: %+v", r)
	}
	if h.seedOn(node, req.Name) {
		t.Error("the seed of the deleted instance is left (F13)")
	}
	if !h.seedOn(otherNode, other.Name) {
		t.Error("the other instance's seed was deleted")
	}
	if !strings.Contains(h.logs.String(), `"msg"="proxmox vm deleted" "vmid"=`+strconv.Itoa(vmid)+` "name"="`+req.Name+`" "destroyed"=false`) {
		t.Errorf("no outcome line `proxmox vm deleted` with destroyed=false:\n%s", h.logs.String())
	}
}

// TestDeleteOfAGoneVMDeletesItsSeedEverywhere: the VM is gone (F2) and the
// process that deletes it never saw it; the seed is still deleted, on every
// configured node, since the VM's node is unknown (F13: deleting a missing
// volume succeeds, so every node is asked).
func TestDeleteOfAGoneVMDeletesItsSeedEverywhere(t *testing.T) {
	h := newHarness(t, func(b *Block) {
		b.Zones = map[string]Zone{"zone-a": {Nodes: []string{"pve1", "pve2"}}}
	})
	req := h.request("uid-gone", "proxy-gone000000000001")
	id := h.create(h.provider(), req)
	node, vmid, _, _ := parseID(id)
	otherNode := map[string]string{"pve1": "pve2", "pve2": "pve1"}[node]
	// A copy of the seed on the other node too, as a clone to another
	// node before a change of placement would leave.
	c := newClient(h.block.APIURL, h.block.TokenFile, h.block.CAFile, false)
	p := h.provider()
	upid, err := c.upload(h.ctx, otherNode, h.block.ISOStorage, h.seedFile(req.Name), p.seedFor(req))
	if err != nil {
		t.Fatal(err)
	}
	h.waitTask(c, otherNode, upid)
	if !h.seedOn("pve1", req.Name) || !h.seedOn("pve2", req.Name) {
		t.Fatal("the test needs the seed on both nodes")
	}
	h.destroyBehindOurBack(node, vmid)

	h.deleteAll(h.provider(), id)
	for _, n := range []string{"pve1", "pve2"} {
		if h.seedOn(n, req.Name) {
			t.Errorf("seed left on %s", n)
		}
	}
	if err := h.provider().Delete(h.ctx, id); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

// TestGetSeesAPauseAfterReady: a VM paused after it ran with an address is
// reported Stopped by the first Get of the same provider a pause window
// after the pause, although the cluster-wide listing still shows it running
// (F14: its node's listing with full=1 says paused), and Running again once
// resumed.
func TestGetSeesAPauseAfterReady(t *testing.T) {
	h, p, pass := clockedProvider(t)
	id := h.create(p, h.request("uid-pause", "proxy-pause00000000001"))
	_, vmid, _, _ := parseID(id)
	ready := h.runningOnClock(p, pass, id)
	h.vmTask("pve1", vmid, "/status/suspend")
	pastThePauseWindow(pass)
	inst, err := p.Get(h.ctx, id)
	if err != nil || inst.State != provider.StateStopped {
		t.Errorf("Get after a pause = %+v, %v; want Stopped (F14)", inst, err)
	}
	h.vmTask("pve1", vmid, "/status/resume")
	pastThePauseWindow(pass)
	inst, err = p.Get(h.ctx, id)
	if err != nil || inst.State != provider.StateRunning || inst.Address != ready.Address {
		t.Errorf("Get after resume = %+v, %v; want Running at %s", inst, err, ready.Address)
	}
	// The economy: a Get of a running VM whose address is known, in a new
	// poll interval of the pause window, reads the cluster-wide listing
	// and nothing else: no node listing, no status read, no agent read.
	pass(2 * viewPoll)
	h.sim.ResetCounters()
	if _, err := p.Get(h.ctx, id); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"GET /cluster/resources": 1}, h.sim.Counters()); diff != "" {
		t.Errorf("calls of one Get (-want +got):\n%s", diff)
	}
}

// TestCheckReasonsOfTheReference: a 500 from the storage status call means
// the ISO storage cannot be used (StorageNotFound, F23 for its 400 twin); a
// refused or timed-out dial never reached the API (Unreachable).
func TestCheckReasonsOfTheReference(t *testing.T) {
	h := newHarness(t, nil)
	h.sim.FailNext(http.MethodGet, "/nodes/{node}/storage/{storage}/status", 1, 500, "storage 'seeds' is not online")
	v := h.provider().Check(h.ctx)
	if len(v) != 1 || v[0].Reason != ReasonStorageNotFound || v[0].Healthy {
		t.Errorf("Check with a 500 from storage status = %+v, want StorageNotFound", v)
	}

	// A port nothing listens on: the dial is refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()
	b := *h.block
	b.APIURL = "https://" + closed
	e := *h.entry
	e.Block = &b
	p, err := New(&e, provider.Deps{Ownership: testIdentity})
	if err != nil {
		t.Fatal(err)
	}
	if v := p.Check(h.ctx); len(v) != 1 || v[0].Reason != ReasonUnreachable {
		t.Errorf("Check against a closed port = %+v, want Unreachable", v)
	}

	// What net/http returns for a dial, and for a read, that time out.
	dialTimeout := &url.Error{Op: "Get", URL: "https://pve.example.test:8006/api2/json/version",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: timeoutError{}}}
	readTimeout := &url.Error{Op: "Get", URL: "https://pve.example.test:8006/api2/json/version",
		Err: &net.OpError{Op: "read", Net: "tcp", Err: timeoutError{}}}
	for _, tc := range []struct {
		name, reason string
		err          error
		want         string
	}{
		{"dial timeout", "a dial that times out never reached the host", dialTimeout, ReasonUnreachable},
		{"dial refused", "nothing listens", &url.Error{Op: "Get", Err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}, ReasonUnreachable},
		{"read timeout", "the host was reached and answers too slowly", readTimeout, ReasonTimeout},
		{"deadline", "the check's own budget ended while waiting for an answer", fmt.Errorf("reading: %w", context.DeadlineExceeded), ReasonTimeout},
		{"595", "no response from the node (pveproxy's own code)", &APIError{Status: 595, Message: "Errors during connection establishment"}, ReasonUnreachable},
		{"500", "any other server error", &APIError{Status: 500, Message: "something broke"}, ReasonAPIError},
	} {
		if got := reasonFor(tc.err); got != tc.want {
			t.Errorf("%s: reasonFor = %s, want %s (%s)", tc.name, got, tc.want, tc.reason)
		}
	}
}

// timeoutError is a net.Error that timed out.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

var _ net.Error = timeoutError{}

// TestSecretEchoedInAnErrorIsRedacted: a server (or a proxy in front of it)
// that echoes the request's Authorization header in its error (F1: message
// and reason phrase) must not get the token into an error, a log line, a
// span or a verdict, which is what events and conditions are made of.
func TestSecretEchoedInAnErrorIsRedacted(t *testing.T) {
	h := newHarness(t, nil)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, root := tp.Tracer("test").Start(h.ctx, "operation")
	echo := "bad request: Authorization: PVEAPIToken=op@pve!t=" + sentinelSecret + " (secret " + sentinelSecret + ")"
	h.sim.FailNext(http.MethodGet, "/cluster/resources", 1, 500, echo)
	h.sim.FailNext(http.MethodGet, "/nodes/{node}/storage/{storage}/status", 1, 500, echo)
	p := h.provider()

	_, err := p.Create(ctx, h.request("uid-echo", "proxy-echo000000000001"))
	if err == nil || provider.IsInProgress(err) {
		t.Fatalf("Create with an echoing 500 = %v, want an error", err)
	}
	verdicts := p.Check(ctx)
	root.End()

	texts := map[string]string{"error": err.Error(), "error %+v": fmt.Sprintf("%+v %#v", err, err), "logs": h.logs.String()}
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v holds no APIError", err)
	}
	for _, v := range verdicts {
		texts["verdict "+v.Target] = v.Message
	}
	for _, s := range rec.Ended() {
		var b strings.Builder
		_, _ = fmt.Fprint(&b, s.Name(), s.Attributes(), s.Status().Description)
		for _, ev := range s.Events() {
			_, _ = fmt.Fprint(&b, ev.Attributes)
		}
		texts["span "+s.Name()] = b.String()
	}
	for where, text := range texts {
		assertNoSecret(t, where, text)
	}
	if !strings.Contains(err.Error(), "PVEAPIToken="+redacted+" (secret "+redacted+")") {
		t.Errorf("error %q: want the echoed token replaced by %s and the rest kept", err, redacted)
	}
	if len(verdicts) != 1 || !strings.Contains(verdicts[0].Message, redacted) {
		t.Errorf("verdicts %+v: want the echo redacted in the message", verdicts)
	}
}

// logLine finds the funcr line of a message whose fields include every
// key=value given, and returns it.
func logLine(logs, msg string, kv ...string) (string, bool) {
	for line := range strings.SplitSeq(logs, "\n") {
		if !strings.Contains(line, `"msg"="`+msg+`"`) {
			continue
		}
		all := true
		for _, f := range kv {
			all = all && strings.Contains(line, f)
		}
		if all {
			return line, true
		}
	}
	return "", false
}

// TestCallLogLines: each API call logs one V(1) line with the call, node,
// VMID, storage, UPID and duration, plus the new name and VMID of a clone,
// the file of an upload and the volume of a volume delete; outcomes log
// `proxmox task failed` and `proxmox vm deleted` with destroyed.
func TestCallLogLines(t *testing.T) {
	h := newHarness(t, func(b *Block) { b.TargetStorage = "local-lvm" })
	h.sim.FailTasks("qmstart", "start failed: guest refused", 1)
	p := h.provider()
	req := h.request("uid-logs", "proxy-logs000000000001")
	var id provider.ID
	h.eventually("create", func() bool {
		got, err := p.Create(h.ctx, req)
		id = got
		return err == nil
	})
	_, vmid, _, _ := parseID(id)
	h.deleteAll(p, id)
	logs := h.logs.String()
	upid := `"upid"="UPID:pve1:`
	dur := regexp.MustCompile(`"duration"="[0-9.]+[µnm]?s"`)
	for _, tc := range []struct {
		name string
		kv   []string
	}{
		{"clone", []string{`"call"="clone"`, `"node"="pve1"`, `"vmid"=9000`, `"storage"="local-lvm"`, upid,
			`"newName"="` + req.Name + `"`, fmt.Sprintf(`"newVMID"=%d`, vmid)}},
		{"upload", []string{`"call"="upload seed"`, `"node"="pve1"`, `"storage"="seeds"`, upid, `"file"="` + h.seedFile(req.Name) + `"`}},
		{"volume delete", []string{`"call"="delete volume"`, `"node"="pve1"`, `"storage"="seeds"`, upid, `"volid"="seeds:iso/` + h.seedFile(req.Name) + `"`}},
		{"start", []string{`"call"="start"`, `"node"="pve1"`, fmt.Sprintf(`"vmid"=%d`, vmid), upid}},
		{"storage status of a VM call", []string{`"call"="destroy"`, fmt.Sprintf(`"vmid"=%d`, vmid), `"storage"=""`, upid}},
	} {
		line, ok := logLine(logs, "proxmox api call", tc.kv...)
		switch {
		case !ok:
			t.Errorf("%s: no V(1) line with %v", tc.name, tc.kv)
		case !strings.Contains(line, `"level"=1`) || !dur.MatchString(line):
			t.Errorf("%s: line %s lacks V(1) or its duration", tc.name, line)
		}
	}
	if _, ok := logLine(logs, "proxmox task failed", `"task"="start"`, `"node"="pve1"`, fmt.Sprintf(`"vmid"=%d`, vmid), upid,
		`"exitstatus"="start failed: guest refused"`); !ok {
		t.Errorf("no `proxmox task failed` line for the failed start:\n%s", logs)
	}
	if _, ok := logLine(logs, "proxmox vm deleted", fmt.Sprintf(`"vmid"=%d`, vmid), `"name"="`+req.Name+`"`, `"destroyed"=true`); !ok {
		t.Errorf("no `proxmox vm deleted` line with destroyed=true:\n%s", logs)
	}
}

// TestGetSaysWhenTheAgentIsDue: while the seed installs the guest agent
// (F21, F26: it answers 47 to 50 s after the start), Get of the booting VM
// says when to look again. Before agentInstallSeconds of uptime the agent is
// not asked and the hint is the time left until then; once it is asked and
// does not answer yet, the hint is agentRecheck. The operator then sees the
// address soon after the agent has it, not up to a poll interval later.
func TestGetSaysWhenTheAgentIsDue(t *testing.T) {
	// The agent never answers here (an hour of simulated time), so the VM
	// stays in the two states the test looks at. At speed 20 the 44 s before
	// the first question last 2.2 s, long enough for the first Get to come
	// before them on a loaded machine.
	h := newHarnessYAML(t, "speed: 20\ntimings: {agentBoot: 3600s}\n", nil)
	p := h.provider()
	id := h.create(p, h.request("uid-agent-due", "proxy-agentdue00000001"))
	const agentCall = "GET /nodes/{node}/qemu/{vmid}/agent/network-get-interfaces"

	var first provider.Instance
	h.eventually("a hint before the agent is asked", func() bool {
		inst, err := p.Get(h.ctx, id)
		if err != nil && !provider.IsTransient(err) {
			t.Fatalf("Get: %v", err)
		}
		first = inst
		return err == nil && inst.RecheckAfter > 0
	})
	if first.State != provider.StateProvisioning || first.RecheckAfter > agentInstallSeconds*time.Second || first.RecheckAfter%time.Second != 0 {
		t.Errorf("Get before the agent is due = %+v; want Provisioning, the whole seconds left until %d s of uptime", first, agentInstallSeconds)
	}
	if n := h.sim.Counters()[agentCall]; first.RecheckAfter < agentInstallSeconds*time.Second && n != 0 {
		t.Errorf("the agent was asked %d times before it was due", n)
	}

	h.eventually("the agent asked and not answering", func() bool {
		inst, err := p.Get(h.ctx, id)
		if err != nil && !provider.IsTransient(err) {
			t.Fatalf("Get: %v", err)
		}
		return err == nil && h.sim.Counters()[agentCall] > 0 && inst.State == provider.StateProvisioning && inst.RecheckAfter == agentRecheck
	})
}

// TestCollidingCreatesDoNotWaitForEachOther: two Creates of one process
// whose VMIDs, derived from their UIDs, collide (about five pairs in 1000
// creates over the default range). The second clones onto the next VMID at
// once: it neither waits for the first's clone to end and name its VM (F8:
// a VM being cloned is listed locked and without a name) nor races it for
// the VMID (F4) and waits a poll interval. At 1000 creates those few waits
// were the last Proxies to be Ready (docs/performance.md).
func TestCollidingCreatesDoNotWaitForEachOther(t *testing.T) {
	// A clone of an hour at speed 1000 lasts 3.6 s: the first VM stays
	// locked and unnamed while the second Create runs.
	h := newHarnessYAML(t, "timings: {clone: 3600s}\n", func(b *Block) { b.VMIDRange = &VMIDRange{Min: 100000, Max: 100009} })
	p := h.provider()
	uidA, uidB := "uid-a", ""
	for i := range 1000 {
		if u := fmt.Sprintf("uid-b%d", i); p.vmidFor(u, "proxy-b") == p.vmidFor(uidA, "proxy-a") {
			uidB = u
			break
		}
	}
	if uidB == "" {
		t.Fatal("no UID whose VMID collides with uid-a's in a range of ten")
	}
	vmid := p.vmidFor(uidA, "proxy-a")
	next := 100000 + (vmid-100000+1)%10

	// steps calls Create until it says it clones, and returns what it said.
	steps := func(req provider.Request) []string {
		t.Helper()
		var said []string
		h.eventually("the clone of "+req.Name, func() bool {
			_, err := p.Create(h.ctx, req)
			if !provider.IsInProgress(err) {
				t.Fatalf("create %s: %v, want InProgress while the clone runs", req.Name, err)
			}
			said = append(said, err.Error())
			return strings.Contains(err.Error(), "cloning template")
		})
		return said
	}
	if said := steps(h.request(uidA, "proxy-a")); !strings.Contains(said[len(said)-1], fmt.Sprintf("to VM %d", vmid)) {
		t.Fatalf("the first create said %q, want its clone onto VM %d", said, vmid)
	}
	said := steps(h.request(uidB, "proxy-b"))
	for _, s := range said {
		if strings.Contains(s, "waiting for VM") || strings.Contains(s, "taken meanwhile") {
			t.Errorf("the second create said %q: it waited for the first one's VM", s)
			break
		}
	}
	if !strings.Contains(said[len(said)-1], fmt.Sprintf("to VM %d", next)) {
		t.Errorf("the second create said %q, want its clone onto VM %d", said, next)
	}
	if n := len(h.vmsNamed("proxy-b")) + len(h.vmsNamed("proxy-a")); n > 2 {
		t.Errorf("%d VMs for two creates", n)
	}
}
