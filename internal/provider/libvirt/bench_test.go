package libvirt

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/egress-proxies-operator/internal/cloudinit"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/libvirtlab"
)

// BenchmarkKVM2Resync measures what the operator's resyncs cost a libvirt
// host: N running no-OS domains (BENCH_DOMAINS, default 100) are created
// through the kvm2 provider, then every "resync" calls Get on each of them,
// as the operator does, one poll interval apart (so that the shared listing
// is read anew each time, as with the operator's 5 minute resync and 5
// second poll). Reported: libvirt round trips per proxy per resync. `make
// bench ARGS='--provider kvm2'` runs it; docs/performance.md has the
// figures.
func BenchmarkKVM2Resync(b *testing.B) {
	n := 100
	if v, err := strconv.Atoi(os.Getenv("BENCH_DOMAINS")); err == nil && v > 0 {
		n = v
	}
	l := libvirtlab.Start(b, libvirtlab.Options{})
	if _, err := l.Virsh("vol-create-as", "--pool", l.Pool, "--name", noOSVolume, "--capacity", "16M", "--format", "qcow2"); err != nil {
		b.Fatal(err)
	}
	e := benchEntry(b, l)
	// 32 MiB is enough for a BIOS that finds nothing to boot, and lets a
	// small machine hold hundreds of domains.
	e.MachineTypes["small"] = config.MachineType{Name: "small", Cores: 1, MemoryMiB: 32}
	p, err := New(e, provider.Deps{Ownership: testIdentity})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	ctx := b.Context()
	ids := make([]provider.ID, n)
	start := time.Now()
	startCalls := p.Calls()
	for i := range n {
		req := request(fmt.Sprintf("bench-%03d", i))
		for step := 0; ; step++ {
			id, err := p.Create(ctx, req)
			if err == nil {
				ids[i] = id
				break
			}
			if !provider.IsInProgress(err) || step > maxSteps {
				b.Fatalf("Create %s: %v", req.Name, err)
			}
		}
	}
	b.Logf("created %d running domains in %s with %.1f libvirt calls each", n, time.Since(start).Round(time.Millisecond),
		float64(p.Calls()-startCalls)/float64(n))
	poll := blockOf(b, e).PollInterval()
	resync := func() {
		for _, id := range ids {
			if _, err := p.Get(ctx, id); err != nil {
				b.Fatalf("Get %s: %v", id, err)
			}
		}
	}
	wait := func() {
		t := time.NewTimer(poll)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	resync() // reads each definition once, as the first resync after a start does
	const resyncs = 3
	b.ResetTimer()
	for range b.N {
		before := p.Calls()
		for range resyncs {
			wait()
			resync()
		}
		perProxy := float64(p.Calls()-before) / float64(n*resyncs)
		b.ReportMetric(perProxy, "calls/proxy/resync")
		b.Logf("%d domains, %d resyncs: %.4f libvirt calls per proxy per resync", n, resyncs, perProxy)
	}
	b.StopTimer()
	for _, id := range ids {
		for step := 0; ; step++ {
			err := p.Delete(ctx, id)
			if err == nil {
				break
			}
			if !provider.IsInProgress(err) || step > maxSteps {
				b.Fatalf("Delete %s: %v", id, err)
			}
		}
	}
}

// BenchmarkKVM2RealGuest measures the time from the first Create of a
// Proxy's domain to Running with an address from the network's DHCP lease,
// for one real guest under TCG (one vCPU, 512 MiB).
func BenchmarkKVM2RealGuest(b *testing.B) {
	l := libvirtlab.Start(b, libvirtlab.Options{GuestImage: true})
	e := benchEntry(b, l)
	e.Images = []string{"debian"}
	e.MachineTypes["small"] = config.MachineType{Name: "small", Cores: 1, MemoryMiB: 512}
	blk := blockOf(b, e)
	blk.Images = map[string]Image{"debian": {Volume: l.BaseImageVolume, Kernel: l.Kernel, Initrd: l.Initrd, Cmdline: l.KernelCmdline}}
	blk.Budgets.PollInterval = &metav1.Duration{Duration: time.Second}
	p, err := New(e, provider.Deps{Ownership: testIdentity})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	ud, err := cloudinit.Render(cloudinit.Proxy{Port: 3128, Username: "bench", Password: "bench-password"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	for i := range b.N {
		req := request(fmt.Sprintf("guest-%d", i))
		req.Image, req.UserData = "debian", provider.NewSensitive(ud)
		start := time.Now()
		var id provider.ID
		for id == "" {
			got, err := p.Create(ctx, req)
			switch {
			case err == nil:
				id = got
			case !provider.IsInProgress(err):
				b.Fatalf("Create: %v", err)
			default:
				sleepCtx(b, provider.RetryAfterOf(err))
			}
		}
		var inst provider.Instance
		for deadline := time.Now().Add(10 * time.Minute); inst.State != provider.StateRunning; {
			if time.Now().After(deadline) {
				b.Fatalf("no address after 10 minutes; serial log:\n%s", l.SerialLog(req.Name))
			}
			sleepCtx(b, time.Second)
			if inst, err = p.Get(ctx, id); err != nil {
				b.Fatalf("Get: %v", err)
			}
		}
		took := time.Since(start)
		b.ReportMetric(took.Seconds(), "s/create-to-running")
		b.Logf("real guest %s: Running at %s %s after the first Create", req.Name, inst.Address, took.Round(time.Second))
		for {
			err := p.Delete(ctx, id)
			if err == nil {
				break
			}
			if !provider.IsInProgress(err) {
				b.Fatalf("Delete: %v", err)
			}
			sleepCtx(b, provider.RetryAfterOf(err))
		}
	}
}

func sleepCtx(b *testing.B, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.Context().Done():
	case <-t.C:
	}
}

// benchEntry is labEntry for a benchmark: a kvm2 entry on the lab, with the
// operator's default poll interval shortened to keep the run short.
func benchEntry(b *testing.B, l *libvirtlab.Lab) *config.Entry {
	b.Helper()
	e := labEntry(b, l, TypeKVM2)
	blockOf(b, e).Budgets.PollInterval = &metav1.Duration{Duration: 500 * time.Millisecond}
	return e
}
