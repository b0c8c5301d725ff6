package manifests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The make targets a team coming from the reference system types, as `make
// help` must list them.
var referenceTargets = []string{
	"manifests", "generate", "install", "uninstall", "deploy", "undeploy",
	"proxmox-token-secret", "kvm-ssh-secret", "test-integration-proxmox",
}

// tokenSecret is the secret part of the test token: it must never appear in
// what a target prints, whether it succeeds or fails.
const tokenSecret = "0f5e3c1a-8d2b-4e6f-9a7c-1b2d3e4f5a6b"

// runMake runs `make args...` at the repository root with env added to a
// minimal environment (no kubeconfig of the machine's), and returns its
// combined output and whether it succeeded.
func runMake(t *testing.T, env []string, args ...string) (string, bool) {
	t.Helper()
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make is needed to test the Makefile: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, makeBin, append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = repoRoot(t)
	home := t.TempDir()
	// The go commands the Makefile runs would write telemetry under HOME,
	// from a process that outlives make and races the TempDir's removal.
	telemetry := filepath.Join(home, ".config", "go", "telemetry")
	if err := os.MkdirAll(telemetry, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(telemetry, "mode"), []byte("off\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		// No cluster: a kubeconfig that points nowhere.
		"KUBECONFIG=" + filepath.Join(home, "no-kubeconfig"),
	}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("make %v did not finish: %s", args, out.String())
	}
	return out.String(), err == nil
}

// writeFile writes a file under dir and returns its path.
func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeKubectl writes a kubectl stand-in that answers /readyz, records its
// arguments into log and the standard input of apply into log+".apply"
// (the two ends of a pipe run at once), and prints a Secret manifest for
// `create --dry-run`. It is what a cluster looks like to the scripts.
func fakeKubectl(t *testing.T, dir string) (bin, log string) {
	t.Helper()
	log = filepath.Join(dir, "kubectl.log")
	bin = writeFile(t, dir, "kubectl", `#!/usr/bin/env bash
echo "ARGS $*" >> "`+log+`"
case "$*" in
  *"config current-context"*) echo fake ;;
  *"get --raw=/readyz"*) echo ok ;;
  *"create secret"*) echo "kind: Secret" ;;
  *"apply -f -"*) cat > "`+log+`.apply" ;;
esac
`, 0o755)
	return bin, log
}

// TestMakeHelpListsReferenceTargets: every reference target is listed with
// a description.
func TestMakeHelpListsReferenceTargets(t *testing.T) {
	out, ok := runMake(t, nil, "help")
	if !ok {
		t.Fatalf("make help failed:\n%s", out)
	}
	for _, target := range referenceTargets {
		found := false
		for line := range strings.SplitSeq(out, "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && f[0] == target {
				found = true
			}
		}
		if !found {
			t.Errorf("make help does not list %s with a description:\n%s", target, out)
		}
	}
}

