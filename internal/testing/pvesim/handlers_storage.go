package pvesim

import (
	"crypto/md5"  //nolint:gosec // G501: md5 is one of Proxmox's upload checksum algorithms.
	"crypto/sha1" //nolint:gosec // G505: sha1 is one of Proxmox's upload checksum algorithms.
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

// errNoSuchStorage is F23: a 400 with a storage field error, not a 500.
func errNoSuchStorage() *apiError {
	return paramError(map[string]string{"storage": "No such storage."})
}

// storageOn returns a storage usable on a node, or the F23 error.
func (s *Sim) storageOn(nodeName, id string) (*storage, *apiError) {
	st := s.storages[id]
	if st == nil || !st.availableOn(nodeName) {
		return nil, errNoSuchStorage()
	}
	return st, nil
}

// hStorageStatus answers GET /nodes/{node}/storage/{storage}/status (F23).
func (s *Sim) hStorageStatus(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, aerr := s.storageOn(c.node, c.params["storage"])
	if aerr != nil {
		return nil, aerr
	}
	total := int64(st.cfg.SizeGiB) << 30
	used := st.used(c.node)
	return map[string]any{
		"type": st.cfg.Type, "content": strings.Join(st.cfg.Content, ","), "shared": boolInt(st.cfg.Shared),
		"active": 1, "enabled": 1, "total": total, "used": used, "avail": max(total-used, 0),
	}, nil
}

// hStorageContent answers GET /nodes/{node}/storage/{storage}/content.
func (s *Sim) hStorageContent(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, aerr := s.storageOn(c.node, c.params["storage"])
	if aerr != nil {
		return nil, aerr
	}
	filter := c.params["content"]
	vmidFilter := c.params["vmid"]
	vols := st.vols(c.node)
	ids := make([]string, 0, len(vols))
	for id := range vols {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := []map[string]any{}
	for _, id := range ids {
		v := vols[id]
		if filter != "" && v.content != filter {
			continue
		}
		if vmidFilter != "" && itoa(v.vmid) != vmidFilter {
			continue
		}
		m := map[string]any{"volid": v.volid, "content": v.content, "format": v.format, "size": v.size, "ctime": v.ctime}
		if v.vmid != 0 {
			m["vmid"] = v.vmid
		}
		out = append(out, m)
	}
	return out, nil
}

// uploadExtensions are the accepted file name endings per content type
// (F12: otherwise "wrong file extension").
var uploadExtensions = map[string][]string{
	"iso":    {".iso", ".img"},
	"vztmpl": {".tar.gz", ".tar.xz", ".tar.zst"},
	"import": {".ova", ".ovf", ".qcow2", ".raw", ".vmdk"},
}

// sanitizeFilename replaces characters Proxmox does not keep in volume names.
func sanitizeFilename(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, name)
}

// newHash returns the hash of a Proxmox checksum algorithm.
func newHash(alg string) hash.Hash {
	switch alg {
	case "md5":
		return md5.New() //nolint:gosec // G401: requested by the client as an upload checksum.
	case "sha1":
		return sha1.New() //nolint:gosec // G401: requested by the client as an upload checksum.
	case "sha224":
		return sha256.New224()
	case "sha256":
		return sha256.New()
	case "sha384":
		return sha512.New384()
	case "sha512":
		return sha512.New()
	}
	return nil
}

// hUpload answers POST /nodes/{node}/storage/{storage}/upload (F12). The
// multipart body is streamed to a file in the simulator's upload directory
// (never held in memory), then an imgcopy task stores it; an existing
// volume of the same name is silently overwritten.
func (s *Sim) hUpload(c *call) (any, *apiError) {
	mr, err := c.r.MultipartReader()
	if err != nil {
		return nil, paramError(map[string]string{"filename": "property is missing and it is not optional"})
	}
	params := map[string]string{}
	var tmpPath string
	var size int64
	var sum string
	cleanup := func() {
		if tmpPath != "" {
			_ = os.Remove(tmpPath)
		}
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			cleanup()
			return nil, errInternal(fmt.Sprintf("error reading upload: %v", err))
		}
		name := part.FormName()
		if part.FileName() == "" {
			b, err := io.ReadAll(io.LimitReader(part, 64<<10))
			_ = part.Close()
			if err != nil {
				cleanup()
				return nil, errInternal(fmt.Sprintf("error reading upload: %v", err))
			}
			params[name] = string(b)
			continue
		}
		params[name] = part.FileName()
		if tmpPath != "" {
			_ = part.Close()
			continue
		}
		f, err := os.CreateTemp(s.uploadDir, "pveupload-")
		if err != nil {
			_ = part.Close()
			return nil, errInternal(fmt.Sprintf("unable to create upload file: %v", err))
		}
		tmpPath = f.Name()
		var w io.Writer = f
		h := newHash(params["checksum-algorithm"])
		if h != nil {
			w = io.MultiWriter(f, h)
		}
		size, err = io.Copy(w, part)
		_ = part.Close()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			cleanup()
			return nil, errInternal(fmt.Sprintf("error reading upload: %v", err))
		}
		if h != nil {
			sum = hex.EncodeToString(h.Sum(nil))
		}
	}
	for k, v := range c.params {
		params[k] = v
	}
	if errs := s.schemaFor(http.MethodPost, "/nodes/{node}/storage/{storage}/upload").validate(params); len(errs) > 0 {
		cleanup()
		return nil, paramError(errs)
	}
	content := params["content"]
	filename := sanitizeFilename(params["filename"])
	okExt := false
	for _, ext := range uploadExtensions[content] {
		if strings.HasSuffix(strings.ToLower(filename), ext) {
			okExt = true
		}
	}
	if !okExt {
		cleanup()
		return nil, paramError(map[string]string{"filename": "wrong file extension"}) // F12
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.storages[params["storage"]]
	if st == nil || !st.availableOn(c.node) {
		cleanup()
		return nil, errInternal(fmt.Sprintf("storage '%s' does not exist", params["storage"]))
	}
	if !st.supports(content) {
		cleanup()
		return nil, paramError(map[string]string{"content": fmt.Sprintf("storage '%s' does not support '%s' content", st.cfg.ID, content)})
	}
	volid := st.cfg.ID + ":" + content + "/" + filename
	c.volume = volid
	t := s.newTask(c.node, "imgcopy", "", c.p)
	t.logf("starting file import from: %s", tmpPath)
	if want := params["checksum"]; want != "" && sum != "" {
		if !strings.EqualFold(want, sum) {
			t.logf("calculated checksum: %s", sum)
			s.afterTask(t, s.timing.Upload, func() { t.finish("checksum verification failed") })
			return t.upid, nil
		}
		t.logf("checksum verified")
	}
	t.logf("target node: %s", c.node)
	t.logf("target file: /var/lib/vz/template/%s/%s", content, filename)
	t.logf("file size is: %d", size)
	path := tmpPath
	s.afterTask(t, s.timing.Upload, func() {
		if t.failed() {
			_ = os.Remove(path)
			t.finish("")
			return
		}
		vols := st.vols(c.node)
		if old := vols[volid]; old != nil && old.path != "" && old.path != path {
			_ = os.Remove(old.path) // F12: overwrite.
		}
		vols[volid] = &volume{volid: volid, content: content, format: content, size: size, ctime: time.Now().Unix(), path: path}
		t.logf("finished file import successfully")
		t.finish("")
	})
	return t.upid, nil
}

