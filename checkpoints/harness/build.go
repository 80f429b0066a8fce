package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/audioproof/audioproof/checkpoints/plan"
	"github.com/audioproof/audioproof/evidence/manifest"
)

// built is a variant's executable.
type built struct {
	Binary string
	Source string
	Ref    string
	Commit string
	Err    error
}

// builder builds each distinct (source, ref, package) once.
type builder struct {
	repoDir string
	binDir  string
	base    string
	cache   map[string]*built
	record  func(manifest.Command)
	notes   *[]string
	// baseResolved is what the base ref resolved to (for the manifest).
	baseRef, baseCommit, baseNote string
}

func (b *builder) build(ctx context.Context, v *plan.Variant) *built {
	ref := v.Build.Ref
	if v.Build.Source == plan.SourceRef && ref == "" {
		ref = b.base
	}
	key := v.Build.Source + "|" + ref + "|" + v.Build.Package + "|" + v.Build.Path
	if r, ok := b.cache[key]; ok {
		return r
	}
	var r *built
	switch v.Build.Source {
	case plan.SourceWorktree:
		r = &built{Source: plan.SourceWorktree}
		if src, err := manifest.ReadSource(b.repoDir); err == nil {
			r.Commit = src.Commit
		}
		out := filepath.Join(b.binDir, "worktree-"+pkgName(v.Build.Package))
		r.Binary, r.Err = b.goBuild(ctx, b.repoDir, v.Build.Package, out, "build "+v.Build.Package+" from the working tree")
	case plan.SourceRef:
		r = b.buildRef(ctx, ref, v.Build.Package)
	case plan.SourceBinary:
		r = &built{Source: plan.SourceBinary}
		p := v.Build.Path
		if !filepath.IsAbs(p) {
			if lp, err := exec.LookPath(p); err == nil && !strings.Contains(p, "/") {
				p = lp
			} else {
				p = filepath.Join(b.repoDir, p)
			}
		}
		st, err := os.Stat(p)
		switch {
		case err != nil:
			r.Err = fmt.Errorf("external binary %s: %w", v.Build.Path, err)
		case st.IsDir() || st.Mode()&0o111 == 0:
			r.Err = fmt.Errorf("external binary %s is not an executable file", p)
		default:
			r.Binary = p
		}
	}
	b.cache[key] = r
	return r
}

func pkgName(pkg string) string {
	s := strings.Trim(strings.ReplaceAll(strings.TrimPrefix(pkg, "./"), "/", "-"), ".-")
	if s == "" {
		s = "main"
	}
	return s
}

func (b *builder) goBuild(ctx context.Context, dir, pkg, out, purpose string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	// The project's build (make build): no cgo, and -trimpath so that a
	// checkout in a temporary folder and the working tree embed the same paths.
	argv := []string{"go", "build", "-trimpath", "-o", out, pkg}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var outBuf strings.Builder
	cmd.Stdout = &outBuf
	cmd.Stderr = &outBuf
	start := time.Now()
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	b.record(manifest.Command{Argv: argv, Dir: dir, Env: []string{"CGO_ENABLED=0"}, Exit: &code, Purpose: purpose, Duration: time.Since(start).Milliseconds()})
	if err != nil {
		return "", fmt.Errorf("go build %s in %s failed: %v\n%s", pkg, dir, err, tail(outBuf.String(), 2000))
	}
	return out, nil
}

// ResolveBase resolves the base ref. The default base (origin/main) may not
// exist in a repository without a remote: then HEAD is used, with a note.
func ResolveBase(repoDir, ref string, defaultRef bool) (resolvedRef, commit, note string, err error) {
	c, err := manifest.ResolveRef(repoDir, ref)
	if err == nil {
		return ref, c, "", nil
	}
	if !defaultRef {
		return ref, "", "", fmt.Errorf("base ref %q: %w (pass --base with a ref that exists, e.g. HEAD or a commit)", ref, err)
	}
	c, err2 := manifest.ResolveRef(repoDir, "HEAD")
	if err2 != nil {
		return ref, "", "", fmt.Errorf("base ref %q does not exist and HEAD cannot be resolved: %v", ref, err2)
	}
	return "HEAD", c, fmt.Sprintf("base ref %q does not exist in this repository (no remote?); the upstream variant was built from HEAD (%s) instead, so it compares the working tree against the last commit", ref, c[:12]), nil
}

func (b *builder) buildRef(ctx context.Context, ref, pkg string) *built {
	r := &built{Source: plan.SourceRef, Ref: ref}
	resolved, commit, note, err := ResolveBase(b.repoDir, ref, ref == DefaultBase)
	if err != nil {
		r.Err = err
		return r
	}
	if ref == b.base {
		b.baseRef, b.baseCommit, b.baseNote = resolved, commit, note
		if note != "" {
			*b.notes = append(*b.notes, note)
		}
	}
	r.Ref, r.Commit = resolved, commit
	tmp, err := os.MkdirTemp("", "checkpoints-ref-")
	if err != nil {
		r.Err = err
		return r
	}
	defer os.RemoveAll(tmp)
	if err := CheckoutCommit(b.repoDir, commit, tmp); err != nil {
		r.Err = err
		return r
	}
	b.record(manifest.Command{Argv: []string{"go-git", "checkout", commit, tmp}, Purpose: "check out " + resolved + " into a temporary folder"})
	out := filepath.Join(b.binDir, "ref-"+commit[:12]+"-"+pkgName(pkg))
	r.Binary, r.Err = b.goBuild(ctx, tmp, pkg, out, "build "+pkg+" from "+resolved+" ("+commit[:12]+")")
	return r
}

// DefaultBase is the base ref of the default plan.
const DefaultBase = "origin/main"

// CheckoutCommit writes the tree of commit (in the repository containing
// repoDir) into dir with go-git: regular files, executables and symlinks.
// Submodules are skipped.
func CheckoutCommit(repoDir, commit, dir string) error {
	repo, err := git.PlainOpenWithOptions(repoDir, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		return fmt.Errorf("open repository %s: %w", repoDir, err)
	}
	c, err := repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return fmt.Errorf("commit %s: %w", commit, err)
	}
	tree, err := c.Tree()
	if err != nil {
		return err
	}
	return tree.Files().ForEach(func(f *object.File) error {
		dst := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		switch f.Mode {
		case filemode.Symlink:
			target, err := f.Contents()
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		case filemode.Submodule:
			return nil
		}
		rd, err := f.Reader()
		if err != nil {
			return err
		}
		defer rd.Close()
		perm := os.FileMode(0o644)
		if f.Mode == filemode.Executable {
			perm = 0o755
		}
		fh, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
		if err != nil {
			return err
		}
		if _, err := io.Copy(fh, rd); err != nil {
			fh.Close()
			return err
		}
		return fh.Close()
	})
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
