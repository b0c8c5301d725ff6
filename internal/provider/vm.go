package provider

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/keyedlock"
)

// What the types running proxies as VMs (libvirt, proxmox) share, so that
// neither keeps a copy: the start of Create and Delete, and the hash their
// placement choices derive from.

// Names serialises a provider's calls by instance name, so that two calls
// for one instance never interleave their steps. The zero value is ready to
// use.
type Names struct{ l keyedlock.Locker }

// Lock locks name, waiting until it is free or ctx ends; then it returns a
// Transient error and holds nothing. Call the unlock exactly once.
func (n *Names) Lock(ctx context.Context, name string) (func(), error) {
	unlock, err := n.l.Lock(ctx, name)
	if err != nil {
		return nil, NewTransient(err)
	}
	return unlock, nil
}

// Begin is the start of a Create: plan resolves the request in the
// provider's entry, then the request's name is locked (Names.Lock). On
// success the caller holds the name until it calls unlock.
func Begin[P any](ctx context.Context, names *Names, req Request, plan func(Request) (P, error)) (pl P, unlock func(), err error) {
	if pl, err = plan(req); err != nil {
		return pl, nil, err
	}
	unlock, err = names.Lock(ctx, req.Name)
	return pl, unlock, err
}

// BeginDelete is the start of a Delete: parse resolves the instance ID in
// the provider's entry, giving what it names and the instance's name, then
// the name is locked (Names.Lock), as Begin locks it for a Create, so that
// a Delete never interleaves with a Create or Delete of the same instance.
// On success the caller holds the name until it calls unlock.
func BeginDelete[T any](ctx context.Context, names *Names, id ID, parse func(ID) (T, string, error)) (t T, name string, unlock func(), err error) {
	if t, name, err = parse(id); err != nil {
		return t, name, nil, err
	}
	unlock, err = names.Lock(ctx, name)
	return t, name, unlock, err
}

// Catalogued checks a Create request against an entry whose block maps
// every catalogue image to an I (a base volume, a template), and returns
// the request's I and machine type. A request without an instance name or
// owner uid is an operator bug; an image or machine type the entry lacks
// needs the configuration fixed: both are Permanent. what is what an image
// maps to ("template"), fix how to add it.
func Catalogued[I any](e *config.Entry, images map[string]I, req Request, what, fix string) (I, config.MachineType, error) {
	var img I
	switch {
	case req.Name == "":
		// An empty name would match the nameless VMs of a clone in flight
		// (docs/proxmox-behaviour.md, Create step 1).
		return img, config.MachineType{}, NewPermanent(errors.New("the request has no instance name"), "report this operator bug")
	case req.OwnerUID == "":
		return img, config.MachineType{}, NewPermanent(errors.New("the request has no owner uid"), "report this operator bug")
	}
	img, ok := images[req.Image]
	if !ok {
		return img, config.MachineType{}, NewPermanent(fmt.Errorf("image %q has no %s", req.Image, what), fix)
	}
	mt, ok := e.MachineTypes[req.MachineType]
	if !ok {
		return img, config.MachineType{}, NewPermanent(fmt.Errorf("machine type %q is not in the catalogue", req.MachineType), "use a machine type of the entry")
	}
	return img, mt, nil
}

// InstanceHash hashes an instance's identity (its owner's uid and its
// name), for the choices a VM type derives from it: the node of a zone and
// the first VMID probed (proxmox), the MAC address (libvirt). It is
// deterministic so that every call of a Create, in any process, plans the
// same choices for one instance.
func InstanceHash(ownerUID, name string) uint64 {
	h := fnv.New64a()
	for _, s := range []string{ownerUID, name} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}
