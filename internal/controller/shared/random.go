package shared

import "crypto/rand"

// alphabet of generated credentials: safe in tinyproxy's configuration, in
// YAML and in a URL without escaping.
const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// RandomCredentials returns a new basic-auth pair from crypto/rand: a
// username of "u" and 11 lower-case letters and digits, a password of 32
// characters of alphabet. A Proxy's and a gateway's credentials are made
// so.
func RandomCredentials() (username, password string) {
	username = "u" + randomFrom(alphabet[:36], 11)
	return username, randomString(32)
}

// randomString returns n characters of alphabet from crypto/rand.
func randomString(n int) string {
	return randomFrom(alphabet, n)
}

func randomFrom(chars string, n int) string {
	buf := make([]byte, n)
	// Rejection sampling keeps the distribution uniform.
	limit := 256 - 256%len(chars)
	b := make([]byte, 1)
	for i := 0; i < n; {
		// crypto/rand.Read never returns an error (Go 1.24 and later).
		_, _ = rand.Read(b)
		if int(b[0]) >= limit {
			continue
		}
		buf[i] = chars[int(b[0])%len(chars)]
		i++
	}
	return string(buf)
}
