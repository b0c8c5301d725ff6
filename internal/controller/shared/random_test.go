package shared

import (
	"strings"
	"testing"
)

func TestRandomFrom(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		chars  string
		n      int
	}{
		{name: "password", reason: "generated passwords are 32 characters of the full alphabet", chars: alphabet, n: 32},
		{name: "username", reason: "usernames use the lower-case and digit part of the alphabet only", chars: alphabet[:36], n: 11},
		{name: "empty", reason: "n=0 must return at once with an empty string, not loop", chars: alphabet, n: 0},
		{name: "tiny alphabet, long string", reason: "every character must be reachable (no off-by-one in the mapping)", chars: "xyz", n: 600},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := randomFrom(tc.chars, tc.n)
			if len(got) != tc.n {
				t.Errorf("len(randomFrom(%q, %d)) = %d, want %d\nwhy this matters: %s", tc.chars, tc.n, len(got), tc.n, tc.reason)
			}
			if i := strings.IndexFunc(got, func(r rune) bool { return !strings.ContainsRune(tc.chars, r) }); i >= 0 {
				t.Errorf("randomFrom(%q, %d) = %q holds %q, outside the alphabet\nwhy this matters: %s", tc.chars, tc.n, got, got[i], tc.reason)
			}
			// With 600 draws from 3 characters, a character is missing with a
			// probability of about 3*(2/3)^600, i.e. never.
			if tc.n >= 200*len(tc.chars) {
				for _, c := range tc.chars {
					if !strings.ContainsRune(got, c) {
						t.Errorf("randomFrom(%q, %d) never produced %q\nwhy this matters: %s", tc.chars, tc.n, c, tc.reason)
					}
				}
			}
		})
	}
}

// TestRandomFromDiffers: two generated passwords are equal with a
// probability of 62^-32; equality means the source is not random.
func TestRandomFromDiffers(t *testing.T) {
	if a, b := randomFrom(alphabet, 32), randomFrom(alphabet, 32); a == b {
		t.Errorf("two calls of randomFrom returned the same string %q: every Proxy would get the same password", a)
	}
}
