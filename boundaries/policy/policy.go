// Package policy holds what a boundary check promises: the protected paths of
// a repository and the few edits allowed inside them. A policy is read from a
// versioned JSON file (boundaries.json) or taken from a built-in preset.
//
// File format, version 1:
//
//	{
//	  "version": 1,
//	  "description": "free text",
//	  "protected": ["app/cli", "src/models/", "include/**/*.h", "app/server/http.cpp"],
//	  "allowed_edits": [
//	    {
//	      "path": "app/server/runtime.cpp",
//	      "blocks": [
//	        {"name": "explicit-slots rejection", "file": "allowed/slots.txt"},
//	        {"name": "other", "text": "inline block\n", "optional": true}
//	      ]
//	    }
//	  ]
//	}
//
// A protected entry without glob characters (*, ?, [) names a file or a folder,
// as a git pathspec does: it covers the path itself and everything below it.
// A trailing slash restricts it to a folder. An entry with glob characters is
// matched against whole slash-separated paths; "**" matches any number of
// folders (including none), other segments follow path.Match.
//
// An allowed edit names one file and the blocks that may be inserted into it.
// The file is protected whether or not a protected entry covers it. A block is
// given inline ("text") or by a file ("file", relative to the policy file's
// folder). See package check for how the blocks are applied.
package policy

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Version is the policy file format this package reads.
const Version = 1

// DefaultFile is the policy file looked up at the repository root.
const DefaultFile = "boundaries.json"

// ErrInvalid marks every error caused by a malformed policy; callers use it
// to tell a bad policy from an unreadable one.
var ErrInvalid = errors.New("policy: invalid")

// EntryKind says how a protected entry matches paths.
type EntryKind string

// Entry kinds.
const (
	// KindPath covers a file or a folder and everything below it.
	KindPath EntryKind = "path"
	// KindFolder covers a folder and everything below it (written with a trailing slash).
	KindFolder EntryKind = "folder"
	// KindGlob covers every path the pattern matches.
	KindGlob EntryKind = "glob"
)

// Entry is one protected path, folder or glob.
type Entry struct {
	// Spec is the entry as written in the policy.
	Spec string
	// Kind is how Spec matches.
	Kind EntryKind
	// Path is the cleaned path (KindPath, KindFolder) or pattern (KindGlob).
	Path string
	// Prefix is the longest folder that holds every match: where a walk starts.
	// "" means the repository root.
	Prefix string
}

// Matches reports whether the slash-separated repository path p is covered.
func (e Entry) Matches(p string) bool {
	switch e.Kind {
	case KindPath:
		return p == e.Path || below(p, e.Path)
	case KindFolder:
		return below(p, e.Path)
	case KindGlob:
		return globMatch(strings.Split(e.Path, "/"), strings.Split(p, "/"))
	}
	return false
}

// below reports whether p lies inside folder dir (without allocating: it
// runs for every path the check looks at).
func below(p, dir string) bool {
	return len(p) > len(dir) && p[len(dir)] == '/' && strings.HasPrefix(p, dir)
}

// Block is one exact block of text an allowed edit may insert once.
type Block struct {
	// Name labels the block in reports.
	Name string
	// Text is the block, line endings normalised to LF.
	Text string
	// Source says where Text came from: "inline" or the file path as written.
	Source string
	// Optional blocks may be absent; a required block (the default) must be
	// present exactly once.
	Optional bool
}

// Edit is the set of blocks allowed in one file.
type Edit struct {
	// Path is the file, slash-separated, relative to the repository root.
	Path string
	// Blocks are applied in order.
	Blocks []Block
}

// Policy is a parsed, validated policy.
type Policy struct {
	// Source names where the policy came from: a file path or "preset:NAME".
	Source string
	// Version is the file format version.
	Version int
	// Description is free text from the file.
	Description string
	// Protected lists the entries in file order, duplicates removed.
	Protected []Entry
	// Edits lists the allowed edits, one per file, in file order.
	Edits []Edit
	// Raw is the policy file's bytes, for the evidence digest.
	Raw []byte
	// BlockFiles lists the block files read, slash-separated relative to the
	// policy file's folder, for the evidence manifest.
	BlockFiles []string
}

