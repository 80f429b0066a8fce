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
	"sync"
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
	// MergeBase compares with the merge base of Base and HEAD (the fork
	// point) instead of Base itself, so upstream commits made after the
	// branch was cut do not count as changes.
	MergeBase bool
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
	// hashed is set when statTracked read the file: diskHash is its blob
	// hash, content its bytes when they differ from the base's.
	hashed   bool
	diskHash plumbing.Hash
	content  []byte
	readErr  error
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
	// dirLink caches whether a folder is a symlink; dirLinkMu guards it
	// (statTracked runs in parallel).
	dirLinkMu sync.Mutex
	dirLink   map[string]bool
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
		dirLink:    map[string]bool{},
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
	res.RefCommit = commit.Hash.String()
	if opts.MergeBase {
		head, err := repo.Head()
		if err != nil {
			return nil, fmt.Errorf("%w: --merge-base needs a HEAD commit: %v", ErrUnknownRef, err)
		}
		hc, err := repo.CommitObject(head.Hash())
		if err != nil {
			return nil, fmt.Errorf("%w: read HEAD %s: %v", ErrRepository, head.Hash(), err)
		}
		bases, err := hc.MergeBase(commit)
		if err != nil {
			return nil, fmt.Errorf("%w: merge base of HEAD and %q: %v", ErrRepository, opts.Base, err)
		}
		if len(bases) == 0 {
			return nil, fmt.Errorf("%w: HEAD and %q share no history, so they have no merge base; pass --base with a commit of the upstream history, without --merge-base", ErrUnknownRef, opts.Base)
		}
		commit = bases[0]
		res.MergeBase = true
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
	if c.gitDir != "" {
		c.idx, err = readIndex(c.gitDir)
	}
	if c.gitDir == "" || errors.Is(err, errIndexFormat) {
		c.idx, err = repo.Storer.Index()
	}
	if err != nil {
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
		if strings.Contains(err.Error(), "extension") {
			return nil, "", fmt.Errorf("%w: open %s: %v; go-git cannot read repositories that use this git extension (git sparse-checkout and per-worktree config set extensions.worktreeConfig): run the check in a plain clone", ErrRepository, abs, err)
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
// It descends the base tree like git diff-tree does against the index: a
// folder whose tree hash equals the hash the index's entries would write for
// it is taken from the index without reading the base's tree objects.
func (c *checker) collectBase() error {
	add := func(p string, mode filemode.FileMode, h plumbing.Hash) {
		if !c.protected(p) {
			return
		}
		c.get(p).base = &baseEntry{mode: mode, hash: h}
		if mode == filemode.Submodule {
			c.gitlinks[p] = true
		}
	}
	prefixes := []string{}
	for _, e := range c.pol.Protected {
		prefixes = append(prefixes, e.Prefix)
	}
	for _, ed := range c.pol.Edits {
		prefixes = append(prefixes, ed.Path)
	}
	roots := minimalPrefixes(prefixes)
	idxTrees := c.indexTreeHashes(roots)
	var descend func(prefix string, t *object.Tree) error
	descend = func(prefix string, t *object.Tree) error {
		for _, e := range t.Entries {
			p := e.Name
			if prefix != "" {
				p = prefix + "/" + e.Name
			}
			if e.Mode != filemode.Dir {
				add(p, e.Mode, e.Hash)
				continue
			}
			if !c.mayHold(p) {
				continue
			}
			if h, ok := idxTrees[p]; ok && h == e.Hash {
				c.baseFromIndex(p, add)
				continue
			}
			sub, err := c.repo.TreeObject(e.Hash)
			if err != nil {
				return fmt.Errorf("%w: base tree %s (%s): %v", ErrRepository, p, e.Hash, err)
			}
			if err := descend(p, sub); err != nil {
				return err
			}
		}
		return nil
	}
	for _, prefix := range roots {
		if prefix == "" {
			if err := descend("", c.tree); err != nil {
				return err
			}
			continue
		}
		e, err := c.tree.FindEntry(prefix)
		if err != nil {
			continue // not in the base
		}
		if e.Mode != filemode.Dir {
			add(prefix, e.Mode, e.Hash)
			continue
		}
		if h, ok := idxTrees[prefix]; ok && h == e.Hash {
			c.baseFromIndex(prefix, add)
			continue
		}
		t, err := c.repo.TreeObject(e.Hash)
		if err != nil {
			return fmt.Errorf("%w: base tree %s: %v", ErrRepository, prefix, err)
		}
		if err := descend(prefix, t); err != nil {
			return err
		}
	}
	return nil
}

// indexTreeHashes computes, for every folder below the given roots, the hash
// of the tree object git would write from the index (as git write-tree
// does). Folders holding conflicted or intent-to-add entries get no hash, so
// the base is read for them.
func (c *checker) indexTreeHashes(roots []string) map[string]plumbing.Hash {
	type child struct {
		name string
		mode filemode.FileMode
		hash plumbing.Hash
	}
	children := map[string][]child{}
	broken := map[string]bool{}
	under := func(p string) bool {
		for _, r := range roots {
			if r == "" || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return false
	}
	for _, e := range c.idx.Entries {
		if !under(e.Name) {
			continue
		}
		dir, name := "", e.Name
		if i := strings.LastIndexByte(e.Name, '/'); i >= 0 {
			dir, name = e.Name[:i], e.Name[i+1:]
		}
		if e.Stage != 0 || e.IntentToAdd || e.SkipWorktree {
			for d := dir; ; {
				broken[d] = true
				i := strings.LastIndexByte(d, '/')
				if i < 0 {
					break
				}
				d = d[:i]
			}
			continue
		}
		children[dir] = append(children[dir], child{name: name, mode: e.Mode, hash: e.Hash})
	}
	// Register every folder with its parent, deepest first.
	dirs := make([]string, 0, len(children))
	for d := range children {
		dirs = append(dirs, d)
	}
	seen := map[string]bool{}
	subdirs := map[string][]string{}
	for len(dirs) > 0 {
		d := dirs[len(dirs)-1]
		dirs = dirs[:len(dirs)-1]
		if seen[d] || d == "" {
			continue
		}
		seen[d] = true
		parent := ""
		if i := strings.LastIndexByte(d, '/'); i >= 0 {
			parent = d[:i]
		}
		if _, ok := children[parent]; !ok {
			children[parent] = nil
		}
		subdirs[parent] = append(subdirs[parent], d)
		dirs = append(dirs, parent)
	}
	out := map[string]plumbing.Hash{}
	var hashOf func(dir string) plumbing.Hash
	hashOf = func(dir string) plumbing.Hash {
		if h, ok := out[dir]; ok {
			return h
		}
		kids := append([]child(nil), children[dir]...)
		for _, sub := range subdirs[dir] {
			kids = append(kids, child{name: sub[strings.LastIndexByte(sub, '/')+1:], mode: filemode.Dir, hash: hashOf(sub)})
		}
		// Git orders tree entries by name, a folder's name compared as if it
		// ended with "/".
		key := func(k child) string {
			if k.mode == filemode.Dir {
				return k.name + "/"
			}
			return k.name
		}
		sort.Slice(kids, func(i, j int) bool { return key(kids[i]) < key(kids[j]) })
		var buf bytes.Buffer
		for _, k := range kids {
			fmt.Fprintf(&buf, "%o %s", uint32(k.mode), k.name)
			buf.WriteByte(0)
			buf.Write(k.hash[:])
		}
		h := plumbing.ComputeHash(plumbing.TreeObject, buf.Bytes())
		out[dir] = h
		return h
	}
	for d := range children {
		if !broken[d] {
			hashOf(d)
		}
	}
	for d := range broken {
		delete(out, d)
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
