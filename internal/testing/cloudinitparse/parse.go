package cloudinitparse

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	mimemultipart "mime/multipart"
	"net/mail"
	"net/netip"
	"path"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/egress-proxies-operator/internal/cloudinit"
)

// Settings is what tinyproxy runs with on a guest that booted with a given
// user-data: the values of its Port, BasicAuth and Allow directives.
type Settings struct {
	// Port is the TCP port tinyproxy listens on.
	Port int32
	// Username and Password are the BasicAuth credentials; both empty when
	// there is no BasicAuth line.
	Username, Password string
	// Allow lists the sources tinyproxy accepts, masked to their network
	// (an address alone is a /32 or /128). Empty means any source.
	Allow []netip.Prefix
}

// ErrNoTinyproxyConfig is wrapped by the error ParseTinyproxy returns when
// the user-data writes no tinyproxy configuration.
var ErrNoTinyproxyConfig = errors.New("user-data writes no " + cloudinit.ConfigPath)

// maxUserData bounds the user-data ParseTinyproxy decompresses and decodes;
// cloud-init's datasources carry far less.
const maxUserData = 16 << 20

// ParseTinyproxy plays cloud-init and tinyproxy on a guest: it finds the
// write_files entries for cloudinit.ConfigPath in userData (a #cloud-config, or the
// text/cloud-config parts of a MIME multipart message, gzip-compressed or
// not), applies them as cloud-init would, and returns the settings of the
// resulting tinyproxy configuration. A wrong rendering shows up as a wrong
// setting or an error.
//
// It models cloud-init as follows: the cloud-config parts are merged in
// order, and a part's write_files list is appended to (or prepended to) the
// previous parts' only when its merge type (the Merge-Type header, or
// merge_how/merge_type in the part) appends (prepends) lists; it is dropped
// under dict(no_replace) without recurse_list; otherwise it replaces them,
// as cloud-init's default merge (dict(replace)+list()+str()) does. (With
// dict(recurse_list) and list() cloud-init replaces the list element by
// element; this model replaces it whole.) Entries are written in
// list order, those without defer (cloud-init's init stage) before those
// with it (the final stage); "append: true" appends, otherwise the last
// write wins. Content encodings b64, gzip and gz+b64 are decoded.
//
// Errors never quote the configuration's content, so never the password.
func ParseTinyproxy(userData []byte) (Settings, error) {
	configs, err := cloudConfigs(userData)
	if err != nil {
		return Settings{}, err
	}
	var files []writeFileEntry
	for i, c := range configs {
		entries, merge, err := parseWriteFiles(c)
		if err != nil {
			return Settings{}, fmt.Errorf("cloud-config part %d: %w", i+1, err)
		}
		switch {
		case merge == appendLists:
			files = append(files, entries...)
		case merge == prependLists:
			files = append(entries, files...)
		case merge == keepLists && files != nil:
		case entries != nil:
			files = entries
		}
	}
	conf, found, err := applyWrites(files)
	if err != nil {
		return Settings{}, err
	}
	if !found {
		if len(configs) == 0 {
			return Settings{}, fmt.Errorf("%w: it holds no cloud-config (a #cloud-config document or a text/cloud-config part)", ErrNoTinyproxyConfig)
		}
		return Settings{}, fmt.Errorf("%w: no write_files entry of its %d cloud-config part(s) has that path", ErrNoTinyproxyConfig, len(configs))
	}
	return parseTinyproxyConf(conf)
}

// cloudConfigPart is one cloud-config document and the merge type its MIME
// part header gave, if any.
type cloudConfigPart struct {
	body      []byte
	mergeType string
}

