package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// Block is the type-specific part of an entry, decoded strictly from the key
// named after the entry's type (for example `proxmox:`).
type Block interface {
	// Validate checks the block against the rest of its entry (for example,
	// that every zone has a placement) and returns errors under path.
	Validate(path *field.Path, entry *Entry) field.ErrorList
}

// Registry maps each provider type the binary supports to a constructor of
// its block: a function returning a pointer to a zero block struct, into which
// the block is decoded.
type Registry map[string]func() Block

// Types returns the registered type names, sorted.
func (r Registry) Types() []string {
	out := make([]string, 0, len(r))
	for t := range r {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Config is the decoded and validated providers configuration.
type Config struct {
	// Providers are the entries, in file order.
	Providers []Entry
}

// Entry is one configured provider entry.
type Entry struct {
	// Name identifies the entry: Proxy.spec.provider refers to it and the
	// entry's ProviderHealth object is named after it.
	Name string `json:"name"`
	// Type is the provider type, a key of the Registry.
	Type string `json:"type"`
	// Zones are the zones proxies can ask for.
	Zones []string `json:"zones"`
	// MachineTypes are the instance sizes proxies can ask for, keyed by the
	// name Proxy.spec.machineType refers to.
	MachineTypes map[string]MachineType `json:"machineTypes"`
	// Images are the operating system images proxies can ask for; the block
	// maps each to something the provider knows (a template, a file, ...).
	Images []string `json:"images"`
	// Probe says how the operator checks the entry's proxies through the
	// proxy (docs/pools.md).
	Probe Probe `json:"probe,omitzero"`
	// MaxConcurrentCreates caps how many of the entry's instances are being
	// created at once (created, not yet running with an address): a fleet
	// that replaces everything at once after an outage must not flood the
	// hypervisor. Zero means DefaultMaxConcurrentCreates.
	MaxConcurrentCreates int `json:"maxConcurrentCreates,omitempty"`
	// EgressPolicy is where the entry's proxies may connect; see
	// egress.Policy.
	EgressPolicy egress.Policy `json:"egressPolicy,omitzero"`
	// Block is the decoded type-specific block.
	Block Block `json:"-"`
}

// DefaultMaxConcurrentCreates is an entry's cap on concurrent creates when
// it sets none: enough for a cluster to clone in parallel, few enough that
// a mass replacement queues rather than piles up.
const DefaultMaxConcurrentCreates = 10

// maxMaxConcurrentCreates is the largest cap accepted, to catch typos.
const maxMaxConcurrentCreates = 1000

// CreateLimit returns the entry's cap on concurrent creates.
func (e *Entry) CreateLimit() int {
	if e.MaxConcurrentCreates == 0 {
		return DefaultMaxConcurrentCreates
	}
	return e.MaxConcurrentCreates
}

// MachineType is one instance size, written as a value of the machineTypes
// map: `medium: {cores: 2, memoryMiB: 2048, diskGiB: 10}`.
type MachineType struct {
	// Name is the machine type's key in the map, filled in by Parse; it is
	// not a key of the file.
	Name string `json:"-"`
	// Cores is the number of virtual CPU cores.
	Cores int `json:"cores"`
	// MemoryMiB is the memory in MiB.
	MemoryMiB int `json:"memoryMiB"`
	// DiskGiB is the root disk size in GiB; 0 keeps the image's size.
	DiskGiB int `json:"diskGiB,omitempty"`
}

// Limits of the catalogues, chosen to catch typos (memory in GiB instead of
// MiB) rather than to police sizes.
const (
	maxCores     = 256
	minMemoryMiB = 64
	maxMemoryMiB = 4 << 20
	maxDiskGiB   = 64 << 10
)

// entryFields are the keys of an entry besides its type block.
var entryFields = []string{"name", "type", "zones", "machineTypes", "images", "probe", "maxConcurrentCreates", "egressPolicy"}

// Load reads and decodes the file at path. See Parse.
func Load(path string, reg Registry) (*Config, error) {
	data, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's own --providers-config flag.
	if err != nil {
		return nil, fmt.Errorf("reading providers config: %w", err)
	}
	cfg, err := Parse(data, reg)
	if err != nil {
		return nil, fmt.Errorf("providers config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes and validates a providers configuration. Every problem found
// is reported, one per line, each naming its field path (with the entry's
// name as the key, as in `providers[lab].zones`).
func Parse(data []byte, reg Registry) (*Config, error) {
	// YAMLToJSONStrict rejects duplicate keys, which plain YAML decoding
	// silently resolves to the last one.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var top struct {
		Providers []json.RawMessage `json:"providers"`
	}
	if err := decodeStrict(js, &top); err != nil {
		return nil, fmt.Errorf("top level: %w (the file holds one key, providers, a list of entries)", err)
	}
	root := field.NewPath("providers")
	var errs field.ErrorList
	if len(top.Providers) == 0 {
		errs = append(errs, field.Required(root, "at least one provider entry is needed"))
	}
	cfg := &Config{}
	seen := map[string]int{}
	for i, raw := range top.Providers {
		e, entryErrs := parseEntry(root.Index(i), raw, reg)
		errs = append(errs, entryErrs...)
		if e == nil {
			continue
		}
		if j, dup := seen[e.Name]; dup && e.Name != "" {
			errs = append(errs, field.Duplicate(root.Index(i).Child("name"),
				fmt.Sprintf("%s (also the name of providers[%d])", e.Name, j)))
		}
		seen[e.Name] = i
		cfg.Providers = append(cfg.Providers, *e)
	}
	if len(errs) > 0 {
		return nil, aggregate(errs)
	}
	return cfg, nil
}

func parseEntry(idx *field.Path, raw json.RawMessage, reg Registry) (*Entry, field.ErrorList) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, field.ErrorList{field.Invalid(idx, "", "must be a mapping with name, type, zones, machineTypes, images and a type block")}
	}
	var e Entry
	var errs field.ErrorList
	// Decode the common fields first, so that later messages can name the
	// entry rather than its index.
	common := map[string]json.RawMessage{}
	for k, v := range keys {
		if slices.Contains(entryFields, k) {
			common[k] = v
		}
	}
	cb, _ := json.Marshal(common) //nolint:errchkjson // re-marshalling raw JSON values cannot fail.
	if err := decodeStrict(cb, &e); err != nil {
		return nil, field.ErrorList{field.Invalid(idx, "", err.Error())}
	}
	// A machine type's name is its key in the map.
	for name, mt := range e.MachineTypes {
		mt.Name = name
		e.MachineTypes[name] = mt
	}
	path := idx
	if e.Name != "" {
		path = field.NewPath("providers").Key(e.Name)
	}
	errs = append(errs, ValidateName(path.Child("name"), e.Name)...)

	newBlock, known := reg[e.Type]
	switch {
	case len(reg) == 0:
		errs = append(errs, field.Invalid(path.Child("type"), e.Type, "this build of the operator has no provider types registered"))
	case e.Type == "":
		errs = append(errs, field.Required(path.Child("type"), "one of: "+strings.Join(reg.Types(), ", ")))
	case !known:
		errs = append(errs, field.NotSupported(path.Child("type"), e.Type, reg.Types()))
	}

	// Every other key is either this entry's block, another type's block, or
	// a mistake.
	others := make([]string, 0, len(keys))
	for k := range keys {
		if !slices.Contains(entryFields, k) && k != e.Type {
			others = append(others, k)
		}
	}
	sort.Strings(others)
	for _, k := range others {
		if _, isType := reg[k]; isType {
			errs = append(errs, field.Forbidden(path.Child(k),
				fmt.Sprintf("a %s block does not belong to an entry of type %q", k, e.Type)))
			continue
		}
		errs = append(errs, field.NotSupported(path.Child(k), "(unknown field)", append(slices.Clone(entryFields), typeOrBlock(e.Type))))
	}

	errs = append(errs, validateCatalogues(path, &e)...)
	errs = append(errs, validateProbe(path.Child("probe"), e.Probe)...)
	if e.MaxConcurrentCreates < 0 || e.MaxConcurrentCreates > maxMaxConcurrentCreates {
		errs = append(errs, field.Invalid(path.Child("maxConcurrentCreates"), e.MaxConcurrentCreates,
			fmt.Sprintf("must be between 1 and %d, or unset for %d", maxMaxConcurrentCreates, DefaultMaxConcurrentCreates)))
	}
	errs = append(errs, validateEgress(e.EgressPolicy, path.Child("egressPolicy"))...)

	if known {
		blk := newBlock()
		if rawBlock, ok := keys[e.Type]; ok {
			if err := decodeStrict(rawBlock, blk); err != nil {
				errs = append(errs, field.Invalid(path.Child(e.Type), "", err.Error()))
				return &e, errs
			}
		}
		e.Block = blk
		errs = append(errs, blk.Validate(path.Child(e.Type), &e)...)
	}
	return &e, errs
}

func typeOrBlock(t string) string {
	if t == "" {
		return "<type block>"
	}
	return t
}

// ValidateName checks that name is a DNS label, as entry and catalogue names
// must be; blocks use it for the names they introduce (nodes, storages).
func ValidateName(path *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "a DNS label such as lab or pve-office")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

func validateCatalogues(path *field.Path, e *Entry) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateNames(path.Child("zones"), e.Zones, "zone")...)
	errs = append(errs, validateNames(path.Child("images"), e.Images, "image")...)

	mtPath := path.Child("machineTypes")
	if len(e.MachineTypes) == 0 {
		errs = append(errs, field.Required(mtPath, "at least one machine type, such as {small: {cores: 1, memoryMiB: 512}}"))
	}
	for _, name := range sortedKeys(e.MachineTypes) {
		mt := e.MachineTypes[name]
		p := mtPath.Key(name)
		errs = append(errs, ValidateName(p, name)...)
		if mt.Cores < 1 || mt.Cores > maxCores {
			errs = append(errs, field.Invalid(p.Child("cores"), mt.Cores, fmt.Sprintf("must be between 1 and %d", maxCores)))
		}
		if mt.MemoryMiB < minMemoryMiB || mt.MemoryMiB > maxMemoryMiB {
			errs = append(errs, field.Invalid(p.Child("memoryMiB"), mt.MemoryMiB,
				fmt.Sprintf("must be between %d and %d (the unit is MiB)", minMemoryMiB, maxMemoryMiB)))
		}
		if mt.DiskGiB < 0 || mt.DiskGiB > maxDiskGiB {
			errs = append(errs, field.Invalid(p.Child("diskGiB"), mt.DiskGiB,
				fmt.Sprintf("must be between 0 (keep the image's size) and %d (the unit is GiB)", maxDiskGiB)))
		}
	}
	return errs
}

