package libvirt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Check implements provider.Checker: one verdict per host, checked
// concurrently: SSH (reachability, host key, authentication), libvirt, the
// pool, the network and every image's base volume.
func (p *Provider) Check(ctx context.Context) []provider.Verdict {
	return eachHost(p.block.Hosts, func(h Host) provider.Verdict { return p.checkHost(ctx, h) })
}

func (p *Provider) checkHost(ctx context.Context, h Host) provider.Verdict {
	start := time.Now()
	v := provider.Verdict{Target: h.Name}
	fail := func(err error, what string) provider.Verdict {
		v.Reason = reasonOf(err)
		v.Message = fmt.Sprintf("%s: %s", what, err.Error())
		v.Latency = time.Since(start)
		return v
	}
	if err := p.drv.ping(ctx, h); err != nil {
		return fail(err, "reaching libvirt over ssh")
	}
	doc, err := p.drv.poolXML(ctx, h, p.block.Pool)
	if errors.Is(err, errInactive) {
		err = fmt.Errorf("%w: %w", errNoPool, err)
	}
	if err != nil {
		return fail(err, "checking storage pool "+p.block.Pool)
	}
	pf, err := parsePool(doc)
	if err != nil {
		return fail(err, "checking storage pool "+p.block.Pool)
	}
	p.mu.Lock()
	p.pools[h.Name] = pf
	p.mu.Unlock()
	if p.block.Network != "" {
		err := p.drv.networkActive(ctx, h, p.block.Network)
		if errors.Is(err, errInactive) {
			err = fmt.Errorf("%w: %w", errNoNetwork, err)
		}
		if err != nil {
			return fail(err, "checking network "+p.block.Network)
		}
	}
	var missing []string
	for _, im := range slices.Sorted(maps.Keys(p.block.Images)) {
		vol := p.block.Images[im].Volume
		_, err := p.drv.volumeXML(ctx, h, p.block.Pool, vol)
		if errors.Is(err, errNoVolume) {
			missing = append(missing, fmt.Sprintf("%s (volume %s)", im, vol))
			continue
		}
		if err != nil {
			return fail(err, "checking image volume "+vol)
		}
	}
	if len(missing) > 0 {
		v.Reason = ReasonImageNotFound
		v.Message = fmt.Sprintf("pool %s lacks the base volume of %s", p.block.Pool, strings.Join(missing, ", "))
		v.Latency = time.Since(start)
		return v
	}
	v.Healthy, v.Reason = true, ReasonOK
	nic := "network " + p.block.Network
	if p.block.Bridge != "" {
		nic = "bridge " + p.block.Bridge + " (not checked)"
	}
	v.Message = fmt.Sprintf("libvirt answers; pool %s active (%d MiB free), %s, %d image volumes present",
		p.block.Pool, pf.Available>>20, nic, len(p.block.Images))
	v.Latency = time.Since(start)
	return v
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
