package check

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/audioproof/audioproof/boundaries/policy"
	"github.com/audioproof/audioproof/boundaries/udiff"
)

func unified(a, b, x, y string) string { return udiff.Unified(a, b, x, y) }

// finding is one side's (index or disk) difference from the base.
type finding struct {
	kind   Kind
	detail string
	diff   string
	// hash is the content hash of an added path, for rename detection.
	hash plumbing.Hash
}

func typeOf(m filemode.FileMode) string {
	switch m {
	case filemode.Regular, filemode.Executable, filemode.Deprecated:
		return "file"
	case filemode.Symlink:
		return "symlink"
	case filemode.Submodule:
		return "submodule"
	case filemode.Dir:
		return "folder"
	}
	return "entry"
}

func (c *checker) diskMode(it *item) filemode.FileMode {
	fi := it.disk.info
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return filemode.Symlink
	case fi.IsDir():
		if c.gitlinks[it.path] {
			return filemode.Submodule
		}
		return filemode.Dir
	}
	if !c.fileMode {
		// core.fileMode=false: the executable bit on disk means nothing; the
		// index's mode stands for the file, as in git.
		if it.idx != nil && typeOf(it.idx.Mode) == "file" {
			return it.idx.Mode
		}
		if it.base != nil && typeOf(it.base.mode) == "file" {
			return it.base.mode
		}
		return filemode.Regular
	}
	if fi.Mode().Perm()&0o111 != 0 {
		return filemode.Executable
	}
	return filemode.Regular
}

