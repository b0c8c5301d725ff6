// The tests are in package config_test, not config: they need the fake
// provider's registry, and fakeprovider imports config, so an in-package test
// importing it would be an import cycle.
package config_test

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// otherBlock is the block of a second registered type, so that a block of the
// wrong type can be told apart from an unknown field.
type otherBlock struct {
	Host string `json:"host,omitempty"`
}

func (*otherBlock) Validate(*field.Path, *config.Entry) field.ErrorList { return nil }

// testRegistry registers the fake type and a second type, "other".
func testRegistry() config.Registry {
	reg := fakeprovider.Registry()
	reg["other"] = func() config.Block { return &otherBlock{} }
	return reg
}

// catalogues is a valid entry body after its name line.
const catalogues = `
  type: fake
  zones: [z1]
  machineTypes:
    small: {cores: 1, memoryMiB: 512}
  images: [debian-12]
`

// minimal is the smallest valid configuration.
const minimal = "providers:\n- name: lab" + catalogues

func TestParse(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		yaml   string
		// want is the decoded configuration, for valid inputs.
		want *config.Config
		// wantErr are fragments the error must hold, for invalid inputs; they
		// include the field path, which is what tells a user where to look.
		wantErr []string
		// wantProblems, when not zero, is how many problems the
		// *InvalidError must list; -1 means the error must not be an
		// *InvalidError at all (it is a decoding error of the whole file).
		wantProblems int
	}{
		{
			name:   "valid minimal",
			reason: "an entry without a type block is valid, and gets a zero block so that providers never see a nil Block",
			yaml:   minimal,
			want: &config.Config{Providers: []config.Entry{{
				Name: "lab", Type: "fake", Zones: []string{"z1"},
				MachineTypes: map[string]config.MachineType{"small": {Name: "small", Cores: 1, MemoryMiB: 512}},
				Images:       []string{"debian-12"},
				Block:        &fakeprovider.Block{},
			}}},
		},
		{
			name:   "valid with block and two entries",
			reason: "the type block is decoded into the registered type's struct, and entries keep file order",
			yaml: "providers:\n- name: lab" + catalogues + "  fake: {nodes: {z1: pve1}}\n" +
				"- name: office\n  type: other\n  zones: [a, b]\n  machineTypes: {big: {cores: 4, memoryMiB: 8192, diskGiB: 20}}\n  images: [alpine]\n  other: {host: h1}\n",
			want: &config.Config{Providers: []config.Entry{
				{
					Name: "lab", Type: "fake", Zones: []string{"z1"},
					MachineTypes: map[string]config.MachineType{"small": {Name: "small", Cores: 1, MemoryMiB: 512}},
					Images:       []string{"debian-12"},
					Block:        &fakeprovider.Block{Nodes: map[string]string{"z1": "pve1"}},
				},
				{
					Name: "office", Type: "other", Zones: []string{"a", "b"},
					MachineTypes: map[string]config.MachineType{"big": {Name: "big", Cores: 4, MemoryMiB: 8192, DiskGiB: 20}},
					Images:       []string{"alpine"},
					Block:        &otherBlock{Host: "h1"},
				},
			}},
		},
		{
			name:   "machine types as a map",
			reason: "the reference form: machine types keyed by name, each with cores, memoryMiB and diskGiB; the key becomes the name",
			yaml: "providers:\n- name: lab\n  type: fake\n  zones: [z1]\n  images: [d]\n  machineTypes:\n" +
				"    small: {cores: 1, memoryMiB: 512}\n    medium: {cores: 2, memoryMiB: 2048, diskGiB: 10}\n",
			want: &config.Config{Providers: []config.Entry{{
				Name: "lab", Type: "fake", Zones: []string{"z1"}, Images: []string{"d"},
				MachineTypes: map[string]config.MachineType{
					"small":  {Name: "small", Cores: 1, MemoryMiB: 512},
					"medium": {Name: "medium", Cores: 2, MemoryMiB: 2048, DiskGiB: 10},
				},
				Block: &fakeprovider.Block{},
			}}},
		},
		{
			name:         "machine types as a list",
			reason:       "the list form ({name, cpus}) is not this project's: it is refused, saying a mapping is wanted",
			yaml:         "providers:\n- name: lab\n  type: fake\n  zones: [z1]\n  machineTypes: [{name: small, cpus: 1, memoryMiB: 512}]\n  images: [d]\n",
			wantErr:      []string{"providers[0]", "field machineTypes", "want a mapping"},
			wantProblems: 1,
		},
		{
			name:         "cpus instead of cores",
			reason:       "the strict decoder refuses a key the machine type does not have, at its path",
			yaml:         "providers:\n- name: lab\n  type: fake\n  zones: [z1]\n  machineTypes: {small: {cpus: 1, memoryMiB: 512}}\n  images: [d]\n",
			wantErr:      []string{"providers[0]", `unknown field "machineTypes.small.cpus"`},
			wantProblems: 1,
		},
		{
			name:         "invalid machine type name",
			reason:       "a machine type's key is what Proxy.spec.machineType holds, so it must be a DNS label",
			yaml:         "providers:\n- name: lab\n  type: fake\n  zones: [z1]\n  machineTypes: {Small: {cores: 1, memoryMiB: 512}}\n  images: [d]\n",
			wantErr:      []string{"providers[lab].machineTypes[Small]", "RFC 1123"},
			wantProblems: 1,
		},
		{
			name:   "egress policy",
			reason: "the administrator widens and narrows the destinations per entry; ports are numbers or ranges",
			yaml: minimal + "  egressPolicy:\n    allowCIDRs: [127.0.0.0/8, 'fd00::/8']\n    denyCIDRs: [203.0.113.0/24]\n" +
				"    connectPorts: [443, '8000-8999', '8443']\n",
			want: &config.Config{Providers: []config.Entry{{
				Name: "lab", Type: "fake", Zones: []string{"z1"},
				MachineTypes: map[string]config.MachineType{"small": {Name: "small", Cores: 1, MemoryMiB: 512}},
				Images:       []string{"debian-12"},
				EgressPolicy: egress.Policy{
					AllowCIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("fd00::/8")},
					DenyCIDRs:    []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
					ConnectPorts: []egress.PortRange{{From: 443, To: 443}, {From: 8000, To: 8999}, {From: 8443, To: 8443}},
				},
				Block: &fakeprovider.Block{},
			}}},
		},
		{
			name:         "egress policy with host bits",
			reason:       "198.51.100.7/24 is most likely a typo for one address or the network: say which",
			yaml:         minimal + "  egressPolicy: {denyCIDRs: [198.51.100.7/24]}\n",
			wantErr:      []string{"providers[lab].egressPolicy.denyCIDRs[0]", "198.51.100.0/24"},
			wantProblems: 1,
		},
		{
			name:         "egress policy with a reversed port range",
			reason:       "9000-8000 holds no port",
			yaml:         minimal + "  egressPolicy: {connectPorts: ['9000-8000', 0]}\n",
			wantErr:      []string{"providers[lab].egressPolicy.connectPorts[0]", "providers[lab].egressPolicy.connectPorts[1]"},
			wantProblems: 2,
		},
		{
			name:         "egress policy with a bad CIDR",
			reason:       "a CIDR that does not parse fails the entry (decoded with the common fields, so named by index)",
			yaml:         minimal + "  egressPolicy: {allowCIDRs: [everything]}\n",
			wantErr:      []string{"providers[0]", "everything"},
			wantProblems: 1,
		},
		{
			name:         "egress policy with a bad port",
			reason:       "a port past 65535 fails the entry",
			yaml:         minimal + "  egressPolicy: {connectPorts: [70000]}\n",
			wantErr:      []string{"providers[0]", "70000"},
			wantProblems: 1,
		},
		{
			name:         "unknown top-level key",
			reason:       "a misspelt `providers` must not read as an empty file",
			yaml:         "provider: []\n",
			wantErr:      []string{"top level", `unknown field "provider"`},
			wantProblems: -1,
		},
		{
			name:         "empty providers",
			reason:       "an operator with no entry can serve no Proxy: refuse to start",
			yaml:         "providers: []\n",
			wantErr:      []string{"providers: Required value", "at least one provider entry"},
			wantProblems: 1,
		},
		{
			name:         "empty file",
			reason:       "an empty file decodes to null, which must be reported as missing entries rather than accepted",
			yaml:         "",
			wantErr:      []string{"providers: Required value"},
			wantProblems: 1,
		},
		{
			name:         "unknown field in an entry",
			reason:       "a typo such as zonez must be reported at its path, not silently dropped",
			yaml:         minimal + "  zonez: [z2]\n",
			wantErr:      []string{"providers[lab].zonez", "unknown field", `"zones"`},
			wantProblems: 1,
		},
		{
			name:         "negative maxConcurrentCreates",
			reason:       "a cap below one would stop every create; a typo must be refused, not read as the default",
			yaml:         minimal + "  maxConcurrentCreates: -1\n",
			wantErr:      []string{"providers[lab].maxConcurrentCreates", "between 1 and 1000"},
			wantProblems: 1,
		},
		{
			name:         "unknown type",
			reason:       "a type this binary does not support must list the ones it does",
			yaml:         "providers:\n- name: lab\n  type: nope\n  zones: [z1]\n  machineTypes: {small: {cores: 1, memoryMiB: 512}}\n  images: [d]\n",
			wantErr:      []string{"providers[lab].type", `"nope"`, `"fake"`, `"other"`},
			wantProblems: 1,
		},
		{
			name:         "missing type",
			reason:       "without a type there is no block to decode; the message lists the choices",
			yaml:         "providers:\n- name: lab\n  zones: [z1]\n  machineTypes: {small: {cores: 1, memoryMiB: 512}}\n  images: [d]\n",
			wantErr:      []string{"providers[lab].type: Required value", "fake, other"},
			wantProblems: 1,
		},
		{
			name:         "block of another registered type",
			reason:       "an `other:` block in a fake entry is a copy-paste mistake, not an unknown field",
			yaml:         minimal + "  other: {host: h1}\n",
			wantErr:      []string{"providers[lab].other", "does not belong", `type "fake"`},
			wantProblems: 1,
		},
		{
			name:         "unknown field inside the block",
			reason:       "the block is decoded strictly too",
			yaml:         minimal + "  fake: {nodez: {z1: pve1}}\n",
			wantErr:      []string{"providers[lab].fake", `unknown field "nodez"`},
			wantProblems: 1,
		},
		{
			name:         "duplicate entry names",
			reason:       "Proxies and ProviderHealth objects refer to entries by name, which must be unique",
			yaml:         "providers:\n- name: lab" + catalogues + "- name: lab" + catalogues,
			wantErr:      []string{"providers[1].name: Duplicate value", "providers[0]"},
			wantProblems: 1,
		},
		{
			name:   "empty catalogues",
			reason: "a Proxy could ask for nothing; every empty catalogue is reported, all at once",
			yaml:   "providers:\n- name: lab\n  type: fake\n  zones: []\n  machineTypes: {}\n  images: []\n",
			wantErr: []string{
				"providers[lab].zones: Required value",
				"providers[lab].machineTypes: Required value",
				"providers[lab].images: Required value",
			},
			wantProblems: 3,
		},
		{
			name:         "duplicate zone",
			reason:       "a duplicate catalogue name is a typo for another name",
			yaml:         "providers:\n- name: lab\n  type: fake\n  zones: [z1, z1]\n  machineTypes: {small: {cores: 1, memoryMiB: 512}}\n  images: [d]\n",
			wantErr:      []string{"providers[lab].zones[1]: Duplicate value", `"z1"`},
			wantProblems: 1,
		},
		{
			name:   "machine type with cores 0 and memory 0",
			reason: "zero sizes come from a misspelt key (memory instead of memoryMiB); both are reported under the machine type's name",
			yaml:   "providers:\n- name: lab\n  type: fake\n  zones: [z1]\n  machineTypes: {small: {cores: 0, memoryMiB: 0}}\n  images: [d]\n",
			wantErr: []string{
				"providers[lab].machineTypes[small].cores", "between 1 and 256",
				"providers[lab].machineTypes[small].memoryMiB", "the unit is MiB",
			},
			wantProblems: 2,
		},
		{
			name:         "invalid entry name",
			reason:       "the entry name becomes a ProviderHealth object name, so it must be a DNS label",
			yaml:         "providers:\n- name: Lab" + catalogues,
			wantErr:      []string{"providers[Lab].name", `"Lab"`, "RFC 1123"},
			wantProblems: 1,
		},
		{
			name:         "duplicate YAML key",
			reason:       "plain YAML decoding keeps the last of two equal keys; the strict conversion must refuse instead",
			yaml:         "providers:\n- name: lab\n  name: lab2" + catalogues,
			wantErr:      []string{"not valid YAML", `key "name" already set`},
			wantProblems: -1,
		},
		{
			name:         "wrong type for a field",
			reason:       "a string where a list belongs must say which field and what was expected, in YAML terms",
			yaml:         "providers:\n- name: lab\n  type: fake\n  zones: z1\n  machineTypes: {small: {cores: 1, memoryMiB: 512}}\n  images: [d]\n",
			wantErr:      []string{"providers[0]", "field zones", "got string, want a list"},
			wantProblems: 1,
		},
		{
			name:         "entry that is not a mapping",
			reason:       "a list of strings instead of entries must not panic or pass",
			yaml:         "providers: [lab]\n",
			wantErr:      []string{"providers[0]", "must be a mapping"},
			wantProblems: 1,
		},
		{
			name:         "block validation error",
			reason:       "the block's own Validate runs with the entry, and its errors carry the block's path",
			yaml:         minimal + "  fake: {nodes: {z9: pve1}}\n",
			wantErr:      []string{"providers[lab].fake.nodes[z9]", `"z9"`, `"z1"`},
			wantProblems: 1,
		},
		{
			name: "several problems in several entries",
			reason: "every problem is reported at once, so that a user fixes the file in one go " +
				"rather than one error per restart",
			yaml: "providers:\n" +
				"- name: lab\n  type: fake\n  zones: [z1]\n  machineTypes: {small: {cores: 0, memoryMiB: 512}}\n  images: [d]\n  zonez: [x]\n" +
				"- name: Office\n  type: nope\n  zones: [z1]\n  machineTypes: {small: {cores: 1, memoryMiB: 512}}\n  images: []\n",
			wantErr: []string{
				"invalid (5 problems)",
				"providers[lab].zonez",
				"providers[lab].machineTypes[small].cores",
				"providers[Office].name",
				"providers[Office].type",
				"providers[Office].images",
			},
			wantProblems: 5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := config.Parse([]byte(tc.yaml), testRegistry())
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Parse() error = %v, want none (%s)", err, tc.reason)
				}
				if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
					t.Errorf("Parse() mismatch (-want +got) (%s):\n%s", tc.reason, diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse() = %+v, want an error (%s)", got, tc.reason)
			}
			if got != nil {
				t.Errorf("Parse() returned a config with its error: %+v (%s)", got, tc.reason)
			}
			for _, frag := range tc.wantErr {
				if !strings.Contains(err.Error(), frag) {
					t.Errorf("Parse() error does not contain %q (%s); error:\n%v", frag, tc.reason, err)
				}
			}
			var inv *config.InvalidError
			isInvalid := errors.As(err, &inv)
			switch {
			case tc.wantProblems == -1 && isInvalid:
				t.Errorf("Parse() error is an *InvalidError, want a decoding error (%s): %v", tc.reason, err)
			case tc.wantProblems > 0 && !isInvalid:
				t.Errorf("Parse() error is %T, want *config.InvalidError (%s): %v", err, tc.reason, err)
			case tc.wantProblems > 0:
				if diff := cmp.Diff(tc.wantProblems, len(inv.Problems)); diff != "" {
					t.Errorf("number of problems mismatch (-want +got) (%s):\n%s\nproblems: %q", tc.reason, diff, inv.Problems)
				}
			}
		})
	}
}

