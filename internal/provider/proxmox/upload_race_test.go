package proxmox

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// uploadsRunning lists the imgcopy tasks running on node (F12, F16).
func (h *harness) uploadsRunning(node string) []string {
	h.t.Helper()
	c := newClient(h.block.APIURL, h.block.TokenFile, h.block.CAFile, false)
	list, err := c.tasks(h.ctx, node, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, e := range list {
		if e.Status == "" && strings.Contains(e.UPID, ":imgcopy:") {
			out = append(out, e.UPID)
		}
	}
	return out
}

// TestDeleteWaitsForTheSeedUploadInFlight (#38 item 7, the chaos run's seed
// left by a Proxy deleted during its create): a seed upload is an imgcopy
// task that lands the ISO when it ends, about 4 s after the call, while a
// volume delete ends in under a second (F12, F13, F26). A Delete that no
// longer knows of the upload task deleted the seed before it landed (F13: a
// missing volume's delete ends OK), destroyed the VM and succeeded; the
// upload then landed a seed, with the proxy password, that nothing leads to
// but the sweep after its grace. The simulator holds the upload task
// running until the Delete has had its chance to get it wrong.
func TestDeleteWaitsForTheSeedUploadInFlight(t *testing.T) {
	for _, tc := range []struct {
		name string
		// loseTrack drives the create until its upload task runs and the
		// deleting provider does not know of it; it returns that provider
		// and the ID its Delete is given.
		loseTrack func(h *harness, p *Provider, req provider.Request) (*Provider, provider.ID)
	}{
		{
			// The chaos run's interleaving: the upload runs, its answer is
			// cut, Create fails Transient and records no task; the Proxy is
			// deleted before the next Create.
			name: "the upload's answer was lost",
			loseTrack: func(h *harness, p *Provider, req provider.Request) (*Provider, provider.ID) {
				h.sim.LoseAnswerNext(http.MethodPost, "/nodes/{node}/storage/{storage}/upload", 1)
				var err error
				h.eventually("create fails on the lost answer of its upload", func() bool {
					_, err = p.Create(h.ctx, req)
					return !provider.IsInProgress(err)
				})
				if !provider.IsTransient(err) {
					h.t.Fatalf("create after the lost answer: %v (class %s), want Transient", err, provider.ClassOf(err))
				}
				return p, h.instanceOf(p, req.OwnerUID)
			},
		},
		{
			// The operator restarts while the upload task runs: the new
			// process never saw it.
			name: "the operator restarted during the upload",
			loseTrack: func(h *harness, p *Provider, req provider.Request) (*Provider, provider.ID) {
				h.createUntil(p, req, "uploading the seed")
				p = h.provider()
				return p, h.instanceOf(p, req.OwnerUID)
			},
		},
		{
			// The VM goes behind the operator's back during the upload,
			// after a restart: Delete finds no VM (gone) and looks for the
			// seed on every node before it landed.
			name: "the VM was removed during the upload, after a restart",
			loseTrack: func(h *harness, p *Provider, req provider.Request) (*Provider, provider.ID) {
				h.createUntil(p, req, "uploading the seed")
				vms := h.vmsNamed(req.Name)
				if len(vms) != 1 {
					h.t.Fatalf("VMs named %s during the upload: %v, want one", req.Name, vms)
				}
				h.destroyBehindOurBack(vms[0].Node, vms[0].VMID)
				return h.provider(), ID(vms[0].Node, vms[0].VMID, req.Name)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			release := h.sim.HoldTasks("imgcopy")
			t.Cleanup(release)
			req := h.request("uid-upload-race", "proxy-uploadrace000001")
			p, id := tc.loseTrack(h, h.provider(), req)
			if len(h.uploadsRunning("pve1")) == 0 {
				t.Fatal("the test needs the seed's upload task running when the Delete starts")
			}
			// Delete as the finalizer does: until it succeeds, then never
			// again. The upload ends once the Delete waits for it.
			h.eventually("delete "+string(id), func() bool {
				err := p.Delete(h.ctx, id)
				if err != nil && !provider.IsInProgress(err) {
					t.Fatalf("delete: %v", err)
				}
				if err != nil && strings.Contains(err.Error(), "upload") {
					release()
				}
				return err == nil
			})
			release()
			h.eventually("every upload ended", func() bool { return len(h.uploadsRunning("pve1")) == 0 })
			if diff := cmp.Diff([]string(nil), h.leftovers(req.Name)); diff != "" {
				t.Errorf("left after the delete and the upload's end (-want +got):\n%s", diff)
			}
		})
	}
}

// instanceOf is the ID ListByTag reports for an owner, as the finalizer
// finds the instance of a Proxy deleted before its ID was recorded.
func (h *harness) instanceOf(p *Provider, ownerUID string) provider.ID {
	h.t.Helper()
	ids := h.instancesOf(p, ownerUID)
	if len(ids) == 0 {
		h.t.Fatalf("ListByTag reports no instance of %s", ownerUID)
	}
	return ids[0]
}
