package proxypool

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

func TestParseRotateAnnotation(t *testing.T) {
	gone := metav1.NewTime(time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC))
	proxies := []crawlv1alpha1.Proxy{
		{ObjectMeta: metav1.ObjectMeta{Name: "crawl-aaaaa"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "crawl-bbbbb"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "crawl-ccccc", DeletionTimestamp: &gone}},
	}
	tests := []struct {
		name    string
		reason  string
		value   *string
		want    map[string]bool
		wantErr string
	}{
		{name: "absent", reason: "no annotation, nothing to do", value: nil, want: nil},
		{name: "all", reason: "every member not already going", value: ptrTo(" all "), want: map[string]bool{"crawl-aaaaa": true, "crawl-bbbbb": true}},
		{name: "two names", reason: "a comma-separated list, spaces allowed", value: ptrTo("crawl-aaaaa, crawl-bbbbb"),
			want: map[string]bool{"crawl-aaaaa": true, "crawl-bbbbb": true}},
		{name: "empty", reason: "an empty value is a mistake, not a no-op", value: ptrTo(""), wantErr: "is empty"},
		{name: "garbage", reason: "a value that is no name says so", value: ptrTo("please rotate!"), wantErr: `"please rotate!" is not a member name`},
		{name: "unknown member", reason: "a typo must not rotate the others and must list the members",
			value: ptrTo("crawl-aaaaa,crawl-zzzzz"), wantErr: "names crawl-zzzzz, which is not a member of this pool (members: crawl-aaaaa, crawl-bbbbb)"},
		{name: "member being deleted", reason: "it is going anyway", value: ptrTo("crawl-ccccc"), wantErr: "crawl-ccccc, which is not a member"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{}
			if tc.value != nil {
				ann[crawlv1alpha1.AnnotationRotate] = *tc.value
			}
			got, err := parseRotateAnnotation(ann, proxies)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q\nwhy this matters: %s", err, tc.wantErr, tc.reason)
				}
				if got != nil {
					t.Errorf("targets %v with an error: nothing may be rotated", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("targets (-want +got):\n%s\nwhy this matters: %s", diff, tc.reason)
			}
		})
	}
}

func ptrTo(s string) *string { return &s }
