package nocloud

import (
	"encoding/json"
	"regexp"
	"strings"
)

// plainScalarRE matches the values MetaData writes unquoted: they start with
// a letter, so YAML cannot read them as a number, and hold no character YAML
// gives a meaning to.
var plainScalarRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]*$`)

// yamlKeywords are plain scalars YAML 1.1 (which cloud-init's PyYAML
// implements) reads as booleans or null rather than strings.
var yamlKeywords = map[string]bool{
	"y": true, "n": true, "yes": true, "no": true, "on": true, "off": true,
	"true": true, "false": true, "null": true,
}

// yamlString renders s as a YAML scalar that reads back as the string s.
func yamlString(s string) string {
	if plainScalarRE.MatchString(s) && !yamlKeywords[strings.ToLower(s)] {
		return s
	}
	// A JSON string is a YAML double-quoted scalar. json.Marshal cannot
	// fail on a string.
	b, _ := json.Marshal(s)
	return string(b)
}

// MetaData returns the NoCloud meta-data for an instance: its instance-id
// (cloud-init runs its per-instance modules again when it changes) and its
// local-hostname. Values are quoted when YAML would otherwise misread them.
func MetaData(instanceID, hostname string) []byte {
	return []byte("instance-id: " + yamlString(instanceID) + "\nlocal-hostname: " + yamlString(hostname) + "\n")
}

// vendorDataGuestAgent installs and starts the QEMU guest agent, through
// which Proxmox reads the VM's IP addresses.
//
// cloud-init merges vendor-data below user-data: without merge_how, the
// user-data's own packages and runcmd lists would replace these (the
// default merge keeps the higher-priority value). With it, the lists are
// appended to the user-data's.
const vendorDataGuestAgent = `#cloud-config
merge_how:
  - name: list
    settings: [append]
  - name: dict
    settings: [no_replace, recurse_list]
packages:
  - qemu-guest-agent
runcmd:
  - [systemctl, enable, --now, qemu-guest-agent]
`

// VendorDataGuestAgent returns a #cloud-config vendor-data that installs
// the qemu-guest-agent package and enables and starts its service, in
// addition to whatever packages and commands the user-data lists.
func VendorDataGuestAgent() []byte {
	return []byte(vendorDataGuestAgent)
}

// InstanceSeed is the seed every VM provider gives an instance: the rendered
// user-data, meta-data naming the instance (its name is both instance-id and
// hostname), and the guest-agent vendor-data when the entry installs the
// agent. One function, so that proxmox and libvirt guests boot the same way.
func InstanceSeed(name string, userData []byte, guestAgent bool) Seed {
	seed := Seed{UserData: userData, MetaData: MetaData(name, name)}
	if guestAgent {
		seed.VendorData = VendorDataGuestAgent()
	}
	return seed
}
