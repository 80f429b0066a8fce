package check

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// ignorer answers "is this untracked path ignored?" the way git does, reading
// only the .gitignore files on the way to the paths it is asked about.
type ignorer struct {
	root string
	// base holds core.excludesFile and .git/info/exclude, lowest priority first.
	base []gitignore.Pattern
	// byDir caches the patterns that apply inside a folder ("" = root).
	byDir map[string][]gitignore.Pattern
	// ignoredDir caches whether a folder is itself ignored.
	ignoredDir map[string]bool
}

func newIgnorer(root, gitDir string, repo *git.Repository) (*ignorer, error) {
	ig := &ignorer{root: root, byDir: map[string][]gitignore.Pattern{}, ignoredDir: map[string]bool{}}
	excludes := ""
	if cfg, err := repo.Config(); err == nil {
		excludes = cfg.Raw.Section("core").Option("excludesfile")
	}
	if excludes == "" {
		if cfg, err := config.LoadConfig(config.GlobalScope); err == nil {
			excludes = cfg.Raw.Section("core").Option("excludesfile")
		}
	}
	if excludes == "" {
		if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
			excludes = filepath.Join(x, "git", "ignore")
		} else if home, err := os.UserHomeDir(); err == nil {
			excludes = filepath.Join(home, ".config", "git", "ignore")
		}
	} else if strings.HasPrefix(excludes, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			excludes = filepath.Join(home, excludes[2:])
		}
	}
	if excludes != "" {
		ps, err := readPatterns(excludes, nil)
		if err != nil {
			return nil, err
		}
		ig.base = append(ig.base, ps...)
	}
	if gitDir != "" {
		// A linked worktree's git folder names the shared one in "commondir";
		// info/exclude lives there.
		common := gitDir
		if b, err := os.ReadFile(filepath.Join(gitDir, "commondir")); err == nil {
			common = strings.TrimSpace(string(b))
			if !filepath.IsAbs(common) {
				common = filepath.Join(gitDir, common)
			}
		}
		ps, err := readPatterns(filepath.Join(common, "info", "exclude"), nil)
		if err != nil {
			return nil, err
		}
		ig.base = append(ig.base, ps...)
	}
	return ig, nil
}

// readPatterns parses one ignore file; a missing file has no patterns.
func readPatterns(name string, domain []string) ([]gitignore.Pattern, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || isNotDir(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	var ps []gitignore.Pattern
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		ps = append(ps, gitignore.ParsePattern(line, domain))
	}
	return ps, sc.Err()
}

func isNotDir(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "not a directory")
}

func splitPath(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// patterns returns the patterns in force inside folder dir.
func (ig *ignorer) patterns(dir string) ([]gitignore.Pattern, error) {
	if ps, ok := ig.byDir[dir]; ok {
		return ps, nil
	}
	var parent []gitignore.Pattern
	if dir == "" {
		parent = ig.base
	} else {
		pd := path.Dir(dir)
		if pd == "." {
			pd = ""
		}
		var err error
		if parent, err = ig.patterns(pd); err != nil {
			return nil, err
		}
	}
	own, err := readPatterns(filepath.Join(ig.root, filepath.FromSlash(dir), ".gitignore"), splitPath(dir))
	if err != nil {
		return nil, err
	}
	ps := parent
	if len(own) > 0 {
		ps = make([]gitignore.Pattern, 0, len(parent)+len(own))
		ps = append(append(ps, parent...), own...)
	}
	ig.byDir[dir] = ps
	return ps, nil
}

// ignored reports whether path p (a folder when isDir) is ignored, counting a
// path inside an ignored folder as ignored.
func (ig *ignorer) ignored(p string, isDir bool) (bool, error) {
	dir := path.Dir(p)
	if dir == "." {
		dir = ""
	}
	if dir != "" {
		ok, err := ig.dirIgnored(dir)
		if err != nil || ok {
			return ok, err
		}
	}
	ps, err := ig.patterns(dir)
	if err != nil {
		return false, err
	}
	return gitignore.NewMatcher(ps).Match(splitPath(p), isDir), nil
}

func (ig *ignorer) dirIgnored(dir string) (bool, error) {
	if v, ok := ig.ignoredDir[dir]; ok {
		return v, nil
	}
	v, err := ig.ignored(dir, true)
	if err != nil {
		return false, err
	}
	ig.ignoredDir[dir] = v
	return v, nil
}

// collectDisk records what is on disk under the protected entries: tracked
// paths always, untracked ones unless ignored.
func (c *checker) collectDisk() error {
	var prefixes []string
	for _, e := range c.pol.Protected {
		prefixes = append(prefixes, e.Prefix)
	}
	for _, ed := range c.pol.Edits {
		prefixes = append(prefixes, ed.Path)
	}
	for _, p := range minimalPrefixes(prefixes) {
		if err := c.visit(p); err != nil {
			return err
		}
	}
	return c.statTracked()
}

// statTracked looks up every tracked protected path on disk, in parallel, and
// hashes the regular files that the index cannot vouch for. The walk above
// only discovers untracked files; tracked ones (also inside ignored folders,
// or below a path that became a file) are found here.
func (c *checker) statTracked() error {
	var todo []*item
	for _, it := range c.items {
		if it.base != nil || it.idx != nil || it.conflict {
			todo = append(todo, it)
		}
	}
	workers := min(max(2*runtime.GOMAXPROCS(0), 2), 16, len(todo))
	var wg sync.WaitGroup
	next := make(chan *item)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range next {
				c.statOne(it)
			}
		}()
	}
	for _, it := range todo {
		next <- it
	}
	close(next)
	wg.Wait()
	for _, it := range todo {
		if it.readErr != nil {
			return fmt.Errorf("%w: read %s: %v", ErrRepository, it.path, it.readErr)
		}
	}
	return nil
}

