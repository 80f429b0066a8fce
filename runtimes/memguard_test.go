package runtimes

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
)

// write makes a file of size bytes under dir (creating folders).
func write(t *testing.T, dir, name string, size int) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEstimateMemory(t *testing.T) {
	root := t.TempDir()
	single := write(t, root, "single/w.bin", 1000)
	write(t, root, "single/aux.json", 24)

	named := filepath.Join(root, "named")
	write(t, named, "model.gguf", 2000)
	write(t, named, "other.gguf", 5000)
	write(t, named, "README", 10)

	sole := filepath.Join(root, "sole")
	write(t, sole, "x.GGUF", 3000)
	write(t, sole, "config.json", 100)
	write(t, sole, "notes.txt", 7)

	ambiguous := filepath.Join(root, "ambiguous")
	write(t, ambiguous, "a.gguf", 400)
	write(t, ambiguous, "b.gguf", 600)

	tree := filepath.Join(root, "tree")
	write(t, tree, "weights.bin", 100)
	write(t, tree, "sub/more.bin", 200)
	write(t, tree, "cfg.json", 50)
	outside := write(t, root, "outside.bin", 300)
	if err := os.Symlink(outside, filepath.Join(tree, "link.bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "gone"), filepath.Join(tree, "dangling")); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		m       config.Model
		ok      bool
		weights uint64
		files   string
	}{
		{"single file", config.Model{Path: single}, true, 1000, "w.bin"},
		{"single file plus relative aux config", config.Model{Path: single, Config: "aux.json"}, true, 1024, "aux.json"},
		{"absolute aux is not added", config.Model{Path: single, Config: filepath.Join(root, "single/aux.json")}, true, 1000, "w.bin"},
		{"missing aux is ignored", config.Model{Path: single, Weight: "nope.gguf"}, true, 1000, "w.bin"},
		{"folder with model.gguf", config.Model{Path: named}, true, 2000, "model.gguf"},
		{"weight selector beats model.gguf", config.Model{Path: named, Weight: "other.gguf"}, true, 5000, "other.gguf"},
		{"sole gguf plus config", config.Model{Path: sole, Config: "config.json"}, true, 3100, "x.GGUF"},
		{"sole gguf", config.Model{Path: sole}, true, 3000, "x.GGUF"},
		{"ambiguous multi-gguf folder is skipped", config.Model{Path: ambiguous}, false, 0, ""},
		{"weight selector resolves the ambiguity", config.Model{Path: ambiguous, Weight: "b.gguf"}, true, 600, "b.gguf"},
		{"plain tree counts every file once", config.Model{Path: tree, Config: "cfg.json"}, true, 650, "(whole folder)"},
		{"missing path is skipped", config.Model{Path: filepath.Join(root, "absent")}, false, 0, ""},
		{"empty path is skipped", config.Model{}, false, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fp, ok, err := EstimateMemory(c.m)
			if err != nil {
				t.Fatal(err)
			}
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v (%+v)", ok, c.ok, fp)
			}
			if !ok {
				return
			}
			if fp.Weights != c.weights {
				t.Errorf("weights = %d, want %d (%s)", fp.Weights, c.weights, fp.Files)
			}
			if want := c.weights + c.weights/2 + 128<<20; fp.Estimate != want {
				t.Errorf("estimate = %d, want 1.5 × %d + 128 MiB = %d", fp.Estimate, c.weights, want)
			}
			if !strings.Contains(fp.Files, c.files) {
				t.Errorf("files %q do not name %q", fp.Files, c.files)
			}
		})
	}
}

