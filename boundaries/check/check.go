// Package check compares the protected paths of a git working tree with a base
// revision, using go-git only (no git binary).
//
// What counts is the tree as its user sees it: for every protected path the
// base commit's entry is compared with both the index (what is staged or
// committed) and the file on disk (tracked, or untracked and not ignored by
// .gitignore, .git/info/exclude or core.excludesFile). Either one differing
// from the base is a violation. Only protected paths are read: the check never
// walks or hashes the rest of the tree, so it stays fast on large repositories.
//
// Content is compared after turning CRLF into LF on both sides, so a file
// checked out with other line endings is unchanged. The executable bit counts
// unless core.fileMode is false (then only the index's mode counts, as in git).
//
// A file with allowed edits (policy.Edit) passes when, after line-ending
// normalisation, it equals the base plus exactly one inserted copy of each
// block the base lacks. A block the base already holds is part of the base:
// the file must then keep it as it is, and a second copy is a violation. A
// required block that is in neither is a violation; an optional one is not.
// So on a base that already carries the edit, the rule reduces to "unchanged".
package check

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/audioproof/audioproof/boundaries/policy"
)

// Errors a caller maps to "fix the invocation or the repository" (exit 2).
var (
	// ErrNotRepository: the folder is not inside a git working tree.
	ErrNotRepository = errors.New("boundaries: not a git repository")
	// ErrUnknownRef: the base revision does not resolve to a commit.
	ErrUnknownRef = errors.New("boundaries: unknown base revision")
	// ErrRepository: the repository could not be read.
	ErrRepository = errors.New("boundaries: cannot read the repository")
)

// Options say what to check.
type Options struct {
	// Dir is any folder inside the working tree; "" means the current folder.
	Dir string
	// Base is a revision go-git resolves: branch, remote branch, tag, hash, HEAD~2.
	Base string
	// Policy is what to enforce.
	Policy *policy.Policy
	// PolicyFile is the policy's file on disk ("" for a preset); when it lies
	// inside the working tree, the report says whether it differs from the base.
	PolicyFile string
}

// maxDiff bounds the diff kept per violation.
const maxDiff = 64 << 10

type baseEntry struct {
	mode filemode.FileMode
	hash plumbing.Hash
}

type diskEntry struct {
	info      os.FileInfo
	untracked bool
	nestedGit bool // an untracked folder holding its own repository
}

type item struct {
	path string
	base *baseEntry
	idx  *index.Entry
	// conflict is set when the index has unmerged stages for the path.
	conflict bool
	disk     *diskEntry
	edit     *policy.Edit
}

type checker struct {
	repo        *git.Repository
	root        string
	gitDir      string
	pol         *policy.Policy
	tree        *object.Tree
	idx         *index.Index
	fileMode    bool
	indexMtime  time.Time
	items       map[string]*item
	gitlinks    map[string]bool
	ign         *ignorer
	walkedDirs  map[string]bool
	violations  []Violation
	indexByHash map[plumbing.Hash][]string
	// addedHash maps the index of an "added" violation to its content hash.
	addedHash map[int]plumbing.Hash
}

