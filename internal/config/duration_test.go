package config

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDurationOr(t *testing.T) {
	cases := []struct {
		reason string
		d      *metav1.Duration
		want   time.Duration
	}{
		{"an absent key takes the default", nil, time.Minute},
		{"an explicit zero takes the default, so a budget is never zero", &metav1.Duration{}, time.Minute},
		{"a set value wins", &metav1.Duration{Duration: 5 * time.Second}, 5 * time.Second},
	}
	for _, tc := range cases {
		if got := DurationOr(tc.d, time.Minute); got != tc.want {
			t.Errorf("%s: DurationOr = %s, want %s", tc.reason, got, tc.want)
		}
	}
}