// schemaFor returns the schema of an endpoint (empty when unknown).
func (s *Sim) schemaFor(method, tmpl string) *endpointSchema {
	if e := s.schema[tmpl+" "+method]; e != nil {
		return e
	}
	return &endpointSchema{}
}

// hDeleteVolume answers DELETE .../content/{volume} (F13): it needs
// Datastore.Allocate on the storage, runs as an imgdel task, and succeeds
// for a volume that does not exist.
func (s *Sim) hDeleteVolume(c *call) (any, *apiError) {
	stID := c.params["storage"]
	aclPath := "/storage/" + stID
	if !c.p.has(aclPath, "Datastore.Allocate") {
		return nil, errPerm(aclPath, "Datastore.Allocate")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, aerr := s.storageOn(c.node, stID)
	if aerr != nil {
		return nil, aerr
	}
	volid := c.params["volume"]
	if !strings.Contains(volid, ":") {
		volid = stID + ":" + volid
	}
	t := s.newTask(c.node, "imgdel", volid, c.p)
	s.afterTask(t, s.timing.VolumeDelete, func() {
		if t.failed() {
			t.finish("")
			return
		}
		vols := st.vols(c.node)
		if v := vols[volid]; v != nil {
			if v.path != "" {
				_ = os.Remove(v.path)
			}
			delete(vols, volid)
		} else {
			t.logf("volume '%s' does not exist", volid)
		}
		t.logf("Removed volume '%s'", volid)
		t.finish("")
	})
	return t.upid, nil
}

// VolumePath returns the file holding an uploaded volume (a NoCloud seed,
// for a GuestRunner), as seen from a node.
func (s *Sim) VolumePath(nodeName, volid string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stID, _, _ := strings.Cut(volid, ":")
	st := s.storages[stID]
	if st == nil {
		return "", false
	}
	v := st.vols(nodeName)[volid]
	if v == nil || v.path == "" {
		return "", false
	}
	return v.path, true
}