// EditFor returns the allowed edit for path p, if any.
func (p *Policy) EditFor(file string) (*Edit, bool) {
	for i := range p.Edits {
		if p.Edits[i].Path == file {
			return &p.Edits[i], true
		}
	}
	return nil, false
}

type fileBlock struct {
	Name     string  `json:"name"`
	Text     *string `json:"text"`
	File     string  `json:"file"`
	Optional bool    `json:"optional"`
}

type fileEdit struct {
	Path   string      `json:"path"`
	Blocks []fileBlock `json:"blocks"`
}

type file struct {
	Version      *int       `json:"version"`
	Description  string     `json:"description"`
	Protected    []string   `json:"protected"`
	AllowedEdits []fileEdit `json:"allowed_edits"`
}

// Load reads and validates the policy file at name. Block files are read
// relative to the policy file's folder.
func Load(name string) (*Policy, error) {
	raw, err := os.ReadFile(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: policy file %s does not exist: write one (see boundaries/README.md) or pass --preset", ErrInvalid, name)
		}
		return nil, fmt.Errorf("%w: read policy file: %v", ErrInvalid, err)
	}
	dir := filepath.Dir(name)
	return Parse(raw, name, func(rel string) ([]byte, error) {
		return os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	})
}

// Parse validates raw as a policy named source. readBlock reads a block file
// named in the policy; nil forbids block files.
func Parse(raw []byte, source string, readBlock func(rel string) ([]byte, error)) (*Policy, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, source, fmt.Sprintf(format, args...))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var f file
	if err := dec.Decode(&f); err != nil {
		return nil, bad("not a valid policy (%v); expected {\"version\": 1, \"protected\": [...], \"allowed_edits\": [...]}", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("trailing data after the policy object")
	}
	if f.Version == nil {
		return nil, bad("missing \"version\"; add \"version\": %d", Version)
	}
	if *f.Version != Version {
		return nil, bad("version %d is not supported; this tool reads version %d (upgrade the tool or rewrite the file)", *f.Version, Version)
	}
	p := &Policy{Source: source, Version: *f.Version, Description: f.Description, Raw: raw}
	seen := map[string]bool{}
	for i, spec := range f.Protected {
		e, err := parseEntry(spec)
		if err != nil {
			return nil, bad("protected[%d] %q: %v", i, spec, err)
		}
		key := string(e.Kind) + ":" + e.Path
		if seen[key] {
			continue
		}
		seen[key] = true
		p.Protected = append(p.Protected, e)
	}
	editIdx := map[string]int{}
	for i, fe := range f.AllowedEdits {
		clean, err := cleanPath(fe.Path)
		if err != nil {
			return nil, bad("allowed_edits[%d].path %q: %v", i, fe.Path, err)
		}
		if hasMeta(clean) {
			return nil, bad("allowed_edits[%d].path %q: must name one file, not a glob", i, fe.Path)
		}
		if len(fe.Blocks) == 0 {
			return nil, bad("allowed_edits[%d] (%s): no blocks; list at least one {\"text\": ...} or {\"file\": ...}", i, clean)
		}
		j, ok := editIdx[clean]
		if !ok {
			j = len(p.Edits)
			editIdx[clean] = j
			p.Edits = append(p.Edits, Edit{Path: clean})
		}
		for k, fb := range fe.Blocks {
			where := fmt.Sprintf("allowed_edits[%d].blocks[%d]", i, k)
			b := Block{Name: fb.Name, Optional: fb.Optional}
			switch {
			case fb.Text != nil && fb.File != "":
				return nil, bad("%s: give either \"text\" or \"file\", not both", where)
			case fb.Text != nil:
				b.Text, b.Source = *fb.Text, "inline"
			case fb.File != "":
				if readBlock == nil {
					return nil, bad("%s: block files are not allowed here; give the block inline as \"text\"", where)
				}
				rel, err := cleanPath(fb.File)
				if err != nil {
					return nil, bad("%s.file %q: %v", where, fb.File, err)
				}
				data, err := readBlock(rel)
				if err != nil {
					return nil, bad("%s: cannot read block file %q (relative to the policy file's folder): %v", where, fb.File, err)
				}
				b.Text, b.Source = string(data), rel
				p.BlockFiles = append(p.BlockFiles, rel)
			default:
				return nil, bad("%s: missing the block; give \"text\" or \"file\"", where)
			}
			b.Text = NormalizeEOL(b.Text)
			if strings.TrimSpace(b.Text) == "" {
				return nil, bad("%s: the block is empty", where)
			}
			if b.Name == "" {
				b.Name = fmt.Sprintf("block %d", len(p.Edits[j].Blocks)+1)
			}
			for _, other := range p.Edits[j].Blocks {
				if other.Text == b.Text {
					return nil, bad("%s: the same block is listed twice for %s", where, clean)
				}
			}
			p.Edits[j].Blocks = append(p.Edits[j].Blocks, b)
		}
	}
	if len(p.Protected) == 0 && len(p.Edits) == 0 {
		return nil, bad("protects nothing; list paths under \"protected\" or files under \"allowed_edits\"")
	}
	return p, nil
}

