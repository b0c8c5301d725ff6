package chaos_test

import (
	"os"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) { env = e }))
}
