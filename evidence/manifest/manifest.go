// Package manifest describes what an evidence folder was made from: the
// source revision (with dirty files and the base it was compared against),
// the toolchain and modules, every executable, ggml library, weights and
// input file by size and sha256, the commands run and the environment that
// matters. manifest.json is checked by Validate; a reviewer recomputes the
// hashes to see that the files named are the files used.
package manifest

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// SchemaVersion is the manifest.json version this package writes and reads.
const SchemaVersion = 1

// File roles.
const (
	RoleExecutable = "executable"
	RoleLibrary    = "library"
	RoleWeights    = "weights"
	RoleInput      = "input"
	RoleAttachment = "attachment"
)

// Manifest is manifest.json.
type Manifest struct {
	SchemaVersion int               `json:"schema_version"`
	Kind          string            `json:"kind"` // "checkpoints", "boundaries", ...
	Tool          string            `json:"tool"` // the command that wrote it
	Created       time.Time         `json:"created"`
	Source        Source            `json:"source"`
	Build         Build             `json:"build"`
	Host          Host              `json:"host"`
	Files         []File            `json:"files"`
	Commands      []Command         `json:"commands"`
	Environment   map[string]string `json:"environment"`
}

// Source is the revision the evidence is about.
type Source struct {
	Repository string   `json:"repository"` // local path of the repository
	Remote     string   `json:"remote,omitempty"`
	Commit     string   `json:"commit"`
	Branch     string   `json:"branch,omitempty"`
	Dirty      bool     `json:"dirty"`
	DirtyFiles []string `json:"dirty_files"`
	BaseRef    string   `json:"base_ref,omitempty"`
	BaseCommit string   `json:"base_commit,omitempty"`
	BaseNote   string   `json:"base_note,omitempty"`
}

// Build is the toolchain that built the tool writing the manifest.
type Build struct {
	GoVersion string   `json:"go_version"`
	OS        string   `json:"os"`
	Arch      string   `json:"arch"`
	Flags     []string `json:"flags"` // build settings (-tags, CGO_ENABLED, vcs...)
	MainPath  string   `json:"main,omitempty"`
	Modules   []Module `json:"modules"`
}

// Module is one dependency module.
type Module struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	Sum     string `json:"sum,omitempty"`
}

// Host is the machine.
type Host struct {
	Hostname string `json:"hostname"`
	CPUs     int    `json:"cpus"`
	Kernel   string `json:"kernel,omitempty"`
}

// File is one file (or folder, hashed as a tree) the evidence depends on.
type File struct {
	Role   string `json:"role"`
	Name   string `json:"name,omitempty"` // what it is, e.g. the variant or model id
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Tree is set for folders: SHA256 is then the sha256 of the lines
	// "<sha256>  <relative path>\n" of every file, sorted by path.
	Tree  bool `json:"tree,omitempty"`
	Count int  `json:"file_count,omitempty"`
	// GoVersion and Modules are read from Go executables.
	GoVersion string   `json:"go_version,omitempty"`
	Modules   []Module `json:"modules,omitempty"`
	Settings  []string `json:"build_settings,omitempty"`
}

// Command is one command the run executed.
type Command struct {
	Argv     []string `json:"argv"`
	Dir      string   `json:"dir,omitempty"`
	Env      []string `json:"env,omitempty"` // variables set on top of the inherited environment
	Exit     *int     `json:"exit_status,omitempty"`
	Purpose  string   `json:"purpose,omitempty"`
	Duration int64    `json:"duration_ms,omitempty"`
}

