package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Layers whose digests are known without reading them again. go-containerregistry's
// tarball.LayerFromFile hashes the compressed file and decompresses it for the diff ID every time
// an image is assembled: for the Debian base (177 MB) and an agent CLI (Claude Code's binary is
// 402 MB) that is seconds per build. The builder records both digests in a sidecar file when it
// writes (or first reads) a layer and trusts them while the layer file keeps its size and
// modification time.

// layerMeta is a layer's sidecar (<layer>.meta.json).
type layerMeta struct {
	Digest string `json:"digest"` // sha256 of the gzipped file
	DiffID string `json:"diffID"` // sha256 of the uncompressed tar
	Size   int64  `json:"size"`   // the gzipped file's size
	// ModTime is the layer file's modification time (UnixNano) when the digests were taken.
	ModTime int64 `json:"modTime"`
	// Files holds the content of a few small files read from the layer (the Debian base's
	// /etc/passwd and /etc/group, which the agent images extend).
	Files map[string]string `json:"files,omitempty"`
}

// fileLayer is a gzipped tar layer on disk with known digests; it implements v1.Layer.
type fileLayer struct {
	path string
	meta layerMeta
}

var _ v1.Layer = (*fileLayer)(nil)

func (l *fileLayer) Digest() (v1.Hash, error) { return v1.NewHash(l.meta.Digest) }
func (l *fileLayer) DiffID() (v1.Hash, error) { return v1.NewHash(l.meta.DiffID) }
func (l *fileLayer) Size() (int64, error)     { return l.meta.Size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) {
	return types.DockerLayer, nil
}
func (l *fileLayer) Compressed() (io.ReadCloser, error) { return os.Open(l.path) }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	gz, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{gz, closers{gz, f}}, nil
}

type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

func metaPath(layer string) string { return layer + ".meta.json" }

// openLayer returns the layer at p with its digests from the sidecar, or reads the layer once to
// compute them (and the content of the files named in extract) and writes the sidecar.
func openLayer(p string, extract ...string) (*fileLayer, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if raw, err := os.ReadFile(metaPath(p)); err == nil {
		var m layerMeta
		if json.Unmarshal(raw, &m) == nil && m.Size == st.Size() && m.ModTime == st.ModTime().UnixNano() && hasAll(m.Files, extract) {
			return &fileLayer{path: p, meta: m}, nil
		}
	}
	m, err := hashLayer(p, extract)
	if err != nil {
		return nil, fmt.Errorf("read layer %s: %w", p, err)
	}
	m.ModTime = st.ModTime().UnixNano()
	if err := writeMeta(p, m); err != nil {
		return nil, err
	}
	return &fileLayer{path: p, meta: m}, nil
}

func hasAll(files map[string]string, names []string) bool {
	for _, n := range names {
		if _, ok := files[n]; !ok {
			return false
		}
	}
	return true
}

// hashLayer reads a gzipped tar once: the digest of the file, the digest of the tar, and the
// named files' content.
func hashLayer(p string, extract []string) (layerMeta, error) {
	f, err := os.Open(p)
	if err != nil {
		return layerMeta{}, err
	}
	defer func() { _ = f.Close() }()
	compressed, uncompressed := sha256.New(), sha256.New()
	cr := &countingReader{r: io.TeeReader(bufio.NewReaderSize(f, 1<<20), compressed)}
	gz, err := gzip.NewReader(cr)
	if err != nil {
		return layerMeta{}, err
	}
	m := layerMeta{}
	tr := tar.NewReader(io.TeeReader(gz, uncompressed))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return layerMeta{}, err
		}
		name := strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")
		for _, want := range extract {
			if name == want && h.Typeflag == tar.TypeReg {
				b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
				if err != nil {
					return layerMeta{}, err
				}
				if m.Files == nil {
					m.Files = map[string]string{}
				}
				m.Files[want] = string(b)
			}
		}
	}
	// The tar's end-of-archive padding, then gzip's trailer: the digests cover every byte.
	if _, err := io.Copy(uncompressed, gz); err != nil {
		return layerMeta{}, err
	}
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return layerMeta{}, err
	}
	for _, want := range extract {
		if _, ok := m.Files[want]; !ok {
			return layerMeta{}, fmt.Errorf("the layer has no regular file %s", want)
		}
	}
	m.Digest, m.DiffID, m.Size = hexHash(compressed), hexHash(uncompressed), cr.n
	return m, nil
}

func hexHash(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func writeMeta(layer string, m layerMeta) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := metaPath(layer) + ".tmp"
	if err := os.WriteFile(tmp, append(raw, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, metaPath(layer))
}

// cachedLayer returns a layer of files kept in cacheDir, keyed by the files' description and
// their sources' size and modification time: a second build with the same inputs reuses it
// without reading a byte. Older layers of the same name are removed, so the cache holds one per
// image.
func cachedLayer(cacheDir, name string, files []imageFile) (*fileLayer, bool, error) {
	key, err := layerKey(files)
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, false, err
	}
	p := filepath.Join(cacheDir, fmt.Sprintf("%s-%s.tar.gz", name, key[:16]))
	if _, err := os.Stat(p); err == nil {
		if l, err := openLayer(p); err == nil {
			return l, true, nil
		}
	}
	tmp := p + ".tmp"
	m, err := writeLayer(tmp, files)
	if err != nil {
		_ = os.Remove(tmp)
		return nil, false, err
	}
	if err := os.Rename(tmp, p); err != nil {
		return nil, false, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, false, err
	}
	m.ModTime = st.ModTime().UnixNano()
	if err := writeMeta(p, m); err != nil {
		return nil, false, err
	}
	old, _ := filepath.Glob(filepath.Join(cacheDir, name+"-*.tar.gz"))
	for _, o := range old {
		if o != p && len(strings.TrimPrefix(filepath.Base(o), name+"-")) == len("0123456789abcdef.tar.gz") {
			_ = os.Remove(o)
			_ = os.Remove(metaPath(o))
		}
	}
	return &fileLayer{path: p, meta: m}, false, nil
}

// layerFormat is part of every cached layer's key: bump it when writeLayer changes what it writes.
const layerFormat = "v1"

// layerKey describes files (and their sources' size and modification time) as a hash.
func layerKey(files []imageFile) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "layer %s\n", layerFormat)
	for _, f := range files {
		fmt.Fprintf(h, "%q %o %d:%d dir=%t link=%q data=%x src=%q", f.Path, f.Mode, f.UID, f.GID, f.Dir, f.Link, sha256.Sum256(f.Data), f.Src)
		if f.Src != "" {
			st, err := os.Stat(f.Src)
			if err != nil {
				return "", err
			}
			if !st.Mode().IsRegular() {
				return "", fmt.Errorf("%s is not a regular file", f.Src)
			}
			fmt.Fprintf(h, " size=%d mtime=%d", st.Size(), st.ModTime().UnixNano())
		}
		fmt.Fprintln(h)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
