package harness

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/audioproof/audioproof/checkpoints/plan"
	"github.com/audioproof/audioproof/evidence/manifest"
)

// tinyRepo makes a git repository with a Go main package that prints msg,
// commits it, and returns the folder and the commit hash.
func tinyRepo(t *testing.T, msg string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":          "module example.com/tiny\n\ngo 1.22\n",
		"server/main.go":  "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"" + msg + "\") }\n",
		"scripts/run.sh":  "#!/bin/sh\necho run\n",
		"docs/readme.txt": "tiny\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if err := wt.AddGlob("."); err != nil {
		t.Fatal(err)
	}
	h, err := wt.Commit("tiny", &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@example.com", When: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	return dir, h.String()
}

func TestCheckoutCommitWritesTheTree(t *testing.T) {
	t.Parallel()
	repo, commit := tinyRepo(t, "committed")
	dst := t.TempDir()
	if err := CheckoutCommit(repo, commit, dst); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dst, "scripts/run.sh"))
	if err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("executable bit lost: %v %v", st, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dst, "docs/readme.txt")); string(data) != "tiny\n" {
		t.Fatalf("content %q", data)
	}
}

func TestRefBuildUsesTheCommitNotTheWorkingTree(t *testing.T) {
	t.Parallel()
	repo, commit := tinyRepo(t, "committed")
	// Change the working tree after the commit: the ref build must not see it.
	if err := os.WriteFile(filepath.Join(repo, "server/main.go"), []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"edited\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmds []manifest.Command
	var notes []string
	b := &builder{repoDir: repo, binDir: t.TempDir(), base: DefaultBase, cache: map[string]*built{},
		record: func(c manifest.Command) { cmds = append(cmds, c) }, notes: &notes}
	ref := b.build(context.Background(), &plan.Variant{Name: "upstream", Build: plan.Build{Source: plan.SourceRef, Package: "./server"}})
	if ref.Err != nil {
		t.Fatal(ref.Err)
	}
	// origin/main does not exist here: HEAD is used, with a note.
	if ref.Commit != commit || ref.Ref != "HEAD" || len(notes) != 1 || !strings.Contains(notes[0], `base ref "origin/main" does not exist`) {
		t.Fatalf("ref build %+v notes %v", ref, notes)
	}
	wt := b.build(context.Background(), &plan.Variant{Name: "candidate", Build: plan.Build{Source: plan.SourceWorktree, Package: "./server"}})
	if wt.Err != nil {
		t.Fatal(wt.Err)
	}
	run := func(bin string) string {
		out, err := exec.Command(bin).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run(ref.Binary); got != "committed" {
		t.Errorf("ref binary prints %q", got)
	}
	if got := run(wt.Binary); got != "edited" {
		t.Errorf("worktree binary prints %q", got)
	}
	// Built once per distinct source.
	again := b.build(context.Background(), &plan.Variant{Name: "other", Build: plan.Build{Source: plan.SourceWorktree, Package: "./server"}})
	if again != wt {
		t.Error("the working tree was built twice")
	}
	if len(cmds) != 3 { // go build (ref), checkout, go build (worktree)
		t.Errorf("commands recorded: %+v", cmds)
	}
	// An explicit ref that does not exist is an error that says what to do.
	b.base = "nope"
	bad := b.build(context.Background(), &plan.Variant{Name: "x", Build: plan.Build{Source: plan.SourceRef, Package: "./server"}})
	if bad.Err == nil || !strings.Contains(bad.Err.Error(), "pass --base with a ref that exists") {
		t.Errorf("err %v", bad.Err)
	}
}
