// Package archive writes evidence folders and packs them as
// evidence-<date>-<commit>.tar.gz with a SHA256SUMS file inside, reads them
// back, and verifies them: every hash, the manifest schema, and the results
// recomputed from the raw responses they contain.
package archive

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Standard file names inside an evidence folder.
const (
	SumsFile     = "SHA256SUMS"
	ManifestFile = "manifest.json"
	ResultsFile  = "results.json"
	SummaryFile  = "summary.md"
	JUnitFile    = "junit.xml"
)

// Name is the folder and archive base name: evidence-<UTC date-time>-<commit>.
func Name(created time.Time, commit string) string {
	c := commit
	if len(c) > 12 {
		c = c[:12]
	}
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("evidence-%s-%s", created.UTC().Format("20060102-150405"), c)
}

// Folder is an evidence folder being written.
type Folder struct {
	Dir string
}

// NewFolder creates dir (which must not exist yet, so runs never mix).
func NewFolder(dir string) (*Folder, error) {
	if _, err := os.Stat(dir); err == nil {
		return nil, fmt.Errorf("evidence folder %s already exists: remove it or choose another --out", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Folder{Dir: dir}, nil
}

// Path is the absolute path of a folder-relative name.
func (f *Folder) Path(rel string) string { return filepath.Join(f.Dir, filepath.FromSlash(rel)) }

// WriteFile writes data at a folder-relative path, creating folders.
func (f *Folder) WriteFile(rel string, data []byte) error {
	p := f.Path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

// WriteJSON writes v as indented JSON.
func (f *Folder) WriteJSON(rel string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return f.WriteFile(rel, append(data, '\n'))
}

// Pack writes SHA256SUMS into the folder (every regular file, sorted) and
// packs the folder as <parent>/<folder name>.tar.gz, whose entries all sit
// under the folder name. It returns the archive path.
func Pack(dir string) (string, error) {
	dir = filepath.Clean(dir)
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file; evidence folders hold plain files only", p)
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel != SumsFile {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	var sums bytes.Buffer
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sha256Hex(data), rel)
	}
	if err := os.WriteFile(filepath.Join(dir, SumsFile), sums.Bytes(), 0o644); err != nil {
		return "", err
	}
	files = append(files, SumsFile)
	out := dir + ".tar.gz"
	tmp := out + ".tmp"
	fh, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	gz := gzip.NewWriter(fh)
	tw := tar.NewWriter(gz)
	top := filepath.Base(dir)
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			fh.Close()
			return "", err
		}
		hdr := &tar.Header{Name: top + "/" + rel, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now().UTC().Truncate(time.Second), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			fh.Close()
			return "", err
		}
		if _, err := tw.Write(data); err != nil {
			fh.Close()
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		fh.Close()
		return "", err
	}
	if err := gz.Close(); err != nil {
		fh.Close()
		return "", err
	}
	if err := fh.Close(); err != nil {
		return "", err
	}
	return out, os.Rename(tmp, out)
}

// Archive is an evidence archive read into memory.
type Archive struct {
	Path  string
	Top   string            // the folder name every entry sits under
	Files map[string][]byte // folder-relative path -> content
}

// maxArchiveBytes bounds what Open reads, so a hostile archive cannot
// exhaust memory.
const maxArchiveBytes = 2 << 30

// Open reads an archive (.tar.gz) or an unpacked evidence folder.
func Open(p string) (*Archive, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("cannot open evidence %s: %w", p, err)
	}
	if st.IsDir() {
		return openDir(p)
	}
	fh, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	gz, err := gzip.NewReader(bufio.NewReader(fh))
	if err != nil {
		return nil, fmt.Errorf("%s is not a gzip archive: %w", p, err)
	}
	a := &Archive{Path: p, Files: map[string][]byte{}}
	tr := tar.NewReader(gz)
	var total int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: broken tar stream: %w", p, err)
		}
		if hdr.Typeflag == tar.TypeDir {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%s: entry %q is not a regular file", p, hdr.Name)
		}
		name := path.Clean(hdr.Name)
		top, rel, ok := strings.Cut(name, "/")
		if !ok || rel == "" || strings.HasPrefix(name, "/") || strings.Contains("/"+name+"/", "/../") {
			return nil, fmt.Errorf("%s: entry %q is not inside one evidence folder", p, hdr.Name)
		}
		if a.Top == "" {
			a.Top = top
		} else if a.Top != top {
			return nil, fmt.Errorf("%s: entries in two folders (%s and %s)", p, a.Top, top)
		}
		if _, dup := a.Files[rel]; dup {
			return nil, fmt.Errorf("%s: entry %q appears twice", p, rel)
		}
		total += hdr.Size
		if total > maxArchiveBytes {
			return nil, fmt.Errorf("%s: more than %d bytes of content", p, int64(maxArchiveBytes))
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: reading %s: %w", p, rel, err)
		}
		a.Files[rel] = data
	}
	if len(a.Files) == 0 {
		return nil, fmt.Errorf("%s: the archive is empty", p)
	}
	return a, nil
}

func openDir(dir string) (*Archive, error) {
	a := &Archive{Path: dir, Top: filepath.Base(filepath.Clean(dir)), Files: map[string][]byte{}}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		a.Files[filepath.ToSlash(rel)] = data
		return err
	})
	return a, err
}

// Read returns a file's content by folder-relative path.
func (a *Archive) Read(rel string) ([]byte, error) {
	data, ok := a.Files[rel]
	if !ok {
		return nil, fmt.Errorf("%s has no file %s", a.Path, rel)
	}
	return data, nil
}

// Names lists the files, sorted.
func (a *Archive) Names() []string {
	names := make([]string, 0, len(a.Files))
	for n := range a.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// JSON decodes a JSON file of the archive, rejecting unknown fields.
func (a *Archive) JSON(rel string, v any) error {
	data, err := a.Read(rel)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}
