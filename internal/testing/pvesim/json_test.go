package pvesim

import "encoding/json"

// jsonUnmarshal is json.Unmarshal for tests.
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
