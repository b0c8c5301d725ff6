package proxmox

import (
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
)

// Tag is the tag of every managed VM (F9: lower case, valid everywhere).
const Tag = "proxy_operator"

// Lines of the mark in the VM description (F10: stored verbatim). The mark
// is written at clone time and holds the creation time because meta is
// copied from the template (F11). The signature covers every other line,
// the entry's name and the VM's VMID (ownership.Mark), so the lines cannot
// be edited, nor copied to another VM.
const (
	markHeader       = "Managed by egress-proxies-operator; do not edit the lines below."
	markInstallation = "egress-proxies-operator/installation: "
	markOwnerUID     = "egress-proxies-operator/owner-uid: "
	markName         = "egress-proxies-operator/name: "
	markCreatedAt    = "egress-proxies-operator/created-at: "
	markOwner        = "egress-proxies-operator/owner: "
	markSignature    = "egress-proxies-operator/signature: "
)

// mark is what the description says about a VM (ownership.Stamp: the place
// it is signed for is the VM's VMID, vmidPlace).
type mark = ownership.Stamp

// description is the mark as the lines of a VM's description.
func description(m mark) string {
	return markHeader + "\n" +
		markInstallation + markValue(m.Installation) + "\n" +
		markOwnerUID + markValue(m.OwnerUID) + "\n" +
		markName + markValue(m.Name) + "\n" +
		markCreatedAt + m.CreatedAt.UTC().Format(time.RFC3339) + "\n" +
		markOwner + markValue(m.Owner) + "\n" +
		markSignature + markValue(m.Signature) + "\n"
}

// newMark is the signed mark of a VM the provider clones to vmid: its
// values as they will read back (markValue), signed.
func newMark(id *ownership.Identity, entry string, vmid int, ownerUID, name, owner string, created time.Time) mark {
	return id.NewStamp(entry, vmidPlace(vmid), markValue(ownerUID), markValue(name), markValue(owner), created)
}

// vmidPlace is the place a VM's mark is signed for: its VMID, so that the
// lines copied to another VM do not verify.
func vmidPlace(vmid int) string { return "vmid=" + strconv.Itoa(vmid) }

// markValue is a value as one line of the mark: line breaks become spaces,
// so that no value (a Proxy's name is chosen by its author) can add a line
// of its own, such as another owner-uid, and the ends are trimmed as
// parseMark trims them.
func markValue(s string) string {
	return strings.TrimSpace(strings.NewReplacer("\r", " ", "\n", " ").Replace(s))
}

// parseMark reads a mark from a description; ok is false without one. It
// does not verify the signature: verify does, knowing the VM.
func parseMark(desc string) (mark, bool) {
	var m mark
	for line := range strings.SplitSeq(desc, "\n") {
		line = strings.TrimSpace(line)
		switch {
		// Values go through markValue, as they are written (a lone
		// carriage return inside a line included), so that what is read is
		// what would be written back.
		case strings.HasPrefix(line, markInstallation):
			m.Installation = markValue(strings.TrimPrefix(line, markInstallation))
		case strings.HasPrefix(line, markSignature):
			m.Signature = markValue(strings.TrimPrefix(line, markSignature))
		case strings.HasPrefix(line, markOwnerUID):
			m.OwnerUID = markValue(strings.TrimPrefix(line, markOwnerUID))
		case strings.HasPrefix(line, markName):
			m.Name = markValue(strings.TrimPrefix(line, markName))
		case strings.HasPrefix(line, markOwner):
			m.Owner = markValue(strings.TrimPrefix(line, markOwner))
		case strings.HasPrefix(line, markCreatedAt):
			if t, err := time.Parse(time.RFC3339, strings.TrimPrefix(line, markCreatedAt)); err == nil {
				m.CreatedAt = t
			}
		}
	}
	return m, m.OwnerUID != "" && m.Name != ""
}

// hasTag reports whether a ;-separated tag list holds our tag (F9).
func hasTag(tags string) bool {
	for t := range strings.SplitSeq(tags, ";") {
		if strings.EqualFold(strings.TrimSpace(t), Tag) {
			return true
		}
	}
	return false
}