// New starts a manifest with the build and host filled in.
func New(kind, tool string) *Manifest {
	m := &Manifest{SchemaVersion: SchemaVersion, Kind: kind, Tool: tool, Created: time.Now().UTC(),
		Files: []File{}, Commands: []Command{}, Environment: map[string]string{}}
	m.Build = CurrentBuild()
	host, _ := os.Hostname()
	m.Host = Host{Hostname: host, CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Host.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// CurrentBuild describes the running binary's toolchain and modules.
func CurrentBuild() Build {
	b := Build{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, Flags: []string{}, Modules: []Module{}}
	if info, ok := debug.ReadBuildInfo(); ok {
		b.MainPath = info.Path
		b.Modules = modules(info)
		b.Flags = settings(info)
	}
	return b
}

func modules(info *debug.BuildInfo) []Module {
	out := []Module{}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		out = append(out, Module{Path: d.Path, Version: d.Version, Sum: d.Sum})
	}
	return out
}

func settings(info *debug.BuildInfo) []string {
	out := []string{}
	for _, s := range info.Settings {
		out = append(out, s.Key+"="+s.Value)
	}
	return out
}

// CollectSource fills Source from the git repository containing dir; the
// caller sets BaseRef, BaseCommit and BaseNote (the harness may fall back
// from the requested base to another ref).
func (m *Manifest) CollectSource(dir string) error {
	src, err := ReadSource(dir)
	m.Source = src
	return err
}

// ReadSource reads the revision, remote and dirty files of the repository
// containing dir.
func ReadSource(dir string) (Source, error) {
	src := Source{DirtyFiles: []string{}}
	repo, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		src.Commit = "unknown"
		return src, fmt.Errorf("%s is not in a git repository: %w", dir, err)
	}
	wt, err := repo.Worktree()
	if err == nil {
		src.Repository = wt.Filesystem.Root()
	}
	if head, err := repo.Head(); err == nil {
		src.Commit = head.Hash().String()
		if head.Name().IsBranch() {
			src.Branch = head.Name().Short()
		}
	} else {
		src.Commit = "unknown"
	}
	if remotes, err := repo.Remotes(); err == nil && len(remotes) > 0 {
		sort.Slice(remotes, func(i, j int) bool { return remotes[i].Config().Name < remotes[j].Config().Name })
		if urls := remotes[0].Config().URLs; len(urls) > 0 {
			src.Remote = urls[0]
		}
	}
	src.DirtyFiles = dirtyFiles(repo, src.Repository)
	src.Dirty = len(src.DirtyFiles) > 0
	return src, nil
}

// dirtyFiles lists modified, added, deleted and untracked (not ignored)
// files. It asks the git command when there is one (go-git's status walks
// ignored trees slowly), and go-git otherwise.
func dirtyFiles(repo *git.Repository, root string) []string {
	files := []string{}
	if root != "" {
		if _, err := exec.LookPath("git"); err == nil {
			out, err := exec.Command("git", "-C", root, "status", "--porcelain=v1", "-z", "--untracked-files=all").Output()
			if err == nil {
				for _, rec := range strings.Split(string(out), "\x00") {
					if len(rec) > 3 {
						files = append(files, strings.TrimSpace(rec[:2])+" "+rec[3:])
					}
				}
				sort.Strings(files)
				return files
			}
		}
	}
	wt, err := repo.Worktree()
	if err != nil {
		return files
	}
	st, err := wt.StatusWithOptions(git.StatusOptions{Strategy: git.Preload})
	if err != nil {
		return files
	}
	for path, s := range st {
		if s.Worktree == git.Unmodified && s.Staging == git.Unmodified {
			continue
		}
		code := strings.TrimSpace(string([]byte{byte(s.Staging), byte(s.Worktree)}))
		files = append(files, code+" "+path)
	}
	sort.Strings(files)
	return files
}

// ResolveRef resolves a revision (branch, remote branch, tag, commit) in the
// repository containing dir to a commit hash.
func ResolveRef(dir, ref string) (string, error) {
	repo, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		return "", fmt.Errorf("%s is not in a git repository: %w", dir, err)
	}
	h, err := repo.ResolveRevision(plumbing.Revision(ref))
	if err != nil {
		return "", fmt.Errorf("cannot resolve git ref %q: %w", ref, err)
	}
	return h.String(), nil
}

// AddFile hashes a file or a folder (as a tree) and records it with its
// role. Go executables also get their toolchain and module versions.
func (m *Manifest) AddFile(role, name, path string) error {
	f, err := Describe(role, name, path)
	if err != nil {
		return err
	}
	for _, have := range m.Files {
		if have.Role == f.Role && have.Path == f.Path && have.Name == f.Name {
			return nil
		}
	}
	m.Files = append(m.Files, f)
	return nil
}

