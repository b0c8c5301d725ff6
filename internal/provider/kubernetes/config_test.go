package kubernetes_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/kubernetes"
)

func kubernetesRegistry() config.Registry {
	return provider.Types{kubernetes.Type}.Registry()
}

const kubernetesEntry = `
providers:
  - name: cluster
    type: kubernetes
    zones: [zone-a, zone-b]
    machineTypes: {tiny: {cores: 1, memoryMiB: 64}}
    images: [default]
    kubernetes:
`

func TestKubernetesBlock(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		block  string
		want   []string // fragments of the error; none means valid
	}{
		{name: "minimal", reason: "a namespace is all it takes", block: "      namespace: egress-proxies\n"},
		{
			name: "everything", reason: "every field in use at once must validate",
			block: "      namespace: egress-proxies\n      image: registry.example/op:1\n      images: {default: registry.example/op:2}\n" +
				"      zones: {zone-a: {nodeSelector: {rack: a}}}\n      resources: {tiny: {requests: {cpu: 50m}}}\n" +
				"      hostNetwork: true\n      serviceAccountName: egress-proxy\n      imagePullSecrets: [regcred]\n",
		},
		{name: "no namespace", reason: "pods need a home", block: "      hostNetwork: true\n",
			want: []string{"providers[cluster].kubernetes.namespace: Required value"}},
		{name: "bad namespace", reason: "a namespace is a DNS label", block: "      namespace: Egress_Proxies\n",
			want: []string{"providers[cluster].kubernetes.namespace: Invalid value"}},
		{name: "unknown zone", reason: "a selector for a zone proxies cannot ask for is a typo",
			block: "      namespace: e\n      zones: {zone-c: {nodeSelector: {rack: c}}}\n",
			want:  []string{"providers[cluster].kubernetes.zones[zone-c]: Unsupported value"}},
		{name: "empty selector", reason: "an empty selector would match every node, silently",
			block: "      namespace: e\n      zones: {zone-a: {nodeSelector: {}}}\n",
			want:  []string{"providers[cluster].kubernetes.zones[zone-a].nodeSelector: Required value"}},
		{name: "invalid label", reason: "the API server would refuse the pod later",
			block: "      namespace: e\n      zones: {zone-a: {nodeSelector: {\"bad key!\": a}}}\n",
			want:  []string{"zones[zone-a].nodeSelector"}},
		{name: "unknown machine type", reason: "resources for a size nobody can ask for is a typo",
			block: "      namespace: e\n      resources: {huge: {requests: {cpu: 8}}}\n",
			want:  []string{"providers[cluster].kubernetes.resources[huge]: Unsupported value"}},
		{name: "unknown image", reason: "the same for images",
			block: "      namespace: e\n      images: {ubuntu: registry.example/u:1}\n",
			want:  []string{"providers[cluster].kubernetes.images[ubuntu]: Unsupported value"}},
		{name: "unknown field", reason: "strict decoding reaches into the block",
			block: "      namespace: e\n      hostnetwork: true\n",
			want:  []string{"providers[cluster].kubernetes", `unknown field "hostnetwork"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(kubernetesEntry+tc.block), kubernetesRegistry())
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("%s: %v", tc.reason, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%s: accepted", tc.reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q lacks %q", tc.reason, err, w)
				}
			}
		})
	}
}

func TestKubernetesBlockDefaults(t *testing.T) {
	cfg, err := config.Parse([]byte(kubernetesEntry+"      namespace: e\n      image: own\n      zones: {zone-a: {nodeSelector: {rack: a}}}\n"), kubernetesRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b, ok := cfg.Providers[0].Block.(*kubernetes.Block)
	if !ok {
		t.Fatalf("block is %T", cfg.Providers[0].Block)
	}
	if diff := cmp.Diff(map[string]string{"topology.kubernetes.io/zone": "zone-b"}, b.NodeSelector("zone-b")); diff != "" {
		t.Errorf("a zone without a selector matches the well-known zone label (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"rack": "a"}, b.NodeSelector("zone-a")); diff != "" {
		t.Errorf("configured selector (-want +got):\n%s", diff)
	}
	r := b.ResourcesFor(cfg.Providers[0].MachineTypes["tiny"])
	if r.Limits.Cpu().String() != "1" || r.Limits.Memory().String() != "64Mi" || r.Requests.Memory().String() != "64Mi" {
		t.Errorf("resources from the catalogue = %+v, want 1 CPU and 64Mi requested and limited", r)
	}
	if b.ImageFor("default") != "own" {
		t.Errorf("ImageFor = %q, want the block's image", b.ImageFor("default"))
	}
}