// cloudConfigs returns the cloud-config documents of userData, in order.
func cloudConfigs(userData []byte) ([]cloudConfigPart, error) {
	data, err := gunzip(userData)
	if err != nil {
		return nil, err
	}
	// cloud-init reads user-data as MIME when a MIME-Version header is in
	// its first 4 KiB, and otherwise as a single part typed by its first
	// line.
	if !bytes.Contains(bytes.ToLower(data[:min(len(data), 4096)]), []byte("mime-version:")) {
		if isCloudConfig(data) {
			return []cloudConfigPart{{body: data}}, nil
		}
		return nil, nil
	}
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		// The error quotes the malformed line, which may hold the
		// password: drop it.
		return nil, errors.New("user-data has a MIME-Version header but its MIME header is malformed")
	}
	var out []cloudConfigPart
	if err := collectParts(mimeHeader(msg.Header), msg.Body, 0, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// mimeHeader is the header of a message or of a part.
type mimeHeader interface {
	Get(key string) string
}

// maxMIMEDepth bounds nested multipart messages.
const maxMIMEDepth = 4

// collectParts appends the cloud-config parts of a MIME entity to out,
// descending into nested multiparts.
func collectParts(h mimeHeader, body io.Reader, depth int, out *[]cloudConfigPart) error {
	ctype := h.Get("Content-Type")
	mediaType, params, err := mime.ParseMediaType(ctype)
	if ctype == "" {
		mediaType, err = "text/plain", nil
	}
	if err != nil {
		return fmt.Errorf("parsing a MIME Content-Type: %w", err)
	}
	content, err := io.ReadAll(io.LimitReader(body, maxUserData+1))
	if err != nil {
		return fmt.Errorf("reading a MIME part: %w", err)
	}
	if len(content) > maxUserData {
		return fmt.Errorf("a MIME part is larger than %d bytes", maxUserData)
	}
	if strings.HasPrefix(mediaType, "multipart/") {
		if depth >= maxMIMEDepth {
			return fmt.Errorf("MIME parts are nested more than %d deep", maxMIMEDepth)
		}
		mr := mimemultipart.NewReader(bytes.NewReader(content), params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				// The error quotes the malformed header line, which may
				// hold the password: drop it.
				return errors.New("a part of the multipart user-data has a malformed MIME header")
			}
			if err := collectParts(part.Header, part, depth+1, out); err != nil {
				return err
			}
		}
	}
	if strings.EqualFold(h.Get("Content-Transfer-Encoding"), "base64") {
		decoded, err := base64.StdEncoding.DecodeString(string(bytes.Join(bytes.Fields(content), nil)))
		if err != nil {
			return fmt.Errorf("decoding a base64 MIME part: %w", err)
		}
		content = decoded
	}
	if content, err = gunzip(content); err != nil {
		return err
	}
	// cloud-init types a part by its Content-Type, and a part of a generic
	// type by its first line.
	switch mediaType {
	case "text/cloud-config":
	case "text/plain", "text/x-not-multipart", "application/octet-stream":
		if !isCloudConfig(content) {
			return nil
		}
	default:
		return nil
	}
	*out = append(*out, cloudConfigPart{body: content, mergeType: h.Get("Merge-Type") + h.Get("X-Merge-Type")})
	return nil
}

// isCloudConfig reports whether a document's first line makes it a
// cloud-config.
func isCloudConfig(b []byte) bool {
	return bytes.HasPrefix(b, []byte("#cloud-config"))
}

// gunzip decompresses gzip data (cloud-init accepts compressed user-data)
// and returns other data as is.
func gunzip(b []byte) ([]byte, error) {
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		return b, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decompressing gzip user-data: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxUserData+1))
	if err != nil {
		return nil, fmt.Errorf("decompressing gzip user-data: %w", err)
	}
	if len(out) > maxUserData {
		return nil, fmt.Errorf("gzip user-data decompresses to more than %d bytes", maxUserData)
	}
	return out, nil
}

// listMerge is how a part's lists merge into the previous parts'.
type listMerge int

const (
	replaceLists listMerge = iota
	appendLists
	prependLists
	// keepLists keeps the previous parts' list: dict(no_replace) without
	// recursing into lists.
	keepLists
)

// writeFileEntry is the subset of a write_files entry ParseTinyproxy uses.
type writeFileEntry struct {
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
	Append   bool   `json:"append"`
	Defer    bool   `json:"defer"`
}

// partDoc is the subset of a cloud-config ParseTinyproxy reads.
type partDoc struct {
	WriteFiles []writeFileEntry `json:"write_files"`
	// MergeHow and MergeType are cloud-init's in-document merge settings:
	// a string ("list(append)+dict(recurse_list)") or a list of
	// {name, settings}.
	MergeHow  any `json:"merge_how"`
	MergeType any `json:"merge_type"`
}

// lineRE finds the line number in a YAML error.
var lineRE = regexp.MustCompile(`line (\d+)`)

// parseWriteFiles returns the write_files entries of a cloud-config (nil
// when it has no write_files key, which leaves the previous parts' list
// alone whatever the merge) and how its lists merge.
func parseWriteFiles(p cloudConfigPart) ([]writeFileEntry, listMerge, error) {
	var doc partDoc
	if err := yaml.Unmarshal(p.body, &doc); err != nil {
		// YAML errors can quote the document, and the document holds the
		// password: keep only the line number, and do not wrap the error.
		where := ""
		if m := lineRE.FindStringSubmatch(err.Error()); m != nil {
			where = " (near line " + m[1] + ")"
		}
		return nil, replaceLists, fmt.Errorf("not valid cloud-config YAML%s", where)
	}
	spec := p.mergeType + " " + mergeSpec(doc.MergeHow) + " " + mergeSpec(doc.MergeType)
	merge := replaceLists
	switch {
	case strings.Contains(spec, "list(append"):
		merge = appendLists
	case strings.Contains(spec, "list(prepend"):
		merge = prependLists
	case strings.Contains(spec, "no_replace") && !strings.Contains(spec, "recurse_list") && !strings.Contains(spec, "recurse_array"):
		merge = keepLists
	}
	return doc.WriteFiles, merge, nil
}