// NormalizeEOL turns CRLF line endings into LF.
func NormalizeEOL(s string) string {
	if !strings.Contains(s, "\r\n") {
		return s
	}
	return strings.ReplaceAll(s, "\r\n", "\n")
}

func parseEntry(spec string) (Entry, error) {
	folder := strings.HasSuffix(spec, "/")
	clean, err := cleanPath(spec)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Spec: spec, Path: clean, Kind: KindPath}
	if hasMeta(clean) {
		e.Kind = KindGlob
		segs := strings.Split(clean, "/")
		var prefix []string
		for _, s := range segs {
			if s != "**" {
				if _, err := path.Match(s, ""); err != nil {
					return Entry{}, fmt.Errorf("bad glob segment %q: %v", s, err)
				}
			}
		}
		for _, s := range segs[:len(segs)-1] {
			if hasMeta(s) {
				break
			}
			prefix = append(prefix, s)
		}
		e.Prefix = strings.Join(prefix, "/")
		if folder {
			// "dir/*/" : everything below the matched folders.
			e.Path += "/**"
		}
		return e, nil
	}
	if folder {
		e.Kind = KindFolder
	}
	e.Prefix = clean
	return e, nil
}

func cleanPath(p string) (string, error) {
	if strings.TrimSpace(p) == "" {
		return "", errors.New("empty path")
	}
	if strings.Contains(p, "\\") {
		return "", errors.New("use forward slashes")
	}
	if strings.HasPrefix(p, "/") {
		return "", errors.New("must be relative to the repository root")
	}
	c := path.Clean(p)
	if c == "." {
		return "", errors.New("names the whole repository; list the folders to protect")
	}
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", errors.New("points outside the repository")
	}
	if c == ".git" || strings.HasPrefix(c, ".git/") {
		return "", errors.New("points into .git")
	}
	return c, nil
}

func hasMeta(s string) bool { return strings.ContainsAny(s, "*?[") }

// globMatch matches pattern segments against path segments; "**" matches zero
// or more segments.
func globMatch(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			if len(rest) == 0 {
				return len(segs) > 0
			}
			for i := 0; i <= len(segs); i++ {
				if globMatch(rest, segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

//go:embed presets/*.json
var presetFS embed.FS

// Presets lists the built-in preset names.
func Presets() []string {
	entries, _ := presetFS.ReadDir("presets")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(names)
	return names
}

// Preset returns a built-in policy by name.
func Preset(name string) (*Policy, error) {
	raw, err := presetFS.ReadFile("presets/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("%w: unknown preset %q; known presets: %s", ErrInvalid, name, strings.Join(Presets(), ", "))
	}
	return Parse(raw, "preset:"+name, nil)
}