func TestParseMemAvailable(t *testing.T) {
	got, err := parseMemAvailable(strings.NewReader("MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   12345678 kB\nBuffers: 1 kB\n"))
	if err != nil || got != 12345678*1024 {
		t.Fatalf("parse = %d, %v; want %d", got, err, 12345678*1024)
	}
	for _, bad := range []string{"MemTotal: 1 kB\n", "MemAvailable: x kB\n", "MemAvailable: 12 MB\n"} {
		if _, err := parseMemAvailable(strings.NewReader(bad)); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
	if _, err := os.Stat("/proc/meminfo"); err == nil {
		free, err := HostMemAvailable()
		if err != nil || free == 0 {
			t.Fatalf("HostMemAvailable = %d, %v", free, err)
		}
	}
}

// guardFor builds a guard over fixed probes.
func guardFor(headroomMB int64, host func() (uint64, error), device func() (uint64, bool, error)) *MemoryGuard {
	cfg := config.Default()
	cfg.MinFreeMemoryMb = headroomMB
	return NewMemoryGuard(Options{Config: cfg, FreeMemory: host, FreeDeviceMemory: device})
}

func fixed(n uint64) func() (uint64, error) { return func() (uint64, error) { return n, nil } }

func TestMemoryGuardCheck(t *testing.T) {
	dir := t.TempDir()
	m := config.Model{ID: "big", Path: write(t, dir, "w.gguf", 2<<20)}
	// 1.5 × 2 MiB + 128 MiB = 131 MiB; plus 5 MiB of headroom = 136 MiB.
	const need = 136 << 20

	if g := guardFor(0, fixed(0), nil); g != nil || g.On() || g.Check(m) != nil {
		t.Fatal("min_free_memory_mb=0 must turn the guard off")
	}
	g := guardFor(5, fixed(need), nil)
	if !g.On() {
		t.Fatal("guard off with min_free_memory_mb=5")
	}
	if err := g.Check(m); err != nil {
		t.Fatalf("exactly enough free memory refused: %v", err)
	}
	err := guardFor(5, fixed(need-1), nil).Check(m)
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Type != apierror.TypeMemory {
		t.Fatalf("one byte short: err = %v, want 503 insufficient_memory", err)
	}
	for _, want := range []string{`model "big"`, "131.0 MiB", "2.0 MiB of weights in " + m.Path, "min_free_memory_mb=5", "136.0 MiB of host memory", "unload"} {
		if !strings.Contains(ae.Message, want) {
			t.Errorf("message %q does not mention %q", ae.Message, want)
		}
	}

	// Device memory is checked too, and only when the device reports it.
	err = guardFor(5, fixed(1<<40), func() (uint64, bool, error) { return need - 1, true, nil }).Check(m)
	if !apierror.Is(err, apierror.TypeMemory) || !strings.Contains(err.Error(), "memory on the compute device") {
		t.Fatalf("device short: %v", err)
	}
	if err := guardFor(5, fixed(1<<40), func() (uint64, bool, error) { return 0, false, nil }).Check(m); err != nil {
		t.Fatalf("a device without memory figures refused a load: %v", err)
	}
	if err := guardFor(5, fixed(1<<40), func() (uint64, bool, error) { return need, true, nil }).Check(m); err != nil {
		t.Fatalf("enough device memory refused: %v", err)
	}

	// Unreadable memory figures fail open (logged), as does a model without
	// an estimate (ambiguous folder).
	failing := func() (uint64, error) { return 0, errors.New("no /proc") }
	if err := guardFor(5, failing, nil).Check(m); err != nil {
		t.Fatalf("unreadable host memory refused the load: %v", err)
	}
	amb := t.TempDir()
	write(t, amb, "a.gguf", 1)
	write(t, amb, "b.gguf", 1)
	if err := guardFor(5, fixed(0), nil).Check(config.Model{ID: "amb", Path: amb}); err != nil {
		t.Fatalf("ambiguous multi-gguf folder refused: %v", err)
	}
	if err := guardFor(5, fixed(0), nil).Check(config.Model{ID: "ghost", Path: filepath.Join(amb, "none")}); err != nil {
		t.Fatalf("missing path refused: %v", err)
	}
}
