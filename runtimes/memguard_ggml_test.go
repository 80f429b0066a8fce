package runtimes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/ggml"
	"github.com/audioproof/audioproof/server/session"
)

// TestMemoryGuardGGMLDevices checks the default device probe against the
// real ggml libraries (skipped without `make deps`): a CPU backend has no
// device memory to check; any other device's free memory is read afresh
// and a model larger than it is refused, naming the device.
func TestMemoryGuardGGMLDevices(t *testing.T) {
	dir := ggml.DefaultDir()
	if _, err := os.Stat(filepath.Join(dir, "libggml-base.so")); err != nil {
		t.Skipf("ggml libraries not found in %s: run make deps to test the device probe", dir)
	}
	if filepath.Base(dir) == "vulkan" {
		if _, err := ggml.PrepareVulkanEnv(nil); err != nil {
			t.Logf("Vulkan not prepared: %v", err)
		}
	}
	lib, err := ggml.Open(dir)
	if err != nil {
		t.Skipf("ggml libraries not usable: %v", err)
	}
	cfg := config.Default()
	cfg.MinFreeMemoryMb = 1
	huge := func() (uint64, error) { return 1 << 50, nil }
	small := config.Model{ID: "small", Path: write(t, t.TempDir(), "w.gguf", 1024)}

	cpu, err := lib.NewBackend("cpu", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	g := NewMemoryGuard(Options{Config: cfg, Env: session.Env{Compute: cpu}, FreeMemory: huge})
	if g.device != nil {
		t.Error("a CPU backend got a device memory probe; its memory is the host's")
	}
	if err := g.Check(small); err != nil {
		t.Fatalf("CPU: %v", err)
	}

	for _, d := range lib.Devices() {
		if d.Backend == "cpu" || d.Type == "cpu" {
			continue
		}
		t.Run(d.Name, func(t *testing.T) {
			b, err := lib.NewBackend(d.Backend, d.Ordinal, 1)
			if err != nil {
				t.Skipf("cannot open %s: %v", d.Name, err)
			}
			defer b.Close()
			g := NewMemoryGuard(Options{Config: cfg, Env: session.Env{Compute: b}, FreeMemory: huge})
			if g.device == nil {
				t.Fatalf("%s (%s) has no device probe", d.Name, d.Type)
			}
			free, ok, err := g.device()
			t.Logf("%s: %s free of %s (ok=%v, err=%v)", b, formatMiB(free), formatMiB(d.MemoryTotal), ok, err)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				t.Skipf("%s reports no memory figures", d.Name)
			}
			if free == 0 || free > d.MemoryTotal {
				t.Fatalf("free %d of total %d", free, d.MemoryTotal)
			}
			if err := g.Check(small); err != nil {
				t.Fatalf("a 1 KiB model refused on %s: %v", d.Name, err)
			}
			// Weights as large as the free device memory: 1.5× that never fits.
			f, err := os.Create(filepath.Join(t.TempDir(), "big.gguf"))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(int64(free)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			err = g.Check(config.Model{ID: "big", Path: f.Name()})
			if !apierror.Is(err, apierror.TypeMemory) || !strings.Contains(err.Error(), "memory on "+b.String()) {
				t.Fatalf("model of the device's free size: %v, want a refusal naming %s", err, b)
			}
		})
	}
}