// Run performs the check.
func Run(opts Options) (*Result, error) {
	start := time.Now()
	if opts.Policy == nil {
		return nil, errors.New("boundaries: no policy given")
	}
	dir := opts.Dir
	if dir == "" {
		dir = "."
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRepository, err)
	}
	repo, root, err := Open(abs)
	if err != nil {
		return nil, err
	}
	c := &checker{
		repo:       repo,
		root:       root,
		pol:        opts.Policy,
		items:      map[string]*item{},
		gitlinks:   map[string]bool{},
		walkedDirs: map[string]bool{},
		addedHash:  map[int]plumbing.Hash{},
		fileMode:   true,
	}
	if fs, ok := repo.Storer.(*filesystem.Storage); ok {
		c.gitDir = fs.Filesystem().Root()
	}

	res := &Result{BaseRef: opts.Base, Repo: Repository{Root: c.root}}
	if opts.Base == "" {
		return nil, fmt.Errorf("%w: no base given; pass --base origin/main (or any branch, tag or commit)", ErrUnknownRef)
	}
	h, err := repo.ResolveRevision(plumbing.Revision(opts.Base))
	if err != nil {
		return nil, fmt.Errorf("%w: %q does not resolve in %s (%v); fetch it first (git fetch origin) or pass a branch, tag or commit that exists", ErrUnknownRef, opts.Base, c.root, err)
	}
	commit, err := repo.CommitObject(*h)
	if err != nil {
		return nil, fmt.Errorf("%w: %q resolves to %s, which is not a readable commit: %v", ErrUnknownRef, opts.Base, h, err)
	}
	res.BaseCommit = commit.Hash.String()
	if c.tree, err = commit.Tree(); err != nil {
		return nil, fmt.Errorf("%w: base tree of %s: %v", ErrRepository, commit.Hash, err)
	}
	if head, err := repo.Head(); err == nil {
		res.Repo.Head = head.Hash().String()
		if head.Name().IsBranch() {
			res.Repo.Branch = head.Name().Short()
		}
	}
	if c.idx, err = repo.Storer.Index(); err != nil {
		return nil, fmt.Errorf("%w: read the index: %v", ErrRepository, err)
	}
	if c.gitDir != "" {
		if fi, err := os.Stat(filepath.Join(c.gitDir, "index")); err == nil {
			c.indexMtime = fi.ModTime()
		}
	}
	if cfg, err := repo.Config(); err == nil {
		if v := cfg.Raw.Section("core").Option("filemode"); strings.EqualFold(v, "false") {
			c.fileMode = false
		}
	}
	if c.ign, err = newIgnorer(c.root, c.gitDir, repo); err != nil {
		return nil, fmt.Errorf("%w: read ignore rules: %v", ErrRepository, err)
	}

	if err := c.collectBase(); err != nil {
		return nil, err
	}
	c.collectIndex()
	if err := c.collectDisk(); err != nil {
		return nil, err
	}
	if err := c.compareAll(res); err != nil {
		return nil, err
	}
	c.detectRenames()
	sort.SliceStable(c.violations, func(i, j int) bool { return c.violations[i].Path < c.violations[j].Path })
	res.Violations = c.violations
	res.Files = len(c.items)
	c.summarise(res)
	c.policyState(res, opts.PolicyFile)
	res.Elapsed = time.Since(start)
	return res, nil
}

// Open opens the repository whose working tree holds dir and returns it with
// the working tree's root folder.
func Open(dir string) (*git.Repository, string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrRepository, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, "", fmt.Errorf("%w: %s: %v; pass --repo with the checkout's folder", ErrNotRepository, abs, err)
	}
	repo, err := git.PlainOpenWithOptions(abs, &git.PlainOpenOptions{DetectDotGit: true, EnableDotGitCommonDir: true})
	if err != nil {
		if errors.Is(err, git.ErrRepositoryNotExists) {
			if _, berr := git.PlainOpen(abs); berr == nil {
				return nil, "", fmt.Errorf("%w: %s is a bare repository; the check needs a working tree (run it in a clone or a git worktree)", ErrNotRepository, abs)
			}
			return nil, "", fmt.Errorf("%w: %s is not inside a git working tree (no .git found here or above); pass --repo with the checkout's folder", ErrNotRepository, abs)
		}
		return nil, "", fmt.Errorf("%w: open %s: %v", ErrRepository, abs, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s is a bare repository; the check needs a working tree (run it in a clone or a git worktree)", ErrNotRepository, abs)
	}
	return repo, wt.Filesystem.Root(), nil
}

// covering lists the policy entries that cover p.
func (c *checker) covering(p string) []string {
	var out []string
	for _, e := range c.pol.Protected {
		if e.Matches(p) {
			out = append(out, e.Spec)
		}
	}
	if _, ok := c.pol.EditFor(p); ok {
		out = append(out, "allowed_edits")
	}
	return out
}

func (c *checker) protected(p string) bool {
	for _, e := range c.pol.Protected {
		if e.Matches(p) {
			return true
		}
	}
	_, ok := c.pol.EditFor(p)
	return ok
}

func (c *checker) get(p string) *item {
	it := c.items[p]
	if it == nil {
		it = &item{path: p}
		if e, ok := c.pol.EditFor(p); ok {
			it.edit = e
		}
		c.items[p] = it
	}
	return it
}

// collectBase records the base tree's entries under every protected entry.
func (c *checker) collectBase() error {
	add := func(p string, mode filemode.FileMode, h plumbing.Hash) {
		if mode == filemode.Dir {
			return
		}
		if !c.protected(p) {
			return
		}
		c.get(p).base = &baseEntry{mode: mode, hash: h}
		if mode == filemode.Submodule {
			c.gitlinks[p] = true
		}
	}
	cached := c.cacheTree()
	walk := func(prefix string) error {
		t := c.tree
		if prefix != "" {
			e, err := c.tree.FindEntry(prefix)
			if err != nil {
				return nil // not in the base
			}
			if e.Mode != filemode.Dir {
				add(prefix, e.Mode, e.Hash)
				return nil
			}
			if h, ok := cached[prefix]; ok && h == e.Hash {
				// The index's cache tree says the index holds exactly the
				// base's tree here: take the entries from the index.
				c.baseFromIndex(prefix, add)
				return nil
			}
			if t, err = c.tree.Tree(prefix); err != nil {
				return fmt.Errorf("%w: base tree %s: %v", ErrRepository, prefix, err)
			}
		}
		w := object.NewTreeWalker(t, true, nil)
		defer w.Close()
		for {
			name, e, err := w.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%w: walk the base tree under %q: %v", ErrRepository, prefix, err)
			}
			p := name
			if prefix != "" {
				p = prefix + "/" + name
			}
			add(p, e.Mode, e.Hash)
		}
	}
	done := map[string]bool{}
	prefixes := []string{}
	for _, e := range c.pol.Protected {
		prefixes = append(prefixes, e.Prefix)
	}
	for _, ed := range c.pol.Edits {
		prefixes = append(prefixes, ed.Path)
	}
	for _, p := range minimalPrefixes(prefixes) {
		if done[p] {
			continue
		}
		done[p] = true
		if err := walk(p); err != nil {
			return err
		}
	}
	return nil
}