// TestMakeTargetsFailClearly: without a cluster, kubectl or the files they
// need, the targets stop at once with a message that says what is missing,
// and never print the token.
func TestMakeTargetsFailClearly(t *testing.T) {
	dir := t.TempDir()
	token := writeFile(t, dir, "token", "operator@pve!egress="+tokenSecret+"\n", 0o600)
	twoLines := writeFile(t, dir, "token-2", "operator@pve!egress="+tokenSecret+"\nsecond line\n", 0o600)
	noSecret := writeFile(t, dir, "token-bad", tokenSecret+"\n", 0o600)
	ca := writeFile(t, dir, "ca.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", 0o600)
	notCA := writeFile(t, dir, "not-ca.pem", "hello\n", 0o600)
	key := writeFile(t, dir, "id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n", 0o600)
	pub := writeFile(t, dir, "id_ed25519.pub", "ssh-ed25519 AAAAC3Nza test\n", 0o600)
	failing := writeFile(t, dir, "kubectl-down", "#!/bin/sh\necho 'The connection to the server localhost:8080 was refused' >&2\nexit 1\n", 0o755)
	missing := filepath.Join(dir, "no-such-kubectl")
	noNamespace := writeFile(t, dir, "kubectl-no-ns", "#!/bin/sh\ncase \"$*\" in *\"get namespace\"*) exit 1 ;; esac\nexit 0\n", 0o755)

	tests := []struct {
		name   string
		reason string
		target string
		env    []string
		want   string
	}{
		{"install without kubectl", "KUBECTL names the binary; a wrong one is named in the message",
			"install", []string{"KUBECTL=" + missing}, "make install: kubectl not found: KUBECTL=" + missing},
		{"install without a cluster", "no cluster answers: say so and how to get one, before applying anything",
			"install", []string{"KUBECTL=" + failing}, "make install: no cluster answers"},
		{"uninstall without a cluster", "the same check guards every cluster target",
			"uninstall", []string{"KUBECTL=" + failing}, "make uninstall: no cluster answers"},
		{"deploy without a cluster", "deploy checks the cluster before rendering",
			"deploy", []string{"KUBECTL=" + failing}, "make deploy: no cluster answers"},
		{"undeploy without a cluster", "undeploy too",
			"undeploy", []string{"KUBECTL=" + failing}, "make undeploy: no cluster answers"},
		{"token secret without variables", "PROXMOX_TOKEN_FILE is the reference variable",
			"proxmox-token-secret", nil, "make proxmox-token-secret: set PROXMOX_TOKEN_FILE"},
		{"token secret without CA variable", "PROXMOX_CA_FILE is the reference variable",
			"proxmox-token-secret", []string{"PROXMOX_TOKEN_FILE=" + token}, "make proxmox-token-secret: set PROXMOX_CA_FILE"},
		{"token file missing", "a path that does not exist is named",
			"proxmox-token-secret", []string{"PROXMOX_TOKEN_FILE=" + filepath.Join(dir, "nope"), "PROXMOX_CA_FILE=" + ca},
			"cannot read the token file PROXMOX_TOKEN_FILE=" + filepath.Join(dir, "nope")},
		{"token of two lines", "the token is one line",
			"proxmox-token-secret", []string{"PROXMOX_TOKEN_FILE=" + twoLines, "PROXMOX_CA_FILE=" + ca}, "must hold exactly one line (it has 2)"},
		{"token without its user and token id", "the token is user@realm!tokenid=secret",
			"proxmox-token-secret", []string{"PROXMOX_TOKEN_FILE=" + noSecret, "PROXMOX_CA_FILE=" + ca}, "is not of the form user@realm!tokenid=secret"},
		{"CA without a certificate", "the CA file holds BEGIN CERTIFICATE",
			"proxmox-token-secret", []string{"PROXMOX_TOKEN_FILE=" + token, "PROXMOX_CA_FILE=" + notCA}, "holds no PEM certificate"},
		{"token secret without a cluster", "the files are fine, the cluster is missing",
			"proxmox-token-secret", []string{"PROXMOX_TOKEN_FILE=" + token, "PROXMOX_CA_FILE=" + ca, "KUBECTL=" + failing},
			"make proxmox-token-secret: no cluster answers"},
		{"token secret before deploy", "the Secret goes into the operator's namespace, which make deploy creates",
			"proxmox-token-secret", []string{"PROXMOX_TOKEN_FILE=" + token, "PROXMOX_CA_FILE=" + ca, "KUBECTL=" + noNamespace},
			"namespace egress-proxies-system does not exist: run 'make deploy' first"},
		{"ssh secret without variable", "the key file is named by KVM_SSH_KEY_FILE",
			"kvm-ssh-secret", nil, "make kvm-ssh-secret: set KVM_SSH_KEY_FILE"},
		{"ssh key missing", "a path that does not exist is named",
			"kvm-ssh-secret", []string{"KVM_SSH_KEY_FILE=" + filepath.Join(dir, "nope")}, "cannot read the key file"},
		{"ssh public key", "the public half holds no PRIVATE KEY",
			"kvm-ssh-secret", []string{"KVM_SSH_KEY_FILE=" + pub}, "holds no private key"},
		{"ssh secret without a cluster", "the key is fine, the cluster is missing",
			"kvm-ssh-secret", []string{"KVM_SSH_KEY_FILE=" + key, "KUBECTL=" + failing}, "make kvm-ssh-secret: no cluster answers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, ok := runMake(t, tc.env, tc.target)
			if ok {
				t.Fatalf("make %s succeeded, want a failure (%s):\n%s", tc.target, tc.reason, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("make %s (%s): output lacks %q:\n%s", tc.target, tc.reason, tc.want, out)
			}
			if strings.Contains(out, tokenSecret) || strings.Contains(out, "b3Blbn") {
				t.Errorf("make %s printed a secret:\n%s", tc.target, out)
			}
		})
	}
}

// TestMakeSecretTargetsCreate: with good files and a cluster, the targets
// create the reference Secrets with the reference keys, and print neither
// the token nor the key.
func TestMakeSecretTargetsCreate(t *testing.T) {
	dir := t.TempDir()
	kubectl, log := fakeKubectl(t, dir)
	token := writeFile(t, dir, "token", "operator@pve!egress="+tokenSecret+"\n", 0o600)
	ca := writeFile(t, dir, "ca.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", 0o600)
	key := writeFile(t, dir, "id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n", 0o600)
	for _, tc := range []struct {
		target   string
		env      []string
		wantArgs string
	}{
		{"proxmox-token-secret", []string{"PROXMOX_TOKEN_FILE=" + token, "PROXMOX_CA_FILE=" + ca},
			"-n egress-proxies-system create secret generic proxmox-token --from-file=token=" + token + " --from-file=ca.pem=" + ca},
		{"kvm-ssh-secret", []string{"KVM_SSH_KEY_FILE=" + key},
			"-n egress-proxies-system create secret generic kvm-ssh --from-file=ssh-privatekey=" + key},
	} {
		t.Run(tc.target, func(t *testing.T) {
			for _, f := range []string{log, log + ".apply"} {
				if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
			out, ok := runMake(t, append(tc.env, "KUBECTL="+kubectl), tc.target)
			if !ok {
				t.Fatalf("make %s failed:\n%s", tc.target, out)
			}
			if strings.Contains(out, tokenSecret) || strings.Contains(out, "b3Blbn") {
				t.Errorf("make %s printed a secret:\n%s", tc.target, out)
			}
			calls, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(calls), "ARGS "+tc.wantArgs+" --dry-run=client -o yaml") {
				t.Errorf("make %s did not create the Secret as expected; kubectl calls:\n%s", tc.target, calls)
			}
			applied, err := os.ReadFile(log + ".apply")
			if err != nil || string(applied) != "kind: Secret\n" {
				t.Errorf("make %s did not apply the rendered Secret (%v); applied %q", tc.target, err, applied)
			}
		})
	}
}
