package pvesim

import (
	_ "embed" // the trimmed API schema is embedded data.
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// schemaJSON is derived from the official PVE 9.1 API schema
// (pve-api-schema-subset.json): for each served "path METHOD", the parameter
// names with type, format, enum, pattern, bounds and optionality, and the
// permission check. Property-string formats are reduced to
// "property-string" (checked by the handlers where it matters).
//
//go:embed schema.json
var schemaJSON []byte

// paramSchema is one parameter of an endpoint.
type paramSchema struct {
	Type      string          `json:"type"`
	Format    string          `json:"format,omitempty"`
	Enum      []string        `json:"enum,omitempty"`
	Pattern   string          `json:"pattern,omitempty"`
	Minimum   json.RawMessage `json:"minimum,omitempty"`
	Maximum   json.RawMessage `json:"maximum,omitempty"`
	MaxLength json.RawMessage `json:"maxLength,omitempty"`
	Optional  bool            `json:"optional,omitempty"`
}

// endpointSchema is the parameters and permission check of one endpoint.
type endpointSchema struct {
	Params map[string]paramSchema `json:"params"`
	Check  json.RawMessage        `json:"check,omitempty"`
}

// loadSchema parses the embedded schema.
func loadSchema() (map[string]*endpointSchema, error) {
	var m map[string]*endpointSchema
	if err := json.Unmarshal(schemaJSON, &m); err != nil {
		return nil, fmt.Errorf("parse embedded schema: %w", err)
	}
	return m, nil
}

var (
	reNodeName  = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$`)
	reStorageID = regexp.MustCompile(`^[a-z][a-z0-9\-_.]*[a-z0-9]$`)
	reDNSName   = regexp.MustCompile(`^([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?\.)*[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$`)
	reTag       = regexp.MustCompile(`^(?i)[a-z0-9_][a-z0-9_\-+.]*$`)
	reInteger   = regexp.MustCompile(`^[+-]?\d+$`)
	reNumber    = regexp.MustCompile(`^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$`)
	reIndexed   = regexp.MustCompile(`^([a-z]+)(\d+)$`)
	reConfigID  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_\-]+$`)
)

// lookupParam finds the schema of a parameter, mapping net0 to net[n].
func (e *endpointSchema) lookupParam(name string) (paramSchema, bool) {
	if p, ok := e.Params[name]; ok {
		return p, true
	}
	if m := reIndexed.FindStringSubmatch(name); m != nil {
		if p, ok := e.Params[m[1]+"[n]"]; ok {
			return p, true
		}
	}
	return paramSchema{}, false
}

// validate checks params against the schema the way PVE's JSONSchema does
// and returns the field errors (empty when valid). Texts are Proxmox's.
func (e *endpointSchema) validate(params map[string]string) map[string]string {
	errs := map[string]string{}
	for name, v := range params {
		p, ok := e.lookupParam(name)
		if !ok {
			errs[name] = "property is not defined in schema and the schema does not allow additional properties"
			continue
		}
		if msg := p.check(v); msg != "" {
			errs[name] = msg
		}
	}
	for name, p := range e.Params {
		if p.Optional || strings.HasSuffix(name, "[n]") {
			continue
		}
		if _, ok := params[name]; !ok {
			errs[name] = "property is missing and it is not optional"
		}
	}
	return errs
}

// rawNumber reads a schema bound written as a number or a string.
func rawNumber(r json.RawMessage) (float64, bool) {
	if len(r) == 0 {
		return 0, false
	}
	s := strings.Trim(string(r), `"`)
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// check validates one value and returns the field error text or "".
func (p paramSchema) check(v string) string {
	switch p.Type {
	case "integer", "number":
		re := reInteger
		if p.Type == "number" {
			re = reNumber
		}
		if !re.MatchString(v) {
			return fmt.Sprintf("type check ('%s') failed - got '%s'", p.Type, v)
		}
		f, _ := strconv.ParseFloat(v, 64)
		if lo, ok := rawNumber(p.Minimum); ok && f < lo {
			return "value must have a minimum value of " + strings.Trim(string(p.Minimum), `"`)
		}
		if hi, ok := rawNumber(p.Maximum); ok && f > hi {
			return "value must have a maximum value of " + strings.Trim(string(p.Maximum), `"`)
		}
	case "boolean":
		if _, ok := parseBool(v); !ok {
			return fmt.Sprintf("type check ('boolean') failed - got '%s'", v)
		}
	}
	if len(p.Enum) > 0 && !slices.Contains(p.Enum, v) {
		return fmt.Sprintf("value '%s' does not have a value in the enumeration '%s'", v, strings.Join(p.Enum, ", "))
	}
	if n, ok := rawNumber(p.MaxLength); ok && float64(len(v)) > n {
		return fmt.Sprintf("value may only be %d characters long", int(n))
	}
	if p.Pattern != "" {
		re, err := regexp.Compile(`^(?:` + p.Pattern + `)$`)
		if err == nil && !re.MatchString(v) {
			return "value does not match the regex pattern"
		}
	}
	if msg := checkFormat(p.Format, v); msg != "" {
		return "invalid format - " + msg
	}
	return ""
}

// checkFormat checks the PVE formats the served endpoints use.
func checkFormat(format, v string) string {
	switch format {
	case "pve-node":
		if !reNodeName.MatchString(v) {
			return "value does not look like a valid node name"
		}
	case "pve-storage-id":
		if !reStorageID.MatchString(v) {
			return fmt.Sprintf("storage ID '%s' contains illegal characters", v)
		}
	case "dns-name":
		if !reDNSName.MatchString(v) {
			return "value does not look like a valid DNS name"
		}
	case "pve-configid":
		if !reConfigID.MatchString(v) {
			return fmt.Sprintf("invalid configuration ID '%s'", v)
		}
	case "pve-tag-list":
		// F9: ';' separates tags; a space or '!' is an invalid character.
		for _, t := range strings.Split(v, ";") {
			if t != "" && !reTag.MatchString(t) {
				return "invalid characters in tag"
			}
		}
	}
	return ""
}

// parseBool reads a PVE boolean (1/0, yes/no, on/off, true/false).
func parseBool(v string) (value, ok bool) {
	switch strings.ToLower(v) {
	case "1", "yes", "on", "true":
		return true, true
	case "0", "no", "off", "false":
		return false, true
	}
	return false, false
}

// evalCheck evaluates a schema permission check for a principal. It returns
// nil when allowed, otherwise the 403 to answer.
func evalCheck(raw json.RawMessage, p *principal, params map[string]string) *apiError {
	if len(raw) == 0 {
		return nil
	}
	var list []any
	if err := json.Unmarshal(raw, &list); err != nil || len(list) == 0 {
		return nil
	}
	return evalCheckList(list, p, params)
}

func evalCheckList(list []any, p *principal, params map[string]string) *apiError {
	op, _ := list[0].(string)
	switch op {
	case "and":
		for _, c := range list[1:] {
			sub, _ := c.([]any)
			if e := evalCheckList(sub, p, params); e != nil {
				return e
			}
		}
		return nil
	case "or":
		var last *apiError
		for _, c := range list[1:] {
			sub, _ := c.([]any)
			e := evalCheckList(sub, p, params)
			if e == nil {
				return nil
			}
			last = e
		}
		return last
	case "perm":
		if len(list) < 3 {
			return nil
		}
		tmpl, _ := list[1].(string)
		rawPrivs, _ := list[2].([]any)
		privs := make([]string, 0, len(rawPrivs))
		for _, x := range rawPrivs {
			if s, ok := x.(string); ok {
				privs = append(privs, s)
			}
		}
		anyOf := false
		for i := 3; i+1 < len(list); i += 2 {
			key, _ := list[i].(string)
			switch key {
			case "any":
				anyOf = true
			case "require_param":
				name, _ := list[i+1].(string)
				if params[name] == "" {
					return errPerm(tmpl, strings.Join(privs, "|"))
				}
			}
		}
		path := substitute(tmpl, params)
		if anyOf {
			for _, pr := range privs {
				if p.has(path, pr) {
					return nil
				}
			}
			return errPerm(path, strings.Join(privs, "|"))
		}
		for _, pr := range privs {
			if !p.has(path, pr) {
				return errPerm(path, pr)
			}
		}
		return nil
	}
	return nil
}

// substitute replaces {name} in an ACL path template with parameter values.
func substitute(tmpl string, params map[string]string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		b.WriteString(tmpl[:i])
		b.WriteString(params[tmpl[i+1:i+j]])
		tmpl = tmpl[i+j+1:]
	}
}
