package config

import (
	"fmt"
	"slices"
	"strings"
)

// Placement is a Proxy's spec resolved against its entry.
type Placement struct {
	// Entry is the provider entry.
	Entry *Entry
	// Zone is the zone, defaulted when the entry has exactly one.
	Zone string
	// MachineType is the resolved size.
	MachineType MachineType
	// Image is the image name.
	Image string
}

// SpecError says which part of a Proxy's spec does not resolve, and lists
// what exists instead. Its message is meant for the Proxy's status.
type SpecError struct {
	// Field is the spec field at fault, for example "spec.zone".
	Field string
	// Message says what is wrong and lists the valid values.
	Message string
}

// Error returns the message prefixed with the field.
func (e *SpecError) Error() string { return e.Field + ": " + e.Message }

// Entry returns the entry with the given name, or nil.
func (c *Config) Entry(name string) *Entry {
	for i := range c.Providers {
		if c.Providers[i].Name == name {
			return &c.Providers[i]
		}
	}
	return nil
}

// Resolve checks a Proxy's provider, zone, machine type and image against the
// configuration. It returns a *SpecError for the first field that does not
// resolve, in spec order.
func (c *Config) Resolve(providerName, zone, machineType, image string) (Placement, error) {
	e := c.Entry(providerName)
	if e == nil {
		names := make([]string, 0, len(c.Providers))
		for _, p := range c.Providers {
			names = append(names, p.Name)
		}
		return Placement{}, &SpecError{Field: "spec.provider",
			Message: fmt.Sprintf("no provider entry named %q; configured: %s", providerName, list(names))}
	}
	p := Placement{Entry: e, Zone: zone, Image: image}
	switch {
	case zone == "" && len(e.Zones) == 1:
		p.Zone = e.Zones[0]
	case zone == "":
		return Placement{}, &SpecError{Field: "spec.zone",
			Message: fmt.Sprintf("provider %q has several zones, so a zone is required; one of: %s", e.Name, list(e.Zones))}
	case !slices.Contains(e.Zones, zone):
		return Placement{}, &SpecError{Field: "spec.zone",
			Message: fmt.Sprintf("provider %q has no zone %q; zones: %s", e.Name, zone, list(e.Zones))}
	}
	mt, found := e.MachineTypes[machineType]
	if !found {
		return Placement{}, &SpecError{Field: "spec.machineType",
			Message: fmt.Sprintf("provider %q has no machine type %q; machine types: %s", e.Name, machineType, list(e.MachineTypeNames()))}
	}
	mt.Name = machineType
	p.MachineType = mt
	if !slices.Contains(e.Images, image) {
		return Placement{}, &SpecError{Field: "spec.image",
			Message: fmt.Sprintf("provider %q has no image %q; images: %s", e.Name, image, list(e.Images))}
	}
	return p, nil
}

// CheckExtraUserData returns a *SpecError when a Proxy (or a pool's
// template) carries extra user-data and the entry does not allow it
// (AllowExtraUserData), and nil otherwise.
func (e *Entry) CheckExtraUserData(extra string) error {
	if extra == "" || e.AllowExtraUserData {
		return nil
	}
	return &SpecError{Field: "spec.extraUserData",
		Message: fmt.Sprintf("provider %q does not allow extra user-data: it would run as root on the proxy, "+
			"so the administrator decides (allowExtraUserData in the entry of the providers configuration, off by default); "+
			"remove spec.extraUserData or ask the administrator", e.Name)}
}

func list(names []string) string {
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}