// cacheTree returns the folder hashes recorded in the index's cache tree
// (the TREE extension git writes on commit), or nil when it is absent or any
// part of it is invalidated. git invalidates a folder and all its ancestors
// when an entry below changes, so a valid root means every entry is valid.
func (c *checker) cacheTree() map[string]plumbing.Hash {
	if c.idx.Cache == nil || len(c.idx.Cache.Entries) == 0 {
		return nil
	}
	es := c.idx.Cache.Entries
	if es[0].Path != "" || es[0].Entries != len(c.idx.Entries) {
		return nil
	}
	out := map[string]plumbing.Hash{}
	pos := 0
	var parse func(prefix string) bool
	parse = func(prefix string) bool {
		if pos >= len(es) {
			return false
		}
		e := es[pos]
		pos++
		p := e.Path
		if prefix != "" {
			p = prefix + "/" + e.Path
		}
		out[p] = e.Hash
		for i := 0; i < e.Trees; i++ {
			if !parse(p) {
				return false
			}
		}
		return true
	}
	if !parse("") || pos != len(es) {
		return nil
	}
	return out
}

// baseFromIndex records the index entries below folder prefix as base entries.
func (c *checker) baseFromIndex(prefix string, add func(string, filemode.FileMode, plumbing.Hash)) {
	lo := sort.Search(len(c.idx.Entries), func(i int) bool { return c.idx.Entries[i].Name >= prefix+"/" })
	for i := lo; i < len(c.idx.Entries); i++ {
		e := c.idx.Entries[i]
		if !strings.HasPrefix(e.Name, prefix+"/") {
			break
		}
		add(e.Name, e.Mode, e.Hash)
	}
}

// minimalPrefixes drops prefixes that lie below another one.
func minimalPrefixes(ps []string) []string {
	sort.Strings(ps)
	var out []string
	for _, p := range ps {
		covered := false
		for _, q := range out {
			if q == "" || p == q || strings.HasPrefix(p, q+"/") {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

// collectIndex records the index entries under protected paths.
func (c *checker) collectIndex() {
	for _, e := range c.idx.Entries {
		if !c.protected(e.Name) {
			continue
		}
		it := c.get(e.Name)
		// Stage 0 is a merged entry (go-git's index.Merged constant is 1, the
		// ancestor stage, so compare with 0).
		if e.Stage != 0 {
			it.conflict = true
			continue
		}
		it.idx = e
		if e.Mode == filemode.Submodule {
			c.gitlinks[e.Name] = true
		}
	}
}

// blob reads a blob's content.
func (c *checker) blob(h plumbing.Hash) ([]byte, error) {
	b, err := c.repo.BlobObject(h)
	if err != nil {
		return nil, fmt.Errorf("%w: read blob %s: %v", ErrRepository, h, err)
	}
	r, err := b.Reader()
	if err != nil {
		return nil, fmt.Errorf("%w: read blob %s: %v", ErrRepository, h, err)
	}
	defer r.Close()
	return io.ReadAll(r)
}

func isBinary(b []byte) bool {
	n := min(len(b), 8000)
	return bytes.IndexByte(b[:n], 0) >= 0
}

// textDiff returns a unified diff of a and b, bounded in size.
func textDiff(p string, a, b []byte, aLabel, bLabel string) string {
	if isBinary(a) || isBinary(b) {
		return fmt.Sprintf("Binary files %s and %s differ (%d -> %d bytes)\n", aLabel, bLabel, len(a), len(b))
	}
	d := unified(aLabel, bLabel, policy.NormalizeEOL(string(a)), policy.NormalizeEOL(string(b)))
	if len(d) > maxDiff {
		cut := strings.LastIndexByte(d[:maxDiff], '\n')
		d = d[:cut+1] + fmt.Sprintf("... diff cut at %d KiB\n", maxDiff>>10)
	}
	return d
}