func TestInvalidErrorMessage(t *testing.T) {
	tests := []struct {
		name     string
		reason   string
		problems []string
		want     string
	}{
		{
			name:     "one problem",
			reason:   "a single problem reads on one line",
			problems: []string{"providers: Required value"},
			want:     "invalid: providers: Required value",
		},
		{
			name:     "several problems",
			reason:   "several problems are counted and listed one per line, so that logs show each path",
			problems: []string{"a: x", "b: y"},
			want:     "invalid (2 problems):\n  a: x\n  b: y",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := (&config.InvalidError{Problems: tc.problems}).Error()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Error() mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	valid := write("valid.yaml", minimal)
	invalid := write("invalid.yaml", "providers: []\n")
	missing := filepath.Join(dir, "missing.yaml")

	tests := []struct {
		name   string
		reason string
		path   string
		// wantNames are the entry names of a successful load.
		wantNames []string
		// wantErr are fragments of the error; wantIs and wantInvalid say what
		// the error must wrap.
		wantErr     []string
		wantIs      error
		wantInvalid bool
	}{
		{
			name:      "valid file",
			reason:    "Load reads the file and parses it like Parse",
			path:      valid,
			wantNames: []string{"lab"},
		},
		{
			name:        "invalid file",
			reason:      "the error names the file and still unwraps to *InvalidError for callers that list problems",
			path:        invalid,
			wantErr:     []string{invalid, "providers: Required value"},
			wantInvalid: true,
		},
		{
			name:    "missing file",
			reason:  "a wrong --providers-config path must say so and keep fs.ErrNotExist in the chain",
			path:    missing,
			wantErr: []string{"reading providers config", missing},
			wantIs:  fs.ErrNotExist,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(tc.path, testRegistry())
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Load() error = %v (%s)", err, tc.reason)
				}
				var names []string
				for _, e := range cfg.Providers {
					names = append(names, e.Name)
				}
				if diff := cmp.Diff(tc.wantNames, names); diff != "" {
					t.Errorf("entry names mismatch (-want +got) (%s):\n%s", tc.reason, diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load() = %+v, want an error (%s)", cfg, tc.reason)
			}
			for _, frag := range tc.wantErr {
				if !strings.Contains(err.Error(), frag) {
					t.Errorf("Load() error does not contain %q (%s); error: %v", frag, tc.reason, err)
				}
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Load() error %v does not wrap %v (%s)", err, tc.wantIs, tc.reason)
			}
			var inv *config.InvalidError
			if diff := cmp.Diff(tc.wantInvalid, errors.As(err, &inv)); diff != "" {
				t.Errorf("errors.As(*InvalidError) mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	cfg, err := config.Parse([]byte("providers:\n"+
		"- name: lab\n  type: fake\n  zones: [z1]\n"+
		"  machineTypes: {small: {cores: 1, memoryMiB: 512}, large: {cores: 4, memoryMiB: 4096}}\n"+
		"  images: [debian-12, alpine]\n"+
		"- name: office\n  type: fake\n  zones: [a, b]\n"+
		"  machineTypes: {small: {cores: 2, memoryMiB: 1024}}\n  images: [debian-12]\n"), testRegistry())
	if err != nil {
		t.Fatal(err)
	}
	type placement struct {
		Entry       string
		Zone        string
		MachineType config.MachineType
		Image       string
	}
	tests := []struct {
		name                             string
		reason                           string
		provider, zone, machineType, img string
		want                             placement
		wantErr                          *config.SpecError
	}{
		{
			name:     "zone omitted with one zone",
			reason:   "an entry with a single zone lets Proxies leave spec.zone empty",
			provider: "lab", machineType: "large", img: "alpine",
			want: placement{Entry: "lab", Zone: "z1", MachineType: config.MachineType{Name: "large", Cores: 4, MemoryMiB: 4096}, Image: "alpine"},
		},
		{
			name:     "explicit zone",
			reason:   "the machine type is resolved from the named entry, not from another entry with the same type name",
			provider: "office", zone: "b", machineType: "small", img: "debian-12",
			want: placement{Entry: "office", Zone: "b", MachineType: config.MachineType{Name: "small", Cores: 2, MemoryMiB: 1024}, Image: "debian-12"},
		},
		{
			name:     "unknown provider",
			reason:   "the status must list the configured entries so that the user can pick one",
			provider: "nope", machineType: "small", img: "debian-12",
			wantErr: &config.SpecError{Field: "spec.provider", Message: `no provider entry named "nope"; configured: lab, office`},
		},
		{
			name:     "zone omitted with several zones",
			reason:   "there is no sensible default among several zones: require one and list them",
			provider: "office", machineType: "small", img: "debian-12",
			wantErr: &config.SpecError{Field: "spec.zone", Message: `provider "office" has several zones, so a zone is required; one of: a, b`},
		},
		{
			name:     "unknown zone",
			reason:   "a zone of another entry must not be accepted",
			provider: "office", zone: "z1", machineType: "small", img: "debian-12",
			wantErr: &config.SpecError{Field: "spec.zone", Message: `provider "office" has no zone "z1"; zones: a, b`},
		},
		{
			name:     "unknown machine type",
			reason:   "the message lists the entry's machine types sorted, since a map has no order",
			provider: "lab", machineType: "huge", img: "debian-12",
			wantErr: &config.SpecError{Field: "spec.machineType", Message: `provider "lab" has no machine type "huge"; machine types: large, small`},
		},
		{
			name:     "unknown image",
			reason:   "the message lists the entry's images",
			provider: "lab", machineType: "small", img: "ubuntu",
			wantErr: &config.SpecError{Field: "spec.image", Message: `provider "lab" has no image "ubuntu"; images: debian-12, alpine`},
		},
		{
			name:     "first failing field wins",
			reason:   "fields are checked in spec order, so the zone is reported before the machine type and image",
			provider: "office", zone: "zz", machineType: "huge", img: "ubuntu",
			wantErr: &config.SpecError{Field: "spec.zone", Message: `provider "office" has no zone "zz"; zones: a, b`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cfg.Resolve(tc.provider, tc.zone, tc.machineType, tc.img)
			if tc.wantErr != nil {
				var se *config.SpecError
				if !errors.As(err, &se) {
					t.Fatalf("Resolve() error = %v (%T), want *config.SpecError (%s)", err, err, tc.reason)
				}
				if diff := cmp.Diff(tc.wantErr, se); diff != "" {
					t.Errorf("SpecError mismatch (-want +got) (%s):\n%s", tc.reason, diff)
				}
				if diff := cmp.Diff(tc.wantErr.Field+": "+tc.wantErr.Message, err.Error()); diff != "" {
					t.Errorf("Error() mismatch (-want +got) (%s):\n%s", tc.reason, diff)
				}
				if diff := cmp.Diff(config.Placement{}, got); diff != "" {
					t.Errorf("Resolve() returned a placement with its error (-want +got) (%s):\n%s", tc.reason, diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve() error = %v (%s)", err, tc.reason)
			}
			if got.Entry == nil {
				t.Fatalf("Resolve() placement has no entry (%s)", tc.reason)
			}
			if got.Entry != cfg.Entry(tc.want.Entry) {
				t.Errorf("Resolve() entry is not the configuration's own entry %q (%s)", tc.want.Entry, tc.reason)
			}
			gotP := placement{Entry: got.Entry.Name, Zone: got.Zone, MachineType: got.MachineType, Image: got.Image}
			if diff := cmp.Diff(tc.want, gotP); diff != "" {
				t.Errorf("Resolve() mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}
