package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
)

// quotedTypes are the registered provider types as the error lists them.
func quotedTypes() []string {
	var out []string
	for _, t := range setup.Types.Registry().Types() {
		out = append(out, `"`+t+`"`)
	}
	return out
}

// The operator must refuse to start on a bad providers configuration, with
// a message that names the entry and the field, before it touches anything.
func TestRunRefusesAnInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		yaml   string
		want   []string
	}{
		{
			name:   "unknown type",
			reason: "a type this binary does not know cannot be served",
			yaml:   "providers:\n- name: lab\n  type: nosuchtype\n  zones: [a]\n  machineTypes: {s: {cores: 1, memoryMiB: 512}}\n  images: [debian-12]\n",
			want:   append([]string{`providers[lab].type: Unsupported value: "nosuchtype": supported values: `}, quotedTypes()...),
		},
		{
			name:   "unknown field",
			reason: "a typo must not be ignored silently",
			yaml:   "providers:\n- name: lab\n  zonez: [a]\n",
			want:   []string{"providers[lab].zonez", "unknown field"},
		},
		{
			name:   "empty",
			reason: "an operator with nothing to serve is a mistake",
			yaml:   "providers: []\n",
			want:   []string{"providers: Required value"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "providers.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			err := run(context.Background(), flags{providersConfig: path})
			if err == nil {
				t.Fatalf("%s: run accepted the config", tc.reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q lacks %q", tc.reason, err, w)
				}
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestRunReportsAMissingConfigFile(t *testing.T) {
	err := run(context.Background(), flags{providersConfig: filepath.Join(t.TempDir(), "absent.yaml")})
	if err == nil || !strings.Contains(err.Error(), "reading providers config") {
		t.Fatalf("run = %v, want an error about reading the file", err)
	}
}