// MachineTypeNames returns the names of the entry's machine types, sorted.
func (e *Entry) MachineTypeNames() []string { return sortedKeys(e.MachineTypes) }

func validateNames(path *field.Path, names []string, what string) field.ErrorList {
	if len(names) == 0 {
		return field.ErrorList{field.Required(path, fmt.Sprintf("at least one %s", what))}
	}
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, n := range names {
		errs = append(errs, ValidateName(path.Index(i), n)...)
		if seen[n] && n != "" {
			errs = append(errs, field.Duplicate(path.Index(i), n))
		}
		seen[n] = true
	}
	return errs
}

// decodeStrict decodes JSON into v, rejecting unknown fields. Field names
// match case-sensitively, as in Kubernetes objects: encoding/json would take
// `hostnetwork` for `hostNetwork`, which hides typos.
func decodeStrict(data []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(data, v)
	if err != nil {
		return cleanJSONError(err)
	}
	if len(strict) > 0 {
		return cleanJSONError(errors.Join(strict...))
	}
	return nil
}

// cleanJSONError drops the "json: " prefix, which says nothing to a user who
// wrote YAML.
func cleanJSONError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %s: got %s, want %s", te.Field, te.Value, friendlyKind(te.Type.Kind().String()))
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

func friendlyKind(k string) string {
	switch k {
	case "slice":
		return "a list"
	case "map", "struct":
		return "a mapping"
	case "int", "int32", "int64", "uint", "uint16", "uint32":
		return "an integer"
	default:
		return k
	}
}

// aggregate turns field errors into one error with one line per problem.
func aggregate(errs field.ErrorList) error {
	lines := make([]string, 0, len(errs))
	for _, e := range errs {
		lines = append(lines, e.Error())
	}
	return &InvalidError{Problems: lines}
}

// InvalidError is returned by Parse and Load for a configuration that does not
// validate. Problems has one message per problem, each naming its field path.
type InvalidError struct {
	Problems []string
}

// Error lists the problems, one per line.
func (e *InvalidError) Error() string {
	if len(e.Problems) == 1 {
		return "invalid: " + e.Problems[0]
	}
	return fmt.Sprintf("invalid (%d problems):\n  %s", len(e.Problems), strings.Join(e.Problems, "\n  "))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