// mergeSpec renders an in-document merge setting in the header syntax:
// "list(append)+dict(no_replace)".
func mergeSpec(v any) string {
	switch m := v.(type) {
	case string:
		return strings.ReplaceAll(m, " ", "")
	case []any:
		var parts []string
		for _, item := range m {
			obj, ok := item.(map[string]any)
			if !ok {
				continue
			}
			name, _ := obj["name"].(string)
			var settings []string
			if list, ok := obj["settings"].([]any); ok {
				for _, s := range list {
					if str, ok := s.(string); ok {
						settings = append(settings, str)
					}
				}
			}
			parts = append(parts, name+"("+strings.Join(settings, ",")+")")
		}
		return strings.Join(parts, "+")
	}
	return ""
}

// applyWrites returns the content cloudinit.ConfigPath has after cloud-init wrote
// files, and whether any entry wrote it.
func applyWrites(files []writeFileEntry) (string, bool, error) {
	var conf strings.Builder
	found := false
	for _, deferred := range []bool{false, true} {
		for i, f := range files {
			if f.Defer != deferred || path.Clean(f.Path) != cloudinit.ConfigPath {
				continue
			}
			content, err := decodeContent(f)
			if err != nil {
				return "", false, fmt.Errorf("write_files entry %d for %s: %w", i+1, cloudinit.ConfigPath, err)
			}
			if !f.Append {
				conf.Reset()
			}
			conf.WriteString(content)
			found = true
		}
	}
	return conf.String(), found, nil
}

// decodeContent decodes a write_files entry's content by its encoding, as
// cloud-init's write_files module does.
func decodeContent(f writeFileEntry) (string, error) {
	enc := strings.ToLower(strings.TrimSpace(f.Encoding))
	var b64, gz bool
	switch enc {
	case "", "text/plain":
		return f.Content, nil
	case "b64", "base64":
		b64 = true
	case "gz", "gzip":
		gz = true
	case "gz+base64", "gzip+base64", "gz+b64", "gzip+b64":
		b64, gz = true, true
	default:
		return "", fmt.Errorf("unknown encoding %q", f.Encoding)
	}
	data := []byte(f.Content)
	if b64 {
		decoded, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(f.Content), ""))
		if err != nil {
			return "", fmt.Errorf("decoding base64 content: %w", err)
		}
		data = decoded
	}
	if gz {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return "", fmt.Errorf("decompressing gzip content: %w", err)
		}
		data, err = io.ReadAll(io.LimitReader(zr, maxUserData))
		if err != nil {
			return "", fmt.Errorf("decompressing gzip content: %w", err)
		}
	}
	return string(data), nil
}

// parseTinyproxyConf reads the Port, BasicAuth and Allow directives of a
// tinyproxy configuration. Directive names are case-insensitive, as in
// tinyproxy; other directives are ignored.
func parseTinyproxyConf(conf string) (Settings, error) {
	var s Settings
	var havePort, haveAuth bool
	sc := bufio.NewScanner(strings.NewReader(conf))
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		// Errors quote the line number and the directive, never a value.
		switch strings.ToLower(fields[0]) {
		case "port":
			if havePort {
				return Settings{}, fmt.Errorf("%s line %d: a second Port directive", cloudinit.ConfigPath, n)
			}
			if len(fields) != 2 {
				return Settings{}, fmt.Errorf("%s line %d: Port takes one value, found %d", cloudinit.ConfigPath, n, len(fields)-1)
			}
			port, err := strconv.ParseInt(fields[1], 10, 32)
			if err != nil || port < 1 || port > 65535 {
				return Settings{}, fmt.Errorf("%s line %d: Port is not a number in range 1-65535", cloudinit.ConfigPath, n)
			}
			s.Port, havePort = int32(port), true
		case "basicauth":
			if haveAuth {
				return Settings{}, fmt.Errorf("%s line %d: a second BasicAuth directive (Settings holds one user)", cloudinit.ConfigPath, n)
			}
			if len(fields) != 3 {
				return Settings{}, fmt.Errorf("%s line %d: BasicAuth takes a user and a password, found %d values", cloudinit.ConfigPath, n, len(fields)-1)
			}
			s.Username, s.Password, haveAuth = fields[1], fields[2], true
		case "allow":
			if len(fields) != 2 {
				return Settings{}, fmt.Errorf("%s line %d: Allow takes one value, found %d", cloudinit.ConfigPath, n, len(fields)-1)
			}
			p, err := parseAllow(fields[1])
			if err != nil {
				return Settings{}, fmt.Errorf("%s line %d: Allow is not an IP address or CIDR range", cloudinit.ConfigPath, n)
			}
			s.Allow = append(s.Allow, p)
		}
	}
	if err := sc.Err(); err != nil {
		return Settings{}, fmt.Errorf("reading %s: %w", cloudinit.ConfigPath, err)
	}
	if !havePort {
		return Settings{}, fmt.Errorf("%s has no Port directive", cloudinit.ConfigPath)
	}
	return s, nil
}

// parseAllow parses an Allow value: a CIDR range, or an address alone,
// which is a single-host range.
func parseAllow(v string) (netip.Prefix, error) {
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("parsing range: %w", err)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("parsing address: %w", err)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}