// sameContent compares two contents after CRLF/LF normalisation.
func sameContent(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if !bytes.Contains(a, []byte("\r\n")) && !bytes.Contains(b, []byte("\r\n")) {
		return false
	}
	return bytes.Equal(bytes.ReplaceAll(a, []byte("\r\n"), []byte("\n")), bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n")))
}

// compareEntry compares a base entry with an entry of mode m and hash h whose
// content load returns.
func (c *checker) compareEntry(p string, base *baseEntry, m filemode.FileMode, h plumbing.Hash, load func() ([]byte, error), label string) (*finding, error) {
	bt, nt := typeOf(base.mode), typeOf(m)
	if bt != nt {
		return &finding{kind: KindType, detail: fmt.Sprintf("was a %s in the base, is a %s in the %s", bt, nt, label)}, nil
	}
	switch bt {
	case "submodule":
		if h != base.hash {
			return &finding{kind: KindSubmodule, detail: fmt.Sprintf("submodule at commit %s in the %s, %s in the base", short(h), label, short(base.hash))}, nil
		}
		return nil, nil
	case "symlink":
		if h == base.hash {
			return nil, nil
		}
		was, err := c.blob(base.hash)
		if err != nil {
			return nil, err
		}
		now, err := load()
		if err != nil {
			return nil, err
		}
		if bytes.Equal(was, now) {
			return nil, nil
		}
		return &finding{kind: KindSymlink, detail: fmt.Sprintf("symlink points to %q in the %s, %q in the base", now, label, was)}, nil
	}
	modeNote := ""
	if m != base.mode {
		modeNote = fmt.Sprintf("mode %o in the base, %o in the %s", uint32(base.mode), uint32(m), label)
	}
	// sameBytes is the verdict when only the mode may have changed.
	sameBytes := func() (*finding, error) {
		if modeNote != "" {
			return &finding{kind: KindMode, detail: modeNote}, nil
		}
		return nil, nil
	}
	if h == base.hash {
		return sameBytes()
	}
	was, err := c.blob(base.hash)
	if err != nil {
		return nil, err
	}
	now, err := load()
	if err != nil {
		return nil, err
	}
	if sameContent(was, now) {
		return sameBytes()
	}
	f := &finding{kind: KindModified, detail: "content differs from the base in the " + label,
		diff: textDiff(p, was, now, "base/"+p, label+"/"+p)}
	if modeNote != "" {
		f.detail += "; " + modeNote
	}
	return f, nil
}

func short(h plumbing.Hash) string { return h.String()[:12] }

// indexFinding compares the index entry with the base.
func (c *checker) indexFinding(it *item) (*finding, error) {
	switch {
	case it.base == nil && it.idx == nil:
		return nil, nil
	case it.base == nil:
		f := &finding{kind: KindAdded, detail: "in the index (staged or committed) but not in the base", hash: it.idx.Hash}
		if it.idx.IntentToAdd {
			f.detail = "added with git add -N (intent to add) but not in the base"
		}
		return f, nil
	case it.idx == nil:
		return &finding{kind: KindDeleted, detail: "removed from the index (staged or committed deletion)", diff: c.deletedDiff(it)}, nil
	}
	return c.compareEntry(it.path, it.base, it.idx.Mode, it.idx.Hash, func() ([]byte, error) { return c.blob(it.idx.Hash) }, "index")
}

// diskContent reads a regular file or a symlink's target.
func (c *checker) diskContent(it *item) ([]byte, error) {
	if it.disk.info.Mode()&fs.ModeSymlink != 0 {
		t, err := os.Readlink(c.abs(it.path))
		return []byte(t), err
	}
	return os.ReadFile(c.abs(it.path))
}

// unchangedByStat reports whether the index entry vouches for the file on
// disk: the index records the base's blob, and size and mtime match what git
// recorded, written before the index itself (not racily).
func (c *checker) unchangedByStat(it *item) bool {
	e, fi := it.idx, it.disk.info
	if e == nil || it.base == nil || e.Hash != it.base.hash || c.indexMtime.IsZero() || !fi.Mode().IsRegular() {
		return false
	}
	return fi.Size() == int64(e.Size) && fi.ModTime().Equal(e.ModifiedAt) && fi.ModTime().Before(c.indexMtime)
}

// diskFinding compares the file on disk with the base.
func (c *checker) diskFinding(it *item) (*finding, string, error) {
	where := InWorktree
	if it.disk != nil && it.disk.untracked {
		where = InUntracked
	}
	switch {
	case it.base == nil && it.disk == nil:
		return nil, where, nil
	case it.disk == nil && it.idx != nil && it.idx.SkipWorktree:
		return nil, where, nil // sparse checkout: not on disk by design; the index counts
	case it.disk == nil:
		return &finding{kind: KindDeleted, detail: "missing from the working tree", diff: c.deletedDiff(it)}, where, nil
	case it.base == nil:
		return c.addedFinding(it), where, nil
	}
	m := c.diskMode(it)
	if typeOf(m) == "submodule" && typeOf(it.base.mode) == "submodule" {
		head, ok := c.submoduleHead(it.path)
		if !ok {
			return nil, where, nil // not checked out: git does not compare it either
		}
		f, err := c.compareEntry(it.path, it.base, m, head, nil, "checked-out submodule")
		if f != nil || err != nil {
			return f, where, err
		}
		return c.submoduleDirty(it.path), where, nil
	}
	if typeOf(m) == "file" && typeOf(it.base.mode) == "file" && m == it.base.mode && c.unchangedByStat(it) {
		return nil, where, nil
	}
	var content []byte
	var h plumbing.Hash
	switch {
	case it.hashed:
		h, content = it.diskHash, it.content
	case typeOf(m) == "file" || typeOf(m) == "symlink":
		var err error
		if content, err = c.diskContent(it); err != nil {
			return nil, where, fmt.Errorf("%w: read %s: %v", ErrRepository, it.path, err)
		}
		h = plumbing.ComputeHash(plumbing.BlobObject, content)
	}
	load := func() ([]byte, error) {
		if content == nil && it.hashed {
			return c.diskContent(it)
		}
		return content, nil
	}
	f, err := c.compareEntry(it.path, it.base, m, h, load, "worktree")
	return f, where, err
}

// deletedDiff shows a deleted base file's content.
func (c *checker) deletedDiff(it *item) string {
	if typeOf(it.base.mode) != "file" {
		return ""
	}
	was, err := c.blob(it.base.hash)
	if err != nil {
		return ""
	}
	return textDiff(it.path, was, nil, "base/"+it.path, "/dev/null")
}

func (c *checker) addedFinding(it *item) *finding {
	f := &finding{kind: KindAdded, detail: "tracked (staged or committed) but not in the base"}
	if it.disk.untracked {
		f.detail = "untracked and not ignored, not in the base"
	}
	if it.disk.nestedGit {
		f.detail = "untracked nested repository, not in the base"
		return f
	}
	if it.disk.info.IsDir() {
		if h, ok := c.submoduleHead(it.path); ok {
			f.detail += fmt.Sprintf(" (submodule at %s)", short(h))
		}
		return f
	}
	content, err := c.diskContent(it)
	if err != nil {
		return f
	}
	f.hash = plumbing.ComputeHash(plumbing.BlobObject, content)
	if it.disk.info.Mode()&fs.ModeSymlink != 0 {
		f.detail += fmt.Sprintf(" (symlink to %q)", content)
		return f
	}
	f.diff = textDiff(it.path, nil, content, "/dev/null", "worktree/"+it.path)
	return f
}

// submoduleHead returns the commit checked out in the submodule at p.
func (c *checker) submoduleHead(p string) (plumbing.Hash, bool) {
	if _, err := os.Lstat(filepath.Join(c.abs(p), ".git")); err != nil {
		return plumbing.ZeroHash, false
	}
	sub, err := git.PlainOpenWithOptions(c.abs(p), &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if err != nil {
		return plumbing.ZeroHash, false
	}
	head, err := sub.Head()
	if err != nil {
		return plumbing.ZeroHash, false
	}
	return head.Hash(), true
}

// submoduleDirty checks a checked-out submodule's own working tree against
// its HEAD (every path protected): edits inside it are changes to the
// protected tree too, as git diff reports them ("-dirty").
func (c *checker) submoduleDirty(p string) *finding {
	pol, err := policy.Parse([]byte(`{"version": 1, "protected": ["**"]}`), "submodule "+p, nil)
	if err != nil {
		return nil
	}
	res, err := Run(Options{Dir: c.abs(p), Base: "HEAD", Policy: pol})
	if err != nil {
		return &finding{kind: KindSubmodule, detail: fmt.Sprintf("submodule working tree could not be checked: %v", err)}
	}
	if res.OK() {
		return nil
	}
	var parts []string
	var diff strings.Builder
	for i, v := range res.Violations {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("and %d more", len(res.Violations)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", v.Path, v.Kind))
		diff.WriteString(v.Diff)
	}
	return &finding{kind: KindSubmodule, detail: "submodule has uncommitted changes: " + strings.Join(parts, ", "), diff: diff.String()}
}

// compareAll compares every collected path and records violations.
func (c *checker) compareAll(res *Result) error {
	paths := make([]string, 0, len(c.items))
	for p := range c.items {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		it := c.items[p]
		if it.edit != nil {
			if err := c.compareEdit(it, res); err != nil {
				return err
			}
			continue
		}
		if it.conflict {
			c.add(Violation{Path: p, Kind: KindConflict, Where: []string{InIndex},
				Detail: "unmerged in the index (merge conflict); resolve it and stage the result"}, nil)
			continue
		}
		fi, err := c.indexFinding(it)
		if err != nil {
			return err
		}
		fd, where, err := c.diskFinding(it)
		if err != nil {
			return err
		}
		c.merge(p, fi, fd, where)
	}
	return nil
}

// merge turns the index and disk findings for p into at most one violation.
func (c *checker) merge(p string, fi, fd *finding, where string) {
	switch {
	case fi == nil && fd == nil:
		return
	case fi != nil && fd != nil:
		c.add(Violation{Path: p, Kind: fd.kind, Where: []string{InIndex, where}, Detail: fd.detail, Diff: fd.diff}, fd)
	case fd != nil:
		c.add(Violation{Path: p, Kind: fd.kind, Where: []string{where}, Detail: fd.detail, Diff: fd.diff}, fd)
	default:
		detail := fi.detail
		if fi.kind != KindDeleted || c.items[p].disk != nil {
			detail += "; the working tree matches the base, but the index (what the next commit records) does not: stage the working tree's version"
		}
		c.add(Violation{Path: p, Kind: fi.kind, Where: []string{InIndex}, Detail: detail, Diff: fi.diff}, fi)
	}
}

func (c *checker) add(v Violation, f *finding) {
	v.ProtectedBy = c.covering(v.Path)
	if f != nil && v.Kind == KindAdded && !f.hash.IsZero() {
		c.addedHash[len(c.violations)] = f.hash
	}
	c.violations = append(c.violations, v)
}

// compareEdit checks a file with allowed edits.
func (c *checker) compareEdit(it *item, res *Result) error {
	er := EditResult{Path: it.path, Verdict: "failed"}
	defer func() { res.Edits = append(res.Edits, er) }()
	for _, b := range it.edit.Blocks {
		er.Blocks = append(er.Blocks, BlockResult{Name: b.Name, Source: b.Source, Status: "not-checked"})
	}
	v := Violation{Path: it.path, Where: []string{InWorktree}}
	switch {
	case it.conflict:
		v.Kind, v.Where, v.Detail = KindConflict, []string{InIndex}, "unmerged in the index (merge conflict); resolve it and stage the result"
		c.add(v, nil)
		return nil
	case it.base == nil && it.disk == nil && it.idx == nil:
		v.Kind, v.Detail = KindMissing, "has allowed edits, but neither the base nor the working tree has this file; check the path in the policy"
		c.add(v, nil)
		return nil
	case it.base == nil:
		v.Kind, v.Detail = KindAdded, "has allowed edits, but the base has no such file: an allowed edit inserts blocks into a base file"
		if it.disk == nil {
			v.Where = []string{InIndex}
		} else if it.disk.untracked {
			v.Where = []string{InUntracked}
		}
		c.add(v, nil)
		return nil
	case typeOf(it.base.mode) != "file":
		fi, err := c.indexFinding(it)
		if err != nil {
			return err
		}
		fd, where, err := c.diskFinding(it)
		if err != nil {
			return err
		}
		c.merge(it.path, fi, fd, where)
		return nil
	case it.disk == nil:
		v.Kind, v.Detail = KindDeleted, "has allowed edits, but is missing from the working tree"
		c.add(v, nil)
		return nil
	}
	m := c.diskMode(it)
	if typeOf(m) != "file" {
		v.Kind, v.Detail = KindType, fmt.Sprintf("was a file in the base, is a %s in the worktree", typeOf(m))
		c.add(v, nil)
		return nil
	}
	baseText, err := c.blob(it.base.hash)
	if err != nil {
		return err
	}
	diskText, err := c.diskContent(it)
	if err != nil {
		return fmt.Errorf("%w: read %s: %v", ErrRepository, it.path, err)
	}
	out := applyEdit(it.path, string(baseText), string(diskText), it.edit.Blocks)
	er.Blocks = out.blocks
	problems := out.problems
	if m != it.base.mode {
		problems = append(problems, fmt.Sprintf("mode %o in the base, %o in the worktree", uint32(it.base.mode), uint32(m)))
	}
	// The index counts too when it holds a third version (neither the base's
	// nor the working tree's).
	diskHash := plumbing.ComputeHash(plumbing.BlobObject, diskText)
	if it.idx == nil {
		problems = append(problems, "removed from the index (staged or committed deletion)")
		v.Where = []string{InIndex, InWorktree}
	} else if it.idx.Hash != it.base.hash && it.idx.Hash != diskHash {
		idxText, err := c.blob(it.idx.Hash)
		if err != nil {
			return err
		}
		io := applyEdit(it.path, string(baseText), string(idxText), it.edit.Blocks)
		for _, p := range io.problems {
			problems = append(problems, "in the index: "+p)
		}
		if len(io.problems) > 0 {
			v.Where = []string{InIndex, InWorktree}
			if out.diff == "" {
				out.diff = io.diff
			}
		}
	}
	if len(problems) == 0 {
		er.Verdict = out.verdict
		return nil
	}
	v.Kind, v.Detail, v.Diff = KindAllowedEdit, strings.Join(problems, "; "), out.diff
	c.add(v, nil)
	return nil
}

type editOutcome struct {
	verdict  string
	blocks   []BlockResult
	problems []string
	diff     string
}

// applyEdit checks candidate against base under the allowed blocks.
func applyEdit(p, base, candidate string, blocks []policy.Block) editOutcome {
	b, rest := policy.NormalizeEOL(base), policy.NormalizeEOL(candidate)
	out := editOutcome{verdict: "unchanged"}
	for _, blk := range blocks {
		br := BlockResult{Name: blk.Name, Source: blk.Source, InBase: strings.Count(b, blk.Text), InTree: strings.Count(rest, blk.Text)}
		switch {
		case br.InBase > 0 && br.InTree == br.InBase:
			br.Status = "in-base"
		case br.InBase > 0 && br.InTree > br.InBase:
			br.Status = "duplicated"
			out.problems = append(out.problems, fmt.Sprintf("%s: %d copies, the base already has %d (a second copy is not allowed)", blk.Name, br.InTree, br.InBase))
		case br.InBase > 0:
			br.Status = "removed"
			out.problems = append(out.problems, fmt.Sprintf("%s: removed (the base has it)", blk.Name))
		case br.InTree == 1:
			br.Status = "inserted"
			out.verdict = "inserted"
			rest = strings.Replace(rest, blk.Text, "", 1)
		case br.InTree > 1:
			br.Status = "duplicated"
			out.problems = append(out.problems, fmt.Sprintf("%s: inserted %d times; it is allowed once", blk.Name, br.InTree))
			rest = strings.Replace(rest, blk.Text, "", 1)
		case blk.Optional:
			br.Status = "absent-optional"
		default:
			br.Status = "missing"
			out.problems = append(out.problems, fmt.Sprintf("%s: missing; the file must contain the block exactly once", blk.Name))
		}
		out.blocks = append(out.blocks, br)
	}
	if rest != b {
		out.problems = append(out.problems, "other changes besides the allowed blocks (diff below: base against the file with the allowed blocks taken out)")
		out.diff = textDiff(p, []byte(b), []byte(rest), "base/"+p, "worktree-without-allowed-blocks/"+p)
	}
	if len(out.problems) > 0 {
		out.verdict = "failed"
	}
	return out
}

// detectRenames pairs deletions with additions of identical content.
func (c *checker) detectRenames() {
	drop := map[int]bool{}
	addedIdx := make([]int, 0, len(c.addedHash))
	for j := range c.addedHash {
		addedIdx = append(addedIdx, j)
	}
	sort.Ints(addedIdx)
	for i := range c.violations {
		v := &c.violations[i]
		if v.Kind != KindDeleted {
			continue
		}
		it := c.items[v.Path]
		if it == nil || it.base == nil || typeOf(it.base.mode) == "submodule" {
			continue
		}
		to := ""
		for _, j := range addedIdx {
			if c.addedHash[j] == it.base.hash && !drop[j] {
				to = c.violations[j].Path
				drop[j] = true
				v.Where = union(v.Where, c.violations[j].Where)
				break
			}
		}
		if to == "" {
			for _, p := range c.indexPaths(it.base.hash) {
				if !c.protected(p) {
					to = p
					break
				}
			}
		}
		if to == "" {
			continue
		}
		v.Kind, v.RenamedTo, v.Diff = KindRenamed, to, ""
		v.Detail = fmt.Sprintf("renamed to %s (content unchanged)", to)
		if !c.protected(to) {
			v.Detail = fmt.Sprintf("moved out of the protected paths to %s (content unchanged)", to)
		}
	}
	if len(drop) == 0 {
		return
	}
	kept := c.violations[:0]
	for i, v := range c.violations {
		if !drop[i] {
			kept = append(kept, v)
		}
	}
	c.violations = kept
}

func (c *checker) indexPaths(h plumbing.Hash) []string {
	if c.indexByHash == nil {
		c.indexByHash = map[plumbing.Hash][]string{}
		for _, e := range c.idx.Entries {
			c.indexByHash[e.Hash] = append(c.indexByHash[e.Hash], e.Name)
		}
	}
	return c.indexByHash[h]
}

func union(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, x := range b {
		found := false
		for _, y := range out {
			found = found || x == y
		}
		if !found {
			out = append(out, x)
		}
	}
	return out
}

// summarise fills the per-entry verdicts and the repository counts.
func (c *checker) summarise(res *Result) {
	for _, e := range c.pol.Protected {
		er := EntryResult{Spec: e.Spec, Kind: string(e.Kind)}
		for p, it := range c.items {
			if !e.Matches(p) {
				continue
			}
			er.Files++
			if e.Kind != policy.KindGlob && p == e.Path {
				switch {
				case it.base != nil:
					er.Resolved = typeOf(it.base.mode)
				case it.idx != nil:
					er.Resolved = typeOf(it.idx.Mode)
				case it.disk != nil:
					er.Resolved = typeOf(c.diskMode(it))
				}
			}
		}
		for _, v := range c.violations {
			if e.Matches(v.Path) || (v.RenamedTo != "" && e.Matches(v.RenamedTo)) {
				er.Violations++
			}
		}
		switch {
		case e.Kind == policy.KindGlob:
			er.Resolved = "glob"
		case er.Resolved == "" && er.Files > 0:
			er.Resolved = "folder"
		case er.Resolved == "":
			er.Resolved = "absent"
		}
		switch {
		case er.Violations > 0:
			er.Verdict = "changed"
		case er.Files == 0:
			er.Verdict = "absent"
		default:
			er.Verdict = "unchanged"
		}
		res.Entries = append(res.Entries, er)
	}
	for _, v := range c.violations {
		for _, w := range v.Where {
			switch w {
			case InIndex:
				res.Repo.Staged++
			case InWorktree:
				res.Repo.Unstaged++
			case InUntracked:
				res.Repo.Untracked++
			}
		}
	}
}

// policyState notes whether the policy file and its block files differ from
// the base's copies: a change that loosens its own policy shows up here.
func (c *checker) policyState(res *Result, file string) {
	if file == "" {
		return
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	root := c.root
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil || strings.HasPrefix(rel, "..") {
		return
	}
	dir := filepath.ToSlash(filepath.Dir(rel))
	files := []string{filepath.ToSlash(rel)}
	for _, b := range c.pol.BlockFiles {
		if dir == "." {
			files = append(files, b)
		} else {
			files = append(files, dir+"/"+b)
		}
	}
	for i, f := range files {
		bf, err := c.tree.File(f)
		if err != nil {
			if i == 0 {
				res.PolicyChanged = true
				return
			}
			res.PolicyChanged = true
			continue
		}
		if i == 0 {
			res.PolicyInBase = true
		}
		was, err := bf.Contents()
		if err != nil {
			continue
		}
		now, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil || !sameContent([]byte(was), now) {
			res.PolicyChanged = true
		}
	}
}
