package check

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	git "github.com/go-git/go-git/v5"
)

// TestReadIndexMatchesGoGit decodes indexes of every version git writes,
// with extended flags, conflicts and long names, and compares each entry
// with go-git's own decoder.
func TestReadIndexMatchesGoGit(t *testing.T) {
	dir, _ := genRepo(t, 200, false)
	long := filepath.Join(dir, "src/models", "a-long-name-"+string(bytesOf('x', 230))+".c")
	if err := os.WriteFile(long, []byte("long"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "src/models/ita.c"), []byte("ita"), 0o644)
	runGit(t, dir, "add", "src/models/"+filepath.Base(long))
	runGit(t, dir, "add", "-N", "src/models/ita.c")
	runGit(t, dir, "update-index", "--skip-worktree", "docs/m00/p2/f00005.c")
	// A conflict: stages 1, 2 and 3 for one path.
	blob := strings.TrimSpace(runGit(t, dir, "rev-parse", "HEAD:docs/m00/p2/f00005.c"))
	cmd := exec.Command("git", "update-index", "--index-info")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(fmt.Sprintf("0 %s\tsrc/models/conflict.c\n100644 %s 1\tsrc/models/conflict.c\n100644 %s 2\tsrc/models/conflict.c\n100755 %s 3\tsrc/models/conflict.c\n",
		strings.Repeat("0", 40), blob, blob, blob))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("update-index --index-info: %v\n%s", err, out)
	}
	for _, version := range []string{"2", "3", "4"} {
		runGit(t, dir, "update-index", "--index-version", version)
		repo, err := git.PlainOpen(dir)
		if err != nil {
			t.Fatal(err)
		}
		want, err := repo.Storer.Index()
		if err != nil {
			t.Fatal(err)
		}
		got, err := readIndex(filepath.Join(dir, ".git"))
		if err != nil {
			t.Fatalf("version %s: %v", version, err)
		}
		if got.Version != want.Version || len(got.Entries) != len(want.Entries) {
			t.Fatalf("version %s: got v%d %d entries, go-git v%d %d", version, got.Version, len(got.Entries), want.Version, len(want.Entries))
		}
		skip, ita, stages := 0, 0, 0
		for i := range want.Entries {
			if !reflect.DeepEqual(*got.Entries[i], *want.Entries[i]) {
				t.Fatalf("version %s entry %d:\n got %+v\nwant %+v", version, i, *got.Entries[i], *want.Entries[i])
			}
			if got.Entries[i].SkipWorktree {
				skip++
			}
			if got.Entries[i].IntentToAdd {
				ita++
			}
			if got.Entries[i].Stage != 0 {
				stages++
			}
		}
		if skip != 1 || ita != 1 || stages != 3 {
			t.Errorf("version %s: %d skip-worktree, %d intent-to-add, %d conflict entries, want 1, 1, 3", version, skip, ita, stages)
		}
	}
}

func bytesOf(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}
