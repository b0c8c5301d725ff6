package guests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/nocloud"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/cloudinitparse"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/nocloudread"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
)

// DefaultDrain is how long a stopping guest lets open requests finish.
const DefaultDrain = time.Second

// Runner is a pvesim.GuestRunner whose guests run the forward proxy their
// seed configures. The zero value is ready to use; Close stops every guest.
type Runner struct {
	// Log receives one line per guest start and stop, never credentials.
	Log logr.Logger
	// Drain is how long a stopping guest lets open requests finish; zero
	// means DefaultDrain.
	Drain time.Duration
	// Allow are the destinations the guests' proxies reach besides what the
	// default egress policy allows; nil means 127.0.0.0/8, where simulated
	// guests and the origins they are tested against usually live. A real
	// guest enforces its entry's policy with the nftables rules of its
	// seed; a test whose origin is elsewhere (a cluster world's host end)
	// names it here.
	Allow []netip.Prefix

	mu      sync.Mutex
	running map[int]*guest
	// cache holds, by VMID, the settings a guest read from its seed at its
	// first boot, as cloud-init caches what it read per instance: the
	// provider removes the seed once the guest is up, and a guest that
	// boots again later runs from the cache.
	cache map[int]cachedSettings
}

// cachedSettings are a guest's settings and the instance they belong to
// (the VM name, which the seed's meta-data gives as instance-id).
type cachedSettings struct {
	instance string
	settings cloudinitparse.Settings
}

var _ pvesim.GuestRunner = (*Runner)(nil)

type guest struct {
	addr   string
	cancel context.CancelFunc
	done   chan struct{}
}

// Start implements pvesim.GuestRunner. A VM without a seed runs nothing, as
// a stock image without cloud-init configuration would; a seed whose
// user-data configures no proxy is an error, which is what a wrong rendering
// looks like from outside.
func (r *Runner) Start(g pvesim.Guest) error {
	settings, ok, err := r.settingsOf(g)
	if err != nil {
		return fmt.Errorf("guest %d: %w", g.VMID, err)
	}
	if !ok {
		r.Log.V(1).Info("guest has no seed; nothing to run", "vmid", g.VMID)
		return nil
	}
	proxy, err := forwardproxy.New(forwardproxy.Config{
		Username: settings.Username, Password: settings.Password,
		AllowedSourceRanges: settings.Allow, Log: r.Log.WithValues("vmid", g.VMID),
		// A VM reaches the world from its own address; so does the guest,
		// which gives each guest its own egress address.
		LocalAddr: g.Address,
		Egress:    egress.Policy{AllowCIDRs: r.allow()},
	})
	if err != nil {
		return fmt.Errorf("guest %d: configuring the proxy: %w", g.VMID, err)
	}
	r.Stop(g)                                                             // a restarted VM replaces its earlier run, on the same address
	addr := netip.AddrPortFrom(g.Address, uint16(settings.Port)).String() //nolint:gosec // G115: ParseTinyproxy keeps ports within 1-65535.
	// The guest's life is its own context: Stop ends it.
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		cancel()
		return fmt.Errorf("guest %d: listening on %s: %w", g.VMID, addr, err)
	}
	gs := &guest{addr: addr, cancel: cancel, done: make(chan struct{})}
	drain := r.Drain
	if drain == 0 {
		drain = DefaultDrain
	}
	go func() {
		defer close(gs.done)
		if err := forwardproxy.Serve(ctx, ln, proxy, drain); err != nil {
			r.Log.Error(err, "guest proxy stopped", "vmid", g.VMID)
		}
	}()
	r.mu.Lock()
	if r.running == nil {
		r.running = map[int]*guest{}
	}
	r.running[g.VMID] = gs
	r.mu.Unlock()
	r.Log.V(1).Info("guest proxy serving", "vmid", g.VMID, "address", addr, "auth", settings.Username != "", "allow", len(settings.Allow))
	return nil
}

// allow is Allow, or loopback when it is nil.
func (r *Runner) allow() []netip.Prefix {
	if r.Allow == nil {
		return []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	return r.Allow
}

// Stop implements pvesim.GuestRunner; it waits until the guest's proxy no
// longer listens.
func (r *Runner) Stop(g pvesim.Guest) {
	r.mu.Lock()
	gs := r.running[g.VMID]
	delete(r.running, g.VMID)
	r.mu.Unlock()
	if gs == nil {
		return
	}
	gs.cancel()
	<-gs.done
	r.Log.V(1).Info("guest proxy stopped", "vmid", g.VMID, "address", gs.addr)
}

// Close stops every guest.
func (r *Runner) Close() {
	r.mu.Lock()
	vmids := make([]int, 0, len(r.running))
	for id := range r.running {
		vmids = append(vmids, id)
	}
	r.mu.Unlock()
	for _, id := range vmids {
		r.Stop(pvesim.Guest{VMID: id})
	}
}

// Addresses returns where each running guest listens, by VMID.
func (r *Runner) Addresses() map[int]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int]string, len(r.running))
	for id, gs := range r.running {
		out[id] = gs.addr
	}
	return out
}

// settingsOf returns the settings a guest boots with: those of its seed,
// read and cached on a boot with a seed, else those cached at an earlier
// boot of the same instance; ok is false when there are none.
func (r *Runner) settingsOf(g pvesim.Guest) (cloudinitparse.Settings, bool, error) {
	if g.SeedPath == "" {
		r.mu.Lock()
		c, ok := r.cache[g.VMID]
		r.mu.Unlock()
		if !ok || c.instance != g.Name {
			return cloudinitparse.Settings{}, false, nil
		}
		return c.settings, true, nil
	}
	settings, err := readSettings(g.SeedPath)
	if err != nil {
		return cloudinitparse.Settings{}, false, err
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[int]cachedSettings{}
	}
	r.cache[g.VMID] = cachedSettings{instance: g.Name, settings: settings}
	r.mu.Unlock()
	return settings, true, nil
}

// readSettings reads the seed ISO and the tinyproxy settings of its
// user-data.
func readSettings(path string) (cloudinitparse.Settings, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the simulator's own staging file.
	if err != nil {
		return cloudinitparse.Settings{}, fmt.Errorf("opening the seed: %w", err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return cloudinitparse.Settings{}, fmt.Errorf("reading the seed: %w", err)
	}
	seed, label, err := nocloudread.Read(f, info.Size())
	if err != nil {
		return cloudinitparse.Settings{}, fmt.Errorf("reading the seed: %w", err)
	}
	if label != nocloud.Label {
		// cloud-init finds its NoCloud seed by this label and ignores any
		// other disc.
		return cloudinitparse.Settings{}, fmt.Errorf("the seed's volume label is %q, not %q: cloud-init would not read it", label, nocloud.Label)
	}
	settings, err := cloudinitparse.ParseTinyproxy(seed.UserData)
	if err != nil {
		return cloudinitparse.Settings{}, fmt.Errorf("the seed's user-data: %w", err)
	}
	if settings.Username == "" && len(settings.Allow) == 0 {
		return cloudinitparse.Settings{}, errors.New("the seed's user-data configures an open proxy")
	}
	return settings, nil
}
