package proxmox

import (
	"strings"
	"time"
)

// Tag is the tag of every managed VM (F9: lower case, valid everywhere).
const Tag = "proxy_operator"

// Lines of the mark in the VM description (F10: stored verbatim). The mark
// is written at clone time and holds the creation time because meta is
// copied from the template (F11).
const (
	markHeader    = "Managed by egress-proxies-operator; do not edit the lines below."
	markOwnerUID  = "egress-proxies-operator/owner-uid: "
	markName      = "egress-proxies-operator/name: "
	markCreatedAt = "egress-proxies-operator/created-at: "
	markOwner     = "egress-proxies-operator/owner: "
)

// mark is what the description says about a VM.
type mark struct {
	OwnerUID  string
	Name      string
	Owner     string
	CreatedAt time.Time
}

func (m mark) description() string {
	return markHeader + "\n" +
		markOwnerUID + markValue(m.OwnerUID) + "\n" +
		markName + markValue(m.Name) + "\n" +
		markCreatedAt + m.CreatedAt.UTC().Format(time.RFC3339) + "\n" +
		markOwner + markValue(m.Owner) + "\n"
}

// markValue is a value as one line of the mark: line breaks become spaces,
// so that no value (a Proxy's name is chosen by its author) can add a line
// of its own, such as another owner-uid, and the ends are trimmed as
// parseMark trims them.
func markValue(s string) string {
	return strings.TrimSpace(strings.NewReplacer("\r", " ", "\n", " ").Replace(s))
}

// parseMark reads a mark from a description; ok is false without one.
func parseMark(desc string) (mark, bool) {
	var m mark
	for line := range strings.SplitSeq(desc, "\n") {
		line = strings.TrimSpace(line)
		switch {
		// Values go through markValue, as they are written (a lone
		// carriage return inside a line included), so that what is read is
		// what would be written back.
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