// Describe hashes a file or folder.
func Describe(role, name, path string) (File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return File{}, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return File{}, fmt.Errorf("cannot record %s %s: %w", role, path, err)
	}
	f := File{Role: role, Name: name, Path: abs}
	if st.IsDir() {
		f.Tree = true
		f.SHA256, f.Size, f.Count, err = hashTree(abs)
		return f, err
	}
	f.SHA256, f.Size, err = HashFile(abs)
	if err != nil {
		return f, err
	}
	if role == RoleExecutable {
		if info, err := buildinfo.ReadFile(abs); err == nil {
			f.GoVersion = info.GoVersion
			f.Modules = modules(info)
			f.Settings = settings(info)
		}
	}
	return f, nil
}

// HashFile returns the hex sha256 and size of a file.
func HashFile(path string) (string, int64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer fh.Close()
	h := sha256.New()
	n, err := io.Copy(h, fh)
	if err != nil {
		return "", 0, fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func hashTree(root string) (string, int64, int, error) {
	type entry struct{ rel, sum string }
	var entries []entry
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		sum, n, err := HashFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		entries = append(entries, entry{filepath.ToSlash(rel), sum})
		total += n
		return nil
	})
	if err != nil {
		return "", 0, 0, fmt.Errorf("hashing folder %s: %w", root, err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].rel < entries[j].rel })
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%s  %s\n", e.sum, e.rel)
	}
	return hex.EncodeToString(h.Sum(nil)), total, len(entries), nil
}

// EnvPrefixes are the environment variables recorded by CollectEnv: the ones
// that change how Go builds, how ggml picks devices, and CI.
var EnvPrefixes = []string{"GO", "CGO_", "GGML_", "VK_", "CUDA_", "AUDIOPROOF", "CI", "LD_LIBRARY_PATH", "PATH"}

// CollectEnv records the environment variables that matter.
func (m *Manifest) CollectEnv() {
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		for _, p := range EnvPrefixes {
			if k == p || strings.HasPrefix(k, p) {
				m.Environment[k] = v
				break
			}
		}
	}
}

// AddCommand records a command that was run.
func (m *Manifest) AddCommand(c Command) {
	if c.Argv == nil {
		c.Argv = []string{}
	}
	m.Commands = append(m.Commands, c)
}

var hexSHA = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks manifest.json against the schema: version, the required
// sections, and a well-formed entry for every file and command.
func (m *Manifest) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if m.SchemaVersion != SchemaVersion {
		bad("schema_version is %d, this tool reads %d", m.SchemaVersion, SchemaVersion)
	}
	if m.Kind == "" {
		bad("kind is missing")
	}
	if m.Tool == "" {
		bad("tool is missing")
	}
	if m.Created.IsZero() {
		bad("created is missing")
	}
	if m.Source.Commit == "" {
		bad("source.commit is missing")
	}
	if m.Source.DirtyFiles == nil {
		bad("source.dirty_files is missing (use [] for a clean tree)")
	}
	if m.Source.Dirty != (len(m.Source.DirtyFiles) > 0) {
		bad("source.dirty is %v but %d dirty files are listed", m.Source.Dirty, len(m.Source.DirtyFiles))
	}
	if m.Build.GoVersion == "" || m.Build.OS == "" || m.Build.Arch == "" {
		bad("build.go_version, build.os and build.arch are required")
	}
	if m.Build.Modules == nil || m.Build.Flags == nil {
		bad("build.modules and build.flags are required")
	}
	if m.Files == nil {
		bad("files is missing")
	}
	for i, f := range m.Files {
		switch f.Role {
		case RoleExecutable, RoleLibrary, RoleWeights, RoleInput, RoleAttachment:
		default:
			bad("files[%d]: unknown role %q", i, f.Role)
		}
		if f.Path == "" {
			bad("files[%d]: path is missing", i)
		}
		if f.Size < 0 {
			bad("files[%d]: negative size", i)
		}
		if !hexSHA.MatchString(f.SHA256) {
			bad("files[%d] (%s): sha256 %q is not 64 lowercase hex digits", i, f.Path, f.SHA256)
		}
	}
	if m.Commands == nil {
		bad("commands is missing")
	}
	for i, c := range m.Commands {
		if len(c.Argv) == 0 {
			bad("commands[%d]: argv is empty", i)
		}
	}
	if m.Environment == nil {
		bad("environment is missing")
	}
	if len(errs) > 0 {
		return fmt.Errorf("manifest.json does not match schema version %d: %s", SchemaVersion, strings.Join(errs, "; "))
	}
	return nil
}
