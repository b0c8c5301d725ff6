package proxmox

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Check implements provider.Checker: one verdict per configured node, checked
// concurrently (health check in docs/proxmox-behaviour.md).
func (p *Provider) Check(ctx context.Context) []provider.Verdict {
	nodes := p.block.Nodes()
	out := make([]provider.Verdict, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { out[i] = p.checkNode(ctx, n) })
	}
	wg.Wait()
	return out
}

func (p *Provider) checkNode(ctx context.Context, node string) provider.Verdict {
	start := time.Now()
	v := provider.Verdict{Target: node}
	fail := func(reason string, err error, what string) provider.Verdict {
		v.Reason = reason
		v.Message = fmt.Sprintf("%s: %s", what, err.Error())
		v.Latency = time.Since(start)
		return v
	}
	if _, err := p.api.token(); err != nil {
		// No request is sent without a usable token.
		return fail(ReasonCredentialsUnavailable, err, "reading the API token")
	}
	if err := p.api.version(ctx); err != nil {
		return fail(reasonFor(err), err, "reaching the API")
	}
	if err := p.api.nodeStatus(ctx, node); err != nil {
		return fail(reasonFor(err), err, "reading the node status")
	}
	st, err := p.api.storageStatus(ctx, node, p.block.ISOStorage)
	if err != nil {
		reason := reasonFor(err)
		if ae, ok := apiErr(err); ok && (ae.Status == 500 || (ae.Status == 400 && ae.Fields["storage"] != "")) {
			// F23: an unknown storage is a 400 with a storage field error;
			// a storage that is configured but cannot be read on this node
			// (not mounted, not available there) answers 500. Either way
			// the seeds have nowhere to go.
			reason = ReasonStorageNotFound
		}
		return fail(reason, err, "reading ISO storage "+p.block.ISOStorage)
	}
	if a, ok := st["active"].(float64); ok && a == 0 {
		return fail(ReasonStorageNotFound, fmt.Errorf("storage %s is not active on %s", p.block.ISOStorage, node), "reading ISO storage "+p.block.ISOStorage)
	}
	list, _, err := p.cachedListing(ctx)
	if err != nil {
		return fail(reasonFor(err), err, "listing vms")
	}
	var missing []string
	images := make([]string, 0, len(p.block.Images))
	for im := range p.block.Images {
		images = append(images, im)
	}
	sort.Strings(images)
	for _, im := range images {
		t, ok := find(list, p.block.Images[im].TemplateVMID)
		if !ok || t.Type != "qemu" || t.Template != 1 {
			missing = append(missing, fmt.Sprintf("%s (VMID %d)", im, p.block.Images[im].TemplateVMID))
		}
	}
	if len(missing) > 0 {
		return fail(ReasonTemplateNotFound, fmt.Errorf("no template for %s", strings.Join(missing, ", ")), "checking templates")
	}
	v.Healthy = true
	v.Reason = ReasonReachable
	v.Message = fmt.Sprintf("node %s online, storage %s active, %d templates present", node, p.block.ISOStorage, len(images))
	v.Latency = time.Since(start)
	return v
}
