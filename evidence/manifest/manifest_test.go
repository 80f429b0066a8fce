package manifest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
)

func TestSourceDirtyFilesAndRefs(t *testing.T) {
	dir := t.TempDir()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt", "a\n")
	write(".gitignore", "ignored/\n")
	wt, _ := repo.Worktree()
	if err := wt.AddGlob("."); err != nil {
		t.Fatal(err)
	}
	h, err := wt.Commit("one", &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@e", When: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	src, err := ReadSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	if src.Commit != h.String() || src.Dirty || len(src.DirtyFiles) != 0 {
		t.Fatalf("clean tree: %+v", src)
	}
	write("a.txt", "changed\n")
	write("new.txt", "n\n")
	if err := os.MkdirAll(filepath.Join(dir, "ignored"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("ignored/big.bin", "x")
	src, _ = ReadSource(filepath.Join(dir)) // from the root
	got := strings.Join(src.DirtyFiles, ",")
	if !src.Dirty || got != "?? new.txt,M a.txt" {
		t.Fatalf("dirty files %q", got)
	}
	if c, err := ResolveRef(dir, "HEAD"); err != nil || c != h.String() {
		t.Fatalf("HEAD %s %v", c, err)
	}
	if _, err := ResolveRef(dir, "origin/main"); err == nil {
		t.Fatal("a missing ref resolved")
	}
}

func TestDescribeAndValidate(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "voices", "en"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "voices", "en", "v"), []byte("v"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := New("checkpoints", "test")
	m.Source = Source{Commit: "abc", DirtyFiles: []string{}}
	if err := m.AddFile(RoleWeights, "w", filepath.Join(dir, "w.bin")); err != nil {
		t.Fatal(err)
	}
	if err := m.AddFile(RoleWeights, "voices", filepath.Join(dir, "voices")); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddFile(RoleExecutable, "test", exe); err != nil {
		t.Fatal(err)
	}
	f := m.Files
	// sha256("weights")
	if f[0].SHA256 != "9a129038d9a00aed0cf6a7ea059ca50a813449061ab87848cf1a13eafdf33b2c" || f[0].Size != 7 {
		t.Errorf("file %+v", f[0])
	}
	if !f[1].Tree || f[1].Count != 1 || f[1].Size != 1 {
		t.Errorf("tree %+v", f[1])
	}
	if f[2].GoVersion == "" || len(f[2].Settings) == 0 {
		t.Errorf("executable build info missing: %+v", f[2].GoVersion)
	}
	m.AddCommand(Command{Argv: []string{"go", "build"}})
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	// Round trip through JSON keeps it valid.
	data, _ := json.Marshal(m)
	var back Manifest
	if err := json.Unmarshal(data, &back); err != nil || back.Validate() != nil {
		t.Fatalf("round trip: %v %v", err, back.Validate())
	}
	back.Source.DirtyFiles = nil
	back.Files[0].SHA256 = "ABC"
	back.Commands = append(back.Commands, Command{})
	err = back.Validate()
	for _, want := range []string{"dirty_files is missing", "files[0] (", "commands[1]: argv is empty"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}
