package nocloud

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestInstanceSeed pins what every VM provider puts in a seed: the
// user-data untouched, the instance's name as instance-id and hostname, and
// the guest-agent vendor-data only when the entry installs the agent.
func TestInstanceSeed(t *testing.T) {
	userData := []byte("#cloud-config\n{}\n")
	cases := []struct {
		reason     string
		guestAgent bool
		want       Seed
	}{
		{
			reason: "without the agent there is no vendor-data, so the user-data alone shapes the guest",
			want:   Seed{UserData: userData, MetaData: []byte("instance-id: proxy-a\nlocal-hostname: proxy-a\n")},
		},
		{
			reason:     "with the agent the vendor-data installs it, merged below the user-data",
			guestAgent: true,
			want: Seed{UserData: userData, MetaData: []byte("instance-id: proxy-a\nlocal-hostname: proxy-a\n"),
				VendorData: VendorDataGuestAgent()},
		},
	}
	for _, tc := range cases {
		got := InstanceSeed("proxy-a", userData, tc.guestAgent)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: seed (-want +got):\n%s", tc.reason, diff)
		}
	}
}
