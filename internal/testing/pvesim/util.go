package pvesim

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
)

// errEOF is the end of an empty JSON body.
var errEOF = io.EOF

// jsonDecoder decodes numbers as json.Number so that VMIDs stay exact.
func jsonDecoder(r io.Reader) *json.Decoder {
	d := json.NewDecoder(r)
	d.UseNumber()
	return d
}

// jsonParamString turns a JSON body value into the string form a form
// parameter would have.
func jsonParamString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		if x {
			return "1"
		}
		return "0"
	case nil:
		return ""
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// nowHTTPDate is the current time in HTTP date format.
func nowHTTPDate() string {
	return time.Now().UTC().Format(http.TimeFormat)
}

// itoa is strconv.Itoa, short for the many VMID formats.
func itoa(i int) string { return strconv.Itoa(i) }