// statOne fills it.disk and, for a regular file the index does not vouch
// for, its content hash. It only writes to it, so items can be done in
// parallel.
func (c *checker) statOne(it *item) {
	if c.leadingSymlink(it.path) {
		// A folder on the way became a symlink: git no longer sees this
		// path (it would record the symlink and delete what was below).
		it.disk = nil
		return
	}
	fi, err := os.Lstat(c.abs(it.path))
	if err != nil {
		it.disk = nil
		return
	}
	it.disk = &diskEntry{info: fi}
	if !fi.Mode().IsRegular() || it.base == nil || typeOf(it.base.mode) != "file" || c.unchangedByStat(it) {
		return
	}
	data, err := os.ReadFile(c.abs(it.path))
	if err != nil {
		it.readErr = err
		return
	}
	it.hashed = true
	it.diskHash = plumbing.ComputeHash(plumbing.BlobObject, data)
	if it.diskHash != it.base.hash {
		it.content = data // kept for the comparison and the diff
	}
}

func (c *checker) abs(p string) string { return filepath.Join(c.root, filepath.FromSlash(p)) }

// visit records path p (file or folder) and, for a folder, what lies below it.
func (c *checker) visit(p string) error {
	var fi os.FileInfo
	var err error
	if p == "" {
		fi, err = os.Stat(c.root)
	} else {
		fi, err = os.Lstat(c.abs(p))
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || isNotDir(err) {
			return nil
		}
		return fmt.Errorf("%w: %v", ErrRepository, err)
	}
	if !fi.IsDir() || c.gitlinks[p] {
		return c.record(p, fi)
	}
	if p != "" {
		ign, err := c.ign.ignored(p, true)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRepository, err)
		}
		if ign {
			return nil // tracked paths inside are looked up one by one
		}
	}
	return c.walk(p)
}

func (c *checker) walk(dir string) error {
	if c.walkedDirs[dir] {
		return nil
	}
	c.walkedDirs[dir] = true
	des, err := os.ReadDir(c.abs(dir))
	if err != nil {
		return fmt.Errorf("%w: read folder %s: %v", ErrRepository, c.abs(dir), err)
	}
	for _, de := range des {
		name := de.Name()
		if name == ".git" {
			continue
		}
		p := name
		if dir != "" {
			p = dir + "/" + name
		}
		if de.IsDir() {
			if c.gitlinks[p] {
				fi, err := de.Info()
				if err != nil {
					continue
				}
				if err := c.record(p, fi); err != nil {
					return err
				}
				continue
			}
			ign, err := c.ign.ignored(p, true)
			if err != nil {
				return fmt.Errorf("%w: %v", ErrRepository, err)
			}
			if ign {
				continue
			}
			if _, err := os.Lstat(filepath.Join(c.abs(p), ".git")); err == nil {
				// An untracked repository inside the tree: git shows it as
				// one untracked entry and does not look inside.
				if c.protected(p) {
					fi, _ := de.Info()
					c.get(p).disk = &diskEntry{info: fi, untracked: true, nestedGit: true}
				}
				continue
			}
			if !c.mayHold(p) {
				continue
			}
			if err := c.walk(p); err != nil {
				return err
			}
			continue
		}
		if !de.Type().IsRegular() && de.Type()&fs.ModeSymlink == 0 {
			continue // sockets, pipes, devices: git does not track them
		}
		if !c.protected(p) {
			continue
		}
		if it := c.items[p]; it != nil && (it.base != nil || it.idx != nil || it.conflict) {
			continue // tracked: looked up by statTracked
		}
		fi, err := de.Info()
		if err != nil {
			continue // removed while walking
		}
		if err := c.record(p, fi); err != nil {
			return err
		}
	}
	return nil
}

// mayHold reports whether folder dir may hold protected paths.
func (c *checker) mayHold(dir string) bool {
	for _, e := range c.pol.Protected {
		if e.Prefix == "" || dir == e.Prefix || strings.HasPrefix(dir, e.Prefix+"/") || strings.HasPrefix(e.Prefix, dir+"/") {
			return true
		}
	}
	for _, ed := range c.pol.Edits {
		if strings.HasPrefix(ed.Path, dir+"/") {
			return true
		}
	}
	return false
}

// record notes a path found on disk.
func (c *checker) record(p string, fi os.FileInfo) error {
	if !c.protected(p) {
		return nil
	}
	it := c.items[p]
	if it != nil && (it.base != nil || it.idx != nil || it.conflict) {
		return nil // tracked: looked up by statTracked
	}
	ign, err := c.ign.ignored(p, fi.IsDir())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRepository, err)
	}
	if ign {
		return nil
	}
	c.get(p).disk = &diskEntry{info: fi, untracked: true}
	return nil
}

// leadingSymlink reports whether a folder on the way to p is a symlink.
func (c *checker) leadingSymlink(p string) bool {
	for i := strings.IndexByte(p, '/'); i >= 0; {
		dir := p[:i]
		c.dirLinkMu.Lock()
		link, ok := c.dirLink[dir]
		c.dirLinkMu.Unlock()
		if !ok {
			fi, err := os.Lstat(c.abs(dir))
			link = err == nil && fi.Mode()&fs.ModeSymlink != 0
			c.dirLinkMu.Lock()
			c.dirLink[dir] = link
			c.dirLinkMu.Unlock()
		}
		if link {
			return true
		}
		j := strings.IndexByte(p[i+1:], '/')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}
